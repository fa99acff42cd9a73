/**
 * One running process per replica id on a database. Holds are rows under their replica's id, and a
 * replica's renewal gives back the rows of its id that no request of its own holds: two processes under
 * one id would give back each other's holds (their streams stopped). So `serve` in cluster mode claims
 * its id first: a session advisory lock on a connection of its own, keyed by the id's 64-bit hash, held
 * for the life of the process (the server releases it when the connection ends, a crash included). A
 * claim another process holds refuses the start (StoreOpenError naming the id). A connection lost later
 * (a database restart) is claimed again on its next connection; if another process took the id
 * meanwhile, `lost` says so (the serve command logs it as an error).
 */
import type { Sql } from "postgres";
import { StoreOpenError } from "../errors.ts";

/** Namespace of the lock key: "umbra-replica:" prefixes the id before hashing. */
const PREFIX = "umbra-replica:";

export interface ReplicaClaim {
  release(): Promise<void>;
}

/**
 * Claims `replicaId` on a client of one connection (`open`, with `onclose` wired to the returned
 * handler). Throws StoreOpenError when another process holds it.
 */
export async function claimReplica(
  replicaId: string,
  open: (onclose: () => void) => Sql,
  lost: (replicaId: string) => void = () => {},
): Promise<ReplicaClaim> {
  let released = false;
  let client: Sql;
  const take = (c: Sql) =>
    c<{ ok: boolean }[]>`SELECT pg_try_advisory_lock(hashtextextended(${PREFIX + replicaId}, 0)) AS ok`.then(
      (rows) => rows[0]?.ok === true,
    );
  const connect = (): Sql => {
    const c: Sql = open(() => {
      if (c === client) reclaim();
    });
    client = c;
    return c;
  };
  const reclaim = () => {
    if (released) return;
    void client.end({ timeout: 0 }).catch(() => {});
    const retry = () => {
      if (released) return;
      take(connect()).then(
        (ok) => {
          if (!ok) lost(replicaId);
        },
        () => setTimeout(retry, 2_000).unref?.(),
      );
    };
    setTimeout(retry, 1_000).unref?.();
  };
  client = connect();
  let ok: boolean;
  try {
    ok = await take(client);
  } catch (e) {
    released = true;
    await client.end({ timeout: 0 }).catch(() => {});
    throw new StoreOpenError(
      `cannot claim --replica-id ${replicaId}: the database did not answer (${e instanceof Error ? e.name : "error"})`,
    );
  }
  if (!ok) {
    released = true;
    await client.end({ timeout: 0 }).catch(() => {});
    throw new StoreOpenError(
      `another running replica uses --replica-id ${replicaId} on this database: give each replica its own id (or none: one is generated)`,
    );
  }
  return {
    async release() {
      released = true;
      await client.end({ timeout: 0 }).catch(() => {});
    },
  };
}
