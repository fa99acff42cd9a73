/**
 * umbra-coordinator: serve | dev | migrate | admin <noun> <verb> | provision | config-digest. Exit codes:
 * 0 ok, 1 refused or failed at run time, 2 bad usage or configuration.
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { ADMIN_COMMANDS, adminUsage, findVerb, runVerb, UsageError } from "../admin/admin-cli.ts";
import { AdminService } from "../admin/admin-service.ts";
import { checkConfigBinding } from "../attestation/config-binding.ts";
import type { Mode } from "../attestation/coordinator-attestation.ts";
import { CONFIG_OPTIONS, type Config, ConfigError, loadConfig, parseFlags, publicBaseUrl } from "../config/config.ts";
import { configDigestHex } from "../config/config-digest.ts";
import { processEnv } from "../config/settings.ts";
import { keepServingOnCrash } from "../observability/crash.ts";
import { StoreOpenError } from "../store/errors.ts";
import { databaseName, isPostgres, openStore } from "../store/open.ts";
import { type DatabaseLock, lockDatabase } from "../store/sqlite/lock.ts";
import { AcmeError } from "../tls/acme-error.ts";
import { createCoordinatorTls } from "../tls/coordinator-tls.ts";
import { VERSION } from "../version.ts";
import { openServing, type Serving, standIn } from "./boot.ts";
import { devBanner, devConsoleLink, seedDevelopment, startDevProvider } from "./dev.ts";
import { ListenError, listen, type RunningServer } from "./server.ts";

const USAGE = `umbra-coordinator ${VERSION}

usage:
  umbra-coordinator serve   [--listen HOST:PORT] [--db PATH] [--admin-token T] [--mode production|development]
                            [--tls off|self-signed|acme] [--tls-names NAMES] ...
  umbra-coordinator dev     [--listen HOST:PORT] [--db PATH]
  umbra-coordinator migrate [--db PATH|postgres://...]
  umbra-coordinator admin   [--db PATH] <noun> <verb> ...   (admin --help lists them)
  umbra-coordinator provision URL (--image measurements.json [--shape NAME] | --expected-measurement HEX) --admin-token-file FILE
  umbra-coordinator config-digest [serve flags]              (the digest to bind: umbra.config= or HOST_DATA)
  umbra-coordinator measure --firmware F --kernel K ... (--vcpus N --cpu MODEL --guest-features X | --shapes FILE)
  umbra-coordinator verify-attestation URL --image measurements.json [--shape NAME] [--json]

Every flag has an UMBRA_* environment twin; see docs/operations.md.`;

/** How long a stopping coordinator waits for the answers it ended to be written. */
const SHUTDOWN_GRACE_MS = 5_000;

const print = (text: string) => process.stdout.write(`${text}\n`);
const printErr = (text: string) => process.stderr.write(`${text}\n`);

/** The Postgres password given apart from the URL (--db-password), for openStore. */
const dbPassword = (config: Config) => (config.dbPassword === undefined ? {} : { password: config.dbPassword });

/**
 * One coordinator (or `migrate`) per SQLite database: refuses while another process holds it. A Postgres
 * database takes no such lock (its migrations run under their own lock).
 */
function lock(config: Config, command: string): DatabaseLock | undefined {
  return config.db === ":memory:" || isPostgres(config.db) ? undefined : lockDatabase(config.db, `umbra-coordinator ${command}`);
}

