/**
 * The Postgres MdmStore (src/store/mdm-types.ts). Writes that read first run in one transaction that locks
 * the rows it decides on (FOR UPDATE); two replicas racing past that (two new rows for one identity key or
 * one serial) meet the partial unique indexes, and the loser's transaction is retried once, then seen as
 * the refusal it is. consume is one DELETE ... RETURNING: a command is consumed at most once.
 */
import { and, desc, eq, gt, ne, or } from "drizzle-orm";
import { planBind } from "../mdm-rules.ts";
import type { MdmBindResult, MdmEnrolment, MdmStore } from "../mdm-types.ts";
import type { PgDb } from "./open.ts";
import { isUniqueViolation } from "./order.ts";
import { accounts, mdmChains, mdmCommands, mdmEnrolments, providerTokens } from "./schema.ts";

type Tx = Parameters<Parameters<PgDb["transaction"]>[0]>[0];

const LIVE_KEY = "mdm_enrolments_live_key_idx";
const ENROLLED_SERIAL = "mdm_enrolments_enrolled_serial_idx";

/** Runs `fn` again once when a partial unique index refused it (a concurrent writer won). */
async function retryOnce<T>(fn: () => Promise<T>, constraint: string, lost: () => T): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn();
    } catch (e) {
      if (!isUniqueViolation(e, constraint)) throw e;
      if (attempt > 0) return lost();
    }
  }
}

