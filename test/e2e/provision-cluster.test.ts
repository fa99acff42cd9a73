/**
 * A coordinator on Postgres in cluster mode, started with --provisioning await as the VM image starts it,
 * opens its store, Redis and NATS only with the provisioned passwords (src/coordinator/boot.ts), sent by
 * `umbra-coordinator provision --db-password-file --redis-password-file`. Its Redis (a private
 * redis-server) requires a password. A database that does not open refuses the message (400 naming
 * db_password) and the coordinator keeps awaiting; once it opens, the admin API answers and rate limits
 * are shared through the password-protected Redis. Skipped, saying so, without PostgreSQL, redis-server
 * or NATS.
 */
import { afterAll, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import postgres from "postgres";
import { tempDir } from "../support/harness.ts";
import { NATS_URL, testNats } from "../support/nats.ts";
import { PG_ADMIN_URL, testDatabase } from "../support/pg.ts";
import { runCoordinator, startCoordinator } from "../support/processes.ts";
import { waitFor } from "../support/wait.ts";

const SUITE = "provisioned passwords open the Postgres store and Redis of an awaiting coordinator";
const db = await testDatabase([SUITE]);
const nats = await testNats("test/e2e/provision-cluster.test.ts");
const redisServer = Bun.which("redis-server");
if (!redisServer) console.warn(`skipped (no redis-server on PATH): ${SUITE}; install Debian's redis-server to run it`);

const MEASUREMENT = "ab".repeat(48);
const TOKEN = "operator-token-0123456789abcdefghijklmnop";
const REDIS_PASSWORD = "redis-secret-0123456789";

/** A private Redis on a free loopback port that refuses clients without the password. */
async function privateRedis(): Promise<{ url: string } & AsyncDisposable> {
  const probe = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = probe.port;
  probe.stop(true);
  const proc = Bun.spawn(
    [redisServer as string, "--port", String(port), "--bind", "127.0.0.1", "--requirepass", REDIS_PASSWORD, "--save", ""],
    {
      stdout: "ignore",
      stderr: "ignore",
    },
  );
  await waitFor(
    async () => {
      try {
        const socket = await Bun.connect({ hostname: "127.0.0.1", port, socket: { data() {} } });
        socket.end();
        return true;
      } catch {
        return false;
      }
    },
    "the private redis-server",
    10_000,
  );
  return {
    url: `redis://127.0.0.1:${port}`,
    async [Symbol.asyncDispose]() {
      proc.kill("SIGKILL");
      await proc.exited;
    },
  };
}

const admin = postgres(PG_ADMIN_URL, { max: 1, onnotice: () => {} });
const later = `umbra_t_later_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
afterAll(async () => {
  await admin.unsafe(`DROP DATABASE IF EXISTS ${later} WITH (FORCE)`).catch(() => {});
  await admin.end({ timeout: 5 });
});

test.skipIf(db === undefined || !nats || !redisServer)(
  SUITE,
  async () => {
    await using redis = await privateRedis();
    using dir = tempDir();
    const files = { token: join(dir.path, "token"), db: join(dir.path, "db"), redis: join(dir.path, "redis") };
    writeFileSync(files.token, TOKEN);
    writeFileSync(files.db, "any-password"); // the machine's PostgreSQL trusts loopback: the database name is the test
    writeFileSync(files.redis, REDIS_PASSWORD);
    // A database that does not exist yet: the first provisioning cannot open it.
    const url = new URL(db?.url ?? "");
    url.pathname = `/${later}`;
    await using c = await startCoordinator(
      {
        UMBRA_PROVISIONING: "await",
        UMBRA_ADMIN_TOKEN: "",
        UMBRA_EXPECTED_MEASUREMENT: MEASUREMENT,
        UMBRA_REDIS_URL: redis.url,
        UMBRA_NATS_URL: NATS_URL,
        UMBRA_CLUSTER_PREFIX: `umbra-test-${crypto.randomUUID()}`,
      },
      { db: url.toString() },
    );
    const accounts = () => fetch(`${c.url}/admin/v1/accounts`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect([(await fetch(`${c.url}/healthz`)).status, (await fetch(`${c.url}/v1/attestation`)).status, (await accounts()).status]).toEqual([
      200, 200, 503,
    ]);
    const provision = () =>
      runCoordinator([
        "provision",
        c.url,
        "--expected-measurement",
        MEASUREMENT,
        "--admin-token-file",
        files.token,
        "--db-password-file",
        files.db,
        "--redis-password-file",
        files.redis,
        "--allow-development-evidence",
      ]);
    const refused = await provision();
    expect([refused.code, refused.stderr.includes("400"), refused.stderr.includes("db_password")]).toEqual([1, true, true]);
    expect((await accounts()).status).toBe(503);

    await admin.unsafe(`CREATE DATABASE ${later}`);
    const accepted = await provision();
    expect([accepted.code, accepted.stdout.includes("provisioned   admin_token, db_password, redis_password")]).toEqual([0, true]);
    expect((await accounts()).status).toBe(200);

    // The real app on the provisioned store: an account, a key and a build, then one request through
    // the limiter, decided in the password-protected Redis.
    const call = async <T>(method: string, path: string, body?: unknown) =>
      (await (
        await fetch(`${c.url}/admin/v1${path}`, {
          method,
          headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        })
      ).json()) as T;
    const account = await call<{ id: string }>("POST", "/accounts", { name: "after provisioning" });
    await call("POST", `/accounts/${account.id}/credit`, { amount_micro_usd: 1_000_000 });
    await call("PUT", "/models/org/provisioned", {});
    const { key } = await call<{ key: string }>("POST", "/keys", { account_id: account.id, rpm: 100 });
    const chat = await fetch(`${c.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "org/provisioned", max_tokens: 4, messages: [{ role: "user", content: "hi" }] }),
    });
    expect([chat.status, ((await chat.json()) as { error: { code: string } }).error.code]).toEqual([503, "model_unavailable"]);
    const metrics = await (await fetch(`${c.url}/metrics`)).text();
    expect(metrics).toContain('umbra_rate_limit_mode{mode="redis"} 1');
  },
  60_000,
);