async function serve(config: Config, dev: boolean): Promise<void> {
  // Before the store and its settlement journal are opened: a second coordinator never touches them.
  const held = lock(config, dev ? "dev" : "serve");
  // The TLS key is made in memory before the app, so the attestation binds it from its first document.
  const tls = await createCoordinatorTls(config);
  // On Postgres awaiting provisioning, the store opens with the provisioned passwords (boot.ts).
  let server: RunningServer | undefined;
  let current: Serving;
  if (config.provisioning === "await" && isPostgres(config.db)) {
    current = await standIn(config, tls?.key.spki, (next) => {
      const previous = current;
      current = next;
      server?.replaceApp(next.app);
      previous.app.close();
      previous.store.close();
      next.app.logger.info("store opened with the provisioned secrets", {
        db: databaseName(config.db),
        replica_id: config.cluster?.replicaId,
      });
    });
  } else {
    current = await openServing(config, tls ? { tlsPublicKeySpki: tls.key.spki } : {});
  }
  const { app, store } = current;
  keepServingOnCrash(() => current.app.logger);
  // The bound configuration digest (docs/operations.md "Configuration binding"): refused before anything is served.
  try {
    await checkConfigBinding(config, app.attestation);
  } catch (e) {
    app.close();
    store.close();
    held?.release();
    throw e;
  }
  // Settlements a killed predecessor left in the journal are applied before anything is served.
  await app.flush();
  // Bound before this run writes anything of its own (dev's demo key and device token): a busy port
  // refuses the start with nothing minted.
  const running = listen(
    app,
    undefined,
    undefined,
    tls ? { tls: { keyPem: tls.key.privateKeyPem, certPem: tls.initial.certPem, renewable: tls.renewable } } : {},
  );
  server = running;
  app.logger.info("coordinator listening", {
    url: running.url,
    mode: config.mode,
    db: databaseName(config.db),
    version: VERSION,
    tls_spki_sha256: tls?.key.spkiSha256,
    replica_id: config.cluster?.replicaId,
  });
  tls?.start(app.logger, (certificate) => running.useCertificate(certificate.certPem));
  const seed = dev ? await seedDevelopment(app) : undefined;
  const provider = seed ? await startDevProvider(app, running.url, seed.providerToken) : undefined;
  if (seed) {
    const link = await devConsoleLink(app, seed.accountId, publicBaseUrl(config) ?? running.url);
    print(devBanner(running.url, seed, config.adminToken ?? "", link));
  }
  let stopping = false;
  /** Ends the drain early: a second SIGTERM or SIGINT (Ctrl-C twice) stops at once. */
  let skipDrain: (() => void) | undefined;
  const stop = async () => {
    if (stopping) {
      skipDrain?.();
      return;
    }
    stopping = true;
    // The app serving now (the real one once provisioning replaced the stand-in).
    const { app, store } = current;
    app.logger.info("coordinator stopping", { duration_ms: config.shutdownDrainMs });
    // Drain: new requests get 503 (and /readyz says so) while the answers in flight finish, for at most
    // the drain period; then whatever is left ends below.
    app.chat.drain();
    if (config.shutdownDrainMs > 0) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const drained = await Promise.race([
        app.chat.idle().then(() => true),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(false), config.shutdownDrainMs);
          skipDrain = () => resolve(false);
        }),
      ]);
      clearTimeout(timer);
      if (!drained) app.logger.warn("drain period over: ending the answers still in flight", { duration_ms: config.shutdownDrainMs });
    }
    await provider?.stop();
    await tls?.stop();
    // Disconnecting the providers ends every attempt in flight: each answer gets its clean error (a JSON
    // 5xx, or one in-band error event after the stream started), settled for what it relayed. Those
    // answers are written before the connections close (within the grace period).
    app.close();
    await running.stop(SHUTDOWN_GRACE_MS);
    // Answers cut by the shutdown settle what they relayed; make every charge durable before leaving.
    await new Promise((resolve) => setImmediate(resolve));
    await app.flush();
    store.close();
    held?.release();
    process.exit(0);
  };
  process.on("SIGINT", stop);
  process.on("SIGTERM", stop);
}

