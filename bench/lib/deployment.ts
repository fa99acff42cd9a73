/**
 * One Umbra deployment for the cluster benchmark (bench/cluster.ts): one coordinator on SQLite, or one
 * or more replicas in cluster mode (`serve` on a Postgres database of its own, Redis and NATS under a
 * prefix of its own; with `journal`, each replica's settlement journal in its folder), each with or without a provider (`umbra-provider start --engine echo
 * --dev-attestation on`: sealed hop, a signed receipt per answer, as run.ts). Governance is on: metering
 * (reservation and settlement per request), a key with rpm and tpm limits high enough never to refuse
 * but enforced, a spend cap, credit. `check` proves it before measuring (200, the key's x-ratelimit
 * headers on every replica; every replica sees every provider); `spent` reads what the keys were charged.
 * Disposing stops every process, then drops the database and deletes the prefix's Redis keys.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type CoordinatorProcess, startCoordinator, startProvider } from "../../test/support/processes.ts";
import { benchDatabase, benchPrefix, NATS_URL, REDIS_URL, removeKeys } from "./cluster-services.ts";

export const BUILD = "bench/echo";
export const LIMITS = { rpm: 1_000_000_000, tpm: 1_000_000_000_000, spend_cap_micro_usd: 1_000_000_000_000 };
export const CREDIT = 1_000_000_000_000;

export type Mode = "sqlite" | "cluster";

export interface Deployment extends AsyncDisposable {
  readonly mode: Mode;
  /** One base URL per replica. */
  readonly urls: readonly string[];
  /** One key per account (`accounts`); the first account also holds the providers' token. */
  readonly apiKeys: readonly string[];
  /** The processes to read CPU time of: coordinator_a, provider_a, coordinator_b ... */
  readonly pids: Readonly<Record<string, number>>;
  /** Cluster mode: the Postgres database's name (its backends' CPU). */
  readonly database?: string;
  check(): Promise<void>;
  /** The key's spent_micro_usd. */
  spent(): Promise<number>;
}

const letter = (i: number) => String.fromCharCode(97 + i);

export interface DeployOptions {
  /** Paying accounts, each with credit and a key (1): more spread the money path's rows. */
  readonly accounts?: number;
  /** More coordinator settings (e.g. UMBRA_PLATFORM_FEE). */
  readonly env?: Readonly<Record<string, string>>;
  /** Cluster mode: each replica journals its settlements (`--settlement-journal` in its own folder). */
  readonly journal?: boolean;
}

/** `replicas` coordinators; a provider on each replica whose index is in `providersOn`. */
export async function deploy(
  mode: Mode,
  replicas: number,
  providersOn: readonly number[],
  options: DeployOptions = {},
): Promise<Deployment> {
  const started: AsyncDisposable[] = [];
  const stop = async () => {
    for (const x of started.reverse()) await x[Symbol.asyncDispose]();
  };
  try {
    let db: { url: string; name: string } | undefined;
    let env: Record<string, string> = { UMBRA_METERING: "on", ...options.env };
    if (mode === "cluster") {
      const database = await benchDatabase();
      const prefix = benchPrefix();
      started.push({
        async [Symbol.asyncDispose]() {
          await removeKeys(prefix);
          await database[Symbol.asyncDispose]();
        },
      });
      db = database;
      env = { ...env, UMBRA_REDIS_URL: REDIS_URL, UMBRA_NATS_URL: NATS_URL, UMBRA_CLUSTER_PREFIX: prefix };
    }
    const coordinators: CoordinatorProcess[] = [];
    for (let i = 0; i < replicas; i++) {
      const dir = mkdtempSync(join(tmpdir(), "umbra-bench-"));
      started.push({ [Symbol.asyncDispose]: async () => rmSync(dir, { recursive: true, force: true }) });
      const journal: Record<string, string> =
        mode === "cluster" && options.journal ? { UMBRA_SETTLEMENT_JOURNAL: join(dir, "settlements") } : {};
      const replicaEnv = mode === "cluster" ? { ...env, ...journal, UMBRA_REPLICA_ID: letter(i) } : env;
      const c = await startCoordinator(replicaEnv, db ? { dir, db: db.url } : { dir });
      started.push(c);
      coordinators.push(c);
    }
    const first = coordinators[0] as CoordinatorProcess;
    const { apiKey, providerToken, accountId } = await first.seed([BUILD], LIMITS, CREDIT);
    const apiKeys = [apiKey];
    const accountIds = [accountId];
    for (let i = 1; i < (options.accounts ?? 1); i++) {
      const account = await first.admin<{ id: string }>("POST", "/accounts", { name: `bench ${i}` });
      await first.admin("POST", `/accounts/${account.id}/credit`, { amount_micro_usd: CREDIT });
      apiKeys.push((await first.admin<{ key: string }>("POST", "/keys", { account_id: account.id, ...LIMITS })).key);
      accountIds.push(account.id);
    }
    const pids: Record<string, number> = {};
    coordinators.forEach((c, i) => {
      pids[`coordinator_${letter(i)}`] = c.proc.pid;
    });
    for (const i of providersOn) {
      const provider = startProvider([
        "--coordinator",
        (coordinators[i] as CoordinatorProcess).url,
        "--token",
        providerToken,
        "--engine",
        "echo",
        "--model",
        BUILD,
        "--max-concurrency",
        "1024",
        "--dev-attestation",
        "on",
      ]);
      started.push(provider);
      await provider.connected;
      pids[`provider_${letter(i)}`] = provider.proc.pid;
    }
    const urls = coordinators.map((c) => c.url);
    const headers = { authorization: `Bearer ${apiKey}`, "content-type": "application/json" };
    return {
      mode,
      urls,
      apiKeys,
      pids,
      ...(db ? { database: db.name } : {}),
      async check() {
        for (const url of urls) await waitForProviders(url, headers, providersOn.length);
        for (const url of urls) {
          const r = await fetch(`${url}/v1/chat/completions`, {
            method: "POST",
            headers,
            body: JSON.stringify({ model: BUILD, messages: [{ role: "user", content: "check" }] }),
          });
          const body = await r.text();
          const limit = r.headers.get("x-ratelimit-limit-requests");
          if (r.status !== 200 || limit !== String(LIMITS.rpm)) {
            throw new Error(`${mode} deployment at ${url}: status ${r.status}, x-ratelimit-limit-requests ${limit}: ${body.slice(0, 300)}`);
          }
        }
      },
      async spent() {
        let spent = 0;
        for (const id of accountIds) {
          const keys = await first.admin<{ data: { spent_micro_usd: number }[] }>("GET", `/keys?account_id=${id}`);
          spent += keys.data.reduce((n, k) => n + k.spent_micro_usd, 0);
        }
        return spent;
      },
      [Symbol.asyncDispose]: stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** Waits until `url` lists `count` providers of BUILD (another replica's arrive with its fleet digest). */
async function waitForProviders(url: string, headers: Record<string, string>, count: number): Promise<void> {
  let seen: unknown;
  for (let i = 0; i < 200; i++) {
    const r = await fetch(`${url}/v1/models/${BUILD}`, { headers });
    const body = (await r.json()) as { metadata?: { provider_count?: number } };
    seen = body.metadata?.provider_count;
    if (seen === count) return;
    await Bun.sleep(50);
  }
  throw new Error(`${url} lists ${String(seen)} providers of ${BUILD}, not ${count}`);
}
