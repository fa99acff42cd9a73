/**
 * The serve command's app and store. Usually opened at once (`openServing`). A coordinator on Postgres
 * started with --provisioning await opens its store, Redis and NATS only with the passwords provisioned
 * through the attested channel (the VM image has no other place for a secret): until then a stand-in
 * app (an in-memory store, no cluster links) serves what provisioning needs (health, attestation,
 * /v1/provision; the gate refuses the rest). Provisioning's `accept` merges the passwords into the
 * configuration, checks them (production: Redis and NATS credentials off loopback), opens the store and
 * builds the real app on the same attestation and provisioning; the server then switches to it. A store
 * that does not open refuses that message (400 naming db_password, the password never quoted) and the
 * coordinator keeps awaiting another.
 */
import type { ProvisionedSecrets } from "../attestation/provisioning.ts";
import { requireClusterCredentials } from "../config/cluster-config.ts";
import { type Config, ConfigError } from "../config/config.ts";
import { Errors } from "../errors/api-error.ts";
import { createLogger } from "../observability/logger.ts";
import { StoreOpenError } from "../store/errors.ts";
import { openStore } from "../store/open.ts";
import type { MoneyAuthority } from "../store/pg/money-authority.ts";
import type { ClusterJournal } from "../store/pg/settlement-journal.ts";
import type { Store } from "../store/types.ts";
import { type App, type AppDeps, createApp, createFront } from "./app.ts";
import { loadLinks } from "./links.ts";

export interface Serving {
  readonly app: App;
  readonly store: Store;
}

type Extra = Pick<AppDeps, "tlsPublicKeySpki" | "front" | "logger">;

/** Opens the store (Postgres as the money authority in cluster mode) and builds the app on it. Throws StoreOpenError. */
export async function openServing(config: Config, extra: Extra = {}): Promise<Serving> {
  const password = config.dbPassword === undefined ? {} : { password: config.dbPassword };
  // Cluster mode: Postgres is the only money authority, every hold a row under this replica's id.
  // Its modules (postgres.js, NATS) are loaded only then: a coordinator on SQLite keeps a smaller heap.
  const pg = config.cluster ? await (await import("../store/pg/index.ts")).createPgStore(config.db, password) : undefined;
  // One process per replica id: holds are rows under it (replica-claim.ts). Refused before anything runs.
  let claimLost: (id: string) => void = () => {};
  if (pg && config.cluster) {
    try {
      await pg.claimReplica(config.cluster.replicaId, (id) => claimLost(id));
    } catch (e) {
      await pg.end();
      throw e;
    }
  }
  // One logger for the app and the store's checkpoint worker (its crashes are logged).
  const logger = extra.logger ?? createLogger(config.logLevel);
  const checkpoints = config.sqliteCheckpoints === "worker" ? { checkpoints: { logger } } : {};
  const store = pg ?? (await openStore(config.db, { journal: true, ...password, ...checkpoints }));
  let moneyAuthority: MoneyAuthority | undefined;
  if (pg && config.cluster) {
    const journalPath = config.cluster.settlementJournal;
    let journal: ClusterJournal | undefined;
    try {
      journal =
        journalPath === undefined
          ? undefined
          : (await import("../store/pg/settlement-journal.ts")).ClusterJournal.open(journalPath, {
              holder: `umbra-coordinator, replica ${config.cluster.replicaId}`,
              onRetry: (_e, count) => logger.warn("settlement batch not written (the database did not answer): sent again", { count }),
            });
      moneyAuthority = pg.moneyAuthority({ replica: config.cluster.replicaId, ttlMs: config.cluster.holdTtlMs, journal, log: logger });
      // What a killed predecessor journaled is charged before this replica renews or moves any money.
      const recovered = await moneyAuthority.recover();
      if (recovered > 0) logger.info("settlement journal applied", { count: recovered });
    } catch (e) {
      await moneyAuthority?.close();
      await journal?.close(0);
      await pg.end();
      throw e;
    }
  }
  const authority = pg && moneyAuthority ? { moneyAuthority, cachesLive: () => pg.changes.epoch() !== null } : {};
  const app = createApp({ config, store, ...authority, ...extra, logger, links: await loadLinks(config) });
  claimLost = (id) =>
    app.logger.error("replica id claimed by another process after a reconnect: give each replica its own id", { replica_id: id });
  return { app, store };
}

/** The configuration with the provisioned passwords in place of the configured ones. Throws ConfigError. */
export function withProvisionedPasswords(config: Config, secrets: ProvisionedSecrets): Config {
  const cluster = config.cluster && {
    ...config.cluster,
    ...(secrets.redisPassword !== undefined ? { redisPassword: secrets.redisPassword } : {}),
    ...(secrets.natsPassword !== undefined ? { natsPassword: secrets.natsPassword } : {}),
  };
  if (cluster && config.mode === "production") requireClusterCredentials(cluster);
  return { ...config, cluster, ...(secrets.dbPassword !== undefined ? { dbPassword: secrets.dbPassword } : {}) };
}

/**
 * The stand-in until provisioning: `ready` gets the real app and store once a message's passwords opened
 * them (before the coordinator counts as provisioned); the caller switches to them and closes the stand-in.
 */
export async function standIn(config: Config, tlsPublicKeySpki: Uint8Array | undefined, ready: (next: Serving) => void): Promise<Serving> {
  const logger = createLogger(config.logLevel);
  const spki = tlsPublicKeySpki ? { tlsPublicKeySpki } : {};
  const front = createFront(config, {
    ...spki,
    logger,
    now: () => Date.now(),
    accept: async (secrets) => {
      let next: Serving;
      try {
        next = await openServing(withProvisionedPasswords(config, secrets), { ...spki, front, logger });
      } catch (e) {
        if (e instanceof ConfigError) throw Errors.invalidValue(e.message, "secrets");
        if (e instanceof StoreOpenError) {
          throw Errors.invalidValue(`the database did not open (check db_password and --db): ${e.message}`, "secrets.db_password");
        }
        throw e;
      }
      ready(next);
    },
  });
  const store = await openStore(":memory:");
  const standInConfig = { ...config, db: ":memory:", cluster: null };
  return { app: createApp({ config: standInConfig, store, front, logger, ...spki, links: await loadLinks(standInConfig) }), store };
}