async function admin(argv: readonly string[]): Promise<number> {
  const allOptions = Object.assign(
    {},
    ...Object.values(ADMIN_COMMANDS).flatMap((verbs) => Object.values(verbs).map((v) => v.options ?? {})),
  );
  const { values, positionals } = parseFlags(argv, { ...allOptions, help: { type: "boolean" } });
  if (values.help === true || positionals.length === 0) {
    print(adminUsage());
    return values.help === true ? 0 : 2;
  }
  const [noun, verbName, ...args] = positionals;
  const verb = findVerb(noun, verbName);
  for (const name of Object.keys(values)) {
    if (name !== "help" && !(name in CONFIG_OPTIONS) && !(name in (verb.options ?? {}))) {
      throw new UsageError(`--${name} does not apply to 'admin ${noun} ${verbName}'\nusage: umbra-coordinator admin ${verb.usage}`);
    }
  }
  if (args.length !== verb.positionals) throw new UsageError(`usage: umbra-coordinator admin ${verb.usage}`);
  const config = loadConfig(values, processEnv(), "development");
  // Which database, always (the default is relative to the current folder); a verb that could only
  // list nothing or refuse on an empty one never creates it.
  const postgres = isPostgres(config.db);
  const database = config.db === ":memory:" || postgres ? databaseName(config.db) : resolve(config.db);
  // A Postgres database is always there (created by its operator); its tables are migrated on open.
  const exists = config.db === ":memory:" || postgres || existsSync(database);
  if (!exists && verb.createsDatabase !== true) {
    throw new StoreOpenError(
      `no database at ${database}; point at yours with --db PATH or UMBRA_DB (the default, ./data/umbra.db, is relative to the current folder)`,
    );
  }
  printErr(`database: ${database}${exists ? "" : " (new)"}`);
  const store = await openStore(config.db, dbPassword(config));
  try {
    // The CLI needs the admin operations on the store, nothing else: no fleet, no timers, no
    // attestation. The running coordinator, if any, sees the changes through the database.
    const publicUrl = publicBaseUrl(config);
    const admin = new AdminService(store, () => Date.now(), publicUrl === undefined ? {} : { publicUrl });
    return await runVerb(admin, verb, args, values, print, printErr);
  } finally {
    store.close();
  }
}

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case "serve":
    case "dev": {
      const { values, positionals } = parseFlags(rest);
      if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`);
      const defaultMode: Mode = command === "dev" ? "development" : "production";
      let config = loadConfig(values, processEnv(), defaultMode);
      // dev's in-process provider dials the coordinator's own URL: it has no pin for a self-signed key.
      if (command === "dev" && config.tls.mode !== "off") throw new UsageError("--tls applies to 'serve'; 'dev' serves plain HTTP");
      if (command === "dev" && config.adminToken === undefined && config.provisioning === "off") {
        config = Object.freeze({ ...config, adminToken: `umbra-admin-${randomBytes(24).toString("base64url")}` });
      }
      await serve(config, command === "dev");
      return -1; // keeps running
    }
    case "migrate": {
      const { values } = parseFlags(rest);
      const config = loadConfig(values, processEnv(), "development");
      // Not under a running coordinator: it runs on the schema it migrated at its start.
      const held = lock(config, "migrate");
      try {
        const store = await openStore(config.db, dbPassword(config));
        store.close();
      } finally {
        held?.release();
      }
      print(`database ${databaseName(config.db)} is migrated`);
      return 0;
    }
    case "admin":
      return admin(rest);
    case "provision": {
      const { provisionCommand } = await import("./provision-cli.ts");
      return provisionCommand(rest, print, printErr);
    }
    case "config-digest": {
      const { values, positionals } = parseFlags(rest);
      if (positionals.length > 0) throw new UsageError(`unexpected argument '${positionals[0]}'`);
      print(configDigestHex(loadConfig(values, processEnv(), "production")));
      return 0;
    }
    case "measure":
      // Loaded on use: the verifier brings @peculiar/x509, which serve must not load at start.
      return (await import("./measure-command.ts")).runMeasure(rest, { print, printErr });
    case "verify-attestation":
      return (await import("./verify-attestation-command.ts")).runVerifyAttestation(rest, { print, printErr });
    case "--version":
    case "version":
      print(VERSION);
      return 0;
    case undefined:
    case "--help":
    case "-h":
    case "help":
      print(USAGE);
      return command === undefined ? 2 : 0;
    default:
      throw new UsageError(`unknown command '${command}'\n\n${USAGE}`);
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (error: unknown) => {
    if (error instanceof ConfigError || error instanceof UsageError || (error instanceof TypeError && "code" in error)) {
      printErr(`umbra-coordinator: ${error.message}`);
      process.exit(2);
    }
    if (error instanceof StoreOpenError || error instanceof ListenError || error instanceof AcmeError) {
      printErr(`umbra-coordinator: ${error.message}`);
      process.exit(1);
    }
    printErr(`umbra-coordinator: unexpected ${error instanceof Error ? error.name : "error"}`);
    process.exit(1);
  },
);