export function pgMdm(db: PgDb): MdmStore {
  const first = async <T>(rows: Promise<T[]>): Promise<T | undefined> => (await rows)[0];
  const byId = (q: PgDb | Tx, id: string) => first(q.select().from(mdmEnrolments).where(eq(mdmEnrolments.id, id)));
  const checkOut = async (tx: Tx, id: string, at: number) => {
    await tx.update(mdmEnrolments).set({ state: "checked_out", updatedAt: at }).where(eq(mdmEnrolments.id, id));
    await tx.delete(mdmCommands).where(eq(mdmCommands.enrolmentId, id));
  };
  return {
    enrolments: {
      create: (input) =>
        retryOnce(
          () =>
            db.transaction(async (tx) => {
              const account = await first(tx.select({ id: accounts.id }).from(accounts).where(eq(accounts.id, input.accountId)));
              const token = await first(
                tx.select({ id: providerTokens.id }).from(providerTokens).where(eq(providerTokens.id, input.providerTokenId)),
              );
              if (!account || !token) return undefined;
              const live = await tx
                .select({ id: mdmEnrolments.id })
                .from(mdmEnrolments)
                .where(and(eq(mdmEnrolments.identityKey, input.identityKey), ne(mdmEnrolments.state, "checked_out")))
                .for("update");
              for (const old of live) await checkOut(tx, old.id, input.createdAt);
              await tx
                .insert(mdmEnrolments)
                .values({ ...input, nanomdmId: null, serial: null, state: "issued", updatedAt: input.createdAt });
              return byId(tx, input.id);
            }),
          LIVE_KEY,
          () => {
            throw new Error("mdm enrolment create lost twice to concurrent creates of the same identity key");
          },
        ),
      get: (id) => byId(db, id),
      findByTokenHash: (hash) => first(db.select().from(mdmEnrolments).where(eq(mdmEnrolments.tokenHash, hash))),
      forAccount: (accountId) =>
        db
          .select()
          .from(mdmEnrolments)
          .where(eq(mdmEnrolments.accountId, accountId))
          .orderBy(desc(mdmEnrolments.createdAt), desc(mdmEnrolments.id)),
      byIdentityKey: (key) =>
        first(
          db
            .select()
            .from(mdmEnrolments)
            .where(and(eq(mdmEnrolments.identityKey, key), ne(mdmEnrolments.state, "checked_out"))),
        ),
      byNanomdmId: (id) =>
        first(
          db
            .select()
            .from(mdmEnrolments)
            .where(and(eq(mdmEnrolments.nanomdmId, id), eq(mdmEnrolments.state, "enrolled"))),
        ),
      bind: ({ tokenHash, nanomdmId, serial, at }) =>
        retryOnce<MdmBindResult>(
          () =>
            db.transaction(async (tx): Promise<MdmBindResult> => {
              const enrolment = await first(tx.select().from(mdmEnrolments).where(eq(mdmEnrolments.tokenHash, tokenHash)).for("update"));
              const others: MdmEnrolment[] = await tx
                .select()
                .from(mdmEnrolments)
                .where(
                  and(eq(mdmEnrolments.state, "enrolled"), or(eq(mdmEnrolments.serial, serial), eq(mdmEnrolments.nanomdmId, nanomdmId))),
                )
                .for("update");
              const plan = planBind(enrolment, others, { nanomdmId, serial, at });
              if (plan.kind === "refuse") return plan.result;
              if (plan.kind === "same") return { ok: true, enrolment: plan.enrolment };
              for (const id of plan.supersede) await checkOut(tx, id, at);
              const id = (enrolment as MdmEnrolment).id;
              await tx.update(mdmEnrolments).set({ nanomdmId, serial, state: "enrolled", updatedAt: at }).where(eq(mdmEnrolments.id, id));
              const bound = await byId(tx, id);
              if (!bound) throw new Error("bound enrolment vanished");
              return { ok: true, enrolment: bound };
            }),
          ENROLLED_SERIAL,
          () => ({ ok: false, reason: "serial_taken" }),
        ),
      checkOut: (id, at) =>
        db.transaction(async (tx) => {
          const e = await first(tx.select().from(mdmEnrolments).where(eq(mdmEnrolments.id, id)).for("update"));
          if (!e) return undefined;
          if (e.state !== "checked_out") await checkOut(tx, id, at);
          return byId(tx, id);
        }),
    },
    commands: {
      issue: (command, at) =>
        db.transaction(async (tx) => {
          // The enrolment's row lock orders concurrent issues for it.
          const e = await first(
            tx.select({ id: mdmEnrolments.id }).from(mdmEnrolments).where(eq(mdmEnrolments.id, command.enrolmentId)).for("update"),
          );
          if (!e) return undefined;
          const current = await first(tx.select().from(mdmCommands).where(eq(mdmCommands.enrolmentId, command.enrolmentId)));
          if (current && current.expiresAt > at) return { command: current, created: false };
          await tx.delete(mdmCommands).where(eq(mdmCommands.enrolmentId, command.enrolmentId));
          await tx.insert(mdmCommands).values(command);
          return { command, created: true };
        }),
      outstanding: (enrolmentId, at) =>
        first(
          db
            .select()
            .from(mdmCommands)
            .where(and(eq(mdmCommands.enrolmentId, enrolmentId), gt(mdmCommands.expiresAt, at))),
        ),
      consume: (uuid, enrolmentId, at) =>
        first(
          db
            .delete(mdmCommands)
            .where(and(eq(mdmCommands.commandUuid, uuid), eq(mdmCommands.enrolmentId, enrolmentId), gt(mdmCommands.expiresAt, at)))
            .returning(),
        ),
      withdraw: async (uuid) =>
        (await db.delete(mdmCommands).where(eq(mdmCommands.commandUuid, uuid)).returning({ u: mdmCommands.commandUuid })).length > 0,
    },
    chains: {
      async put(chain) {
        if (!(await byId(db, chain.enrolmentId))) return false;
        const values = { ...chain, certificates: [...chain.certificates] };
        await db.insert(mdmChains).values(values).onConflictDoUpdate({ target: mdmChains.enrolmentId, set: values });
        return true;
      },
      get: (enrolmentId) => first(db.select().from(mdmChains).where(eq(mdmChains.enrolmentId, enrolmentId))),
    },
  };
}
