/**
 * The SQLite MdmStore (src/store/mdm-types.ts). Every write that reads first is one synchronous
 * transaction (STACK.md item 7); SQLite runs one writer at a time, so create, bind, issue and consume
 * decide on rows nobody changes meanwhile. The partial unique indexes back the invariants up.
 */
import { and, desc, eq, gt, ne, or } from "drizzle-orm";
import { planBind } from "../mdm-rules.ts";
import type { MdmStore } from "../mdm-types.ts";
import { accounts, mdmChains, mdmCommands, mdmEnrolments, providerTokens } from "../schema.ts";
import type { Db } from "./open.ts";

export function sqliteMdm(db: Db): MdmStore {
  const byId = (id: string) => db.select().from(mdmEnrolments).where(eq(mdmEnrolments.id, id)).get();
  const checkOut = (tx: Pick<Db, "update" | "delete">, id: string, at: number) => {
    tx.update(mdmEnrolments).set({ state: "checked_out", updatedAt: at }).where(eq(mdmEnrolments.id, id)).run();
    tx.delete(mdmCommands).where(eq(mdmCommands.enrolmentId, id)).run();
  };
  return {
    enrolments: {
      async create(input) {
        return db.transaction((tx) => {
          const account = tx.select({ id: accounts.id }).from(accounts).where(eq(accounts.id, input.accountId)).get();
          const token = tx.select({ id: providerTokens.id }).from(providerTokens).where(eq(providerTokens.id, input.providerTokenId)).get();
          if (!account || !token) return undefined;
          const live = tx
            .select({ id: mdmEnrolments.id })
            .from(mdmEnrolments)
            .where(and(eq(mdmEnrolments.identityKey, input.identityKey), ne(mdmEnrolments.state, "checked_out")))
            .all();
          for (const old of live) checkOut(tx, old.id, input.createdAt);
          tx.insert(mdmEnrolments)
            .values({ ...input, nanomdmId: null, serial: null, state: "issued", updatedAt: input.createdAt })
            .run();
          return tx.select().from(mdmEnrolments).where(eq(mdmEnrolments.id, input.id)).get();
        });
      },
      get: async (id) => byId(id),
      findByTokenHash: async (hash) => db.select().from(mdmEnrolments).where(eq(mdmEnrolments.tokenHash, hash)).get(),
      forAccount: async (accountId) =>
        db
          .select()
          .from(mdmEnrolments)
          .where(eq(mdmEnrolments.accountId, accountId))
          .orderBy(desc(mdmEnrolments.createdAt), desc(mdmEnrolments.id))
          .all(),
      byIdentityKey: async (key) =>
        db
          .select()
          .from(mdmEnrolments)
          .where(and(eq(mdmEnrolments.identityKey, key), ne(mdmEnrolments.state, "checked_out")))
          .get(),
      byNanomdmId: async (id) =>
        db
          .select()
          .from(mdmEnrolments)
          .where(and(eq(mdmEnrolments.nanomdmId, id), eq(mdmEnrolments.state, "enrolled")))
          .get(),
      async bind({ tokenHash, nanomdmId, serial, at }) {
        return db.transaction((tx) => {
          const enrolment = tx.select().from(mdmEnrolments).where(eq(mdmEnrolments.tokenHash, tokenHash)).get();
          const others = tx
            .select()
            .from(mdmEnrolments)
            .where(and(eq(mdmEnrolments.state, "enrolled"), or(eq(mdmEnrolments.serial, serial), eq(mdmEnrolments.nanomdmId, nanomdmId))))
            .all();
          const plan = planBind(enrolment, others, { nanomdmId, serial, at });
          if (plan.kind === "refuse") return plan.result;
          if (plan.kind === "same") return { ok: true as const, enrolment: plan.enrolment };
          for (const id of plan.supersede) checkOut(tx, id, at);
          const id = (enrolment as { id: string }).id;
          tx.update(mdmEnrolments).set({ nanomdmId, serial, state: "enrolled", updatedAt: at }).where(eq(mdmEnrolments.id, id)).run();
          const bound = tx.select().from(mdmEnrolments).where(eq(mdmEnrolments.id, id)).get();
          if (!bound) throw new Error("bound enrolment vanished");
          return { ok: true as const, enrolment: bound };
        });
      },
      async checkOut(id, at) {
        return db.transaction((tx) => {
          const e = tx.select().from(mdmEnrolments).where(eq(mdmEnrolments.id, id)).get();
          if (!e) return undefined;
          if (e.state !== "checked_out") checkOut(tx, id, at);
          return tx.select().from(mdmEnrolments).where(eq(mdmEnrolments.id, id)).get();
        });
      },
    },
    commands: {
      async issue(command, at) {
        return db.transaction((tx) => {
          if (!tx.select({ id: mdmEnrolments.id }).from(mdmEnrolments).where(eq(mdmEnrolments.id, command.enrolmentId)).get()) {
            return undefined;
          }
          const current = tx.select().from(mdmCommands).where(eq(mdmCommands.enrolmentId, command.enrolmentId)).get();
          if (current && current.expiresAt > at) return { command: current, created: false };
          tx.delete(mdmCommands).where(eq(mdmCommands.enrolmentId, command.enrolmentId)).run();
          tx.insert(mdmCommands).values(command).run();
          return { command, created: true };
        });
      },
      outstanding: async (enrolmentId, at) =>
        db
          .select()
          .from(mdmCommands)
          .where(and(eq(mdmCommands.enrolmentId, enrolmentId), gt(mdmCommands.expiresAt, at)))
          .get(),
      consume: async (uuid, enrolmentId, at) =>
        db
          .delete(mdmCommands)
          .where(and(eq(mdmCommands.commandUuid, uuid), eq(mdmCommands.enrolmentId, enrolmentId), gt(mdmCommands.expiresAt, at)))
          .returning()
          .get(),
      withdraw: async (uuid) =>
        db.delete(mdmCommands).where(eq(mdmCommands.commandUuid, uuid)).returning({ u: mdmCommands.commandUuid }).all().length > 0,
    },
    chains: {
      async put(chain) {
        if (!byId(chain.enrolmentId)) return false;
        const values = { ...chain, certificates: [...chain.certificates] };
        db.insert(mdmChains).values(values).onConflictDoUpdate({ target: mdmChains.enrolmentId, set: values }).run();
        return true;
      },
      get: async (enrolmentId) => db.select().from(mdmChains).where(eq(mdmChains.enrolmentId, enrolmentId)).get(),
    },
  };
}
