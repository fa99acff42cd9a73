/**
 * The soak (issue 7 point 2 e), shared by `make soak` (soak.ts, SOAK_SECONDS, default 600) and `make test`
 * (soak.test.ts, a short run). A real coordinator process and two real provider processes (echo engine);
 * for the duration, concurrent clients send mixed traffic: JSON and streamed chat, unknown models,
 * invalid bodies, a rate-limited key, an account without funds, a key reaching its spend cap, clients
 * leaving mid-stream, model lists; a provider process is killed (SIGKILL) and restarted on a schedule.
 *
 * Then, from the outside only (admin API, /metrics, the database file read-only, /proc):
 *   - every request had an outcome its kind allows (no hang, no network error, no 500);
 *   - the books balance: per account the ledger sums to the balance, charges + earnings + fees = 0, one
 *     charge per paid usage row for exactly its cost, key totals equal their usage, the cap held;
 *   - no reservation is left (available = balance);
 *   - the coordinator's records agree with the clients' tallies: HTTP statuses in /metrics, a usage row
 *     with the right outcome and tokens for every answer, one for every failure after reservation,
 *     chat outcome counters equal to the rows;
 *   - resident memory after warm-up vs at the end grows within a bound, open descriptors come back to
 *     where they were after warm-up;
 *   - the coordinator still serves a normal request.
 * Clients use a fresh connection per request (keepalive off) so that descriptors at rest are comparable.
 * No request or answer text is printed: requests are synthetic words and only counts are reported.
 */
import { Database } from "bun:sqlite";
import { afterAll, describe, expect } from "bun:test";
import { join } from "node:path";
import { MiB, mib, openFds, rssBytes } from "../../bench/lib/proc.ts";
import { type CoordinatorProcess, type ProviderProcess, startCoordinator, startProvider } from "../support/processes.ts";
import { waitFor } from "../support/wait.ts";
import { reliabilityCase } from "./report.ts";
import { type Outcome, type SoakWorld, Traffic } from "./soak-traffic.ts";

export interface SoakSettings {
  readonly seconds: number;
  readonly workers: number;
  readonly seed: number;
  /** A provider is killed and restarted this often. */
  readonly killEverySeconds: number;
  /** Allowed RSS growth from the end of warm-up to the end: max(this, a quarter of the warm RSS). */
  readonly rssGrowthBytes: number;
}

/** Settings for a run of `seconds`; SOAK_WORKERS, SOAK_SEED, SOAK_KILL_EVERY_SECONDS, SOAK_RSS_GROWTH_MIB override. */
export function soakSettings(seconds: number): SoakSettings {
  return {
    seconds,
    workers: Number(process.env.SOAK_WORKERS ?? 6),
    seed: Number(process.env.SOAK_SEED ?? 20261121),
    killEverySeconds: Number(process.env.SOAK_KILL_EVERY_SECONDS ?? Math.max(5, Math.min(60, seconds / 3))),
    rssGrowthBytes: Number(process.env.SOAK_RSS_GROWTH_MIB ?? 48) * MiB,
  };
}

const BUILD = "org/soak-build";
const ALIAS = "org/soak";
/** Prices in µUSD per million tokens; the spend cap in µUSD (a few dozen requests). */
const PRICES = { input_price: 1_000_000, output_price: 2_000_000 };
const CREDIT = 1_000_000_000;
const SPEND_CAP = 3_000;

interface Baseline {
  readonly rss: number;
  readonly fds: number;
}

export function declareSoak(group: string, settings: SoakSettings): void {
  let coordinator: CoordinatorProcess | undefined;
  const providers: ProviderProcess[] = [];
  let world: SoakWorld | undefined;
  let outcomes: Outcome[] = [];
  let baseline: Baseline | undefined;
  const ran = () => {
    if (!coordinator || !world || !baseline) throw new Error("the soak traffic did not run");
    return { coordinator, world, baseline };
  };

  afterAll(async () => {
    for (const p of providers) await p[Symbol.asyncDispose]();
    await coordinator?.[Symbol.asyncDispose]();
  });

  describe(group, () => {
    reliabilityCase(
      group,
      `mixed traffic for ${settings.seconds} s`,
      async (c) => {
        c.tried(
          `${settings.workers} clients (seed ${settings.seed}) against a coordinator process and 2 provider processes (echo engine) for ${settings.seconds} s, a provider killed (SIGKILL) and restarted every ${settings.killEverySeconds} s`,
        );
        coordinator = await startCoordinator({ UMBRA_DEFAULT_MAX_TOKENS: "64" });
        world = await seedWorld(coordinator);
        const providerArgs = [
          "--coordinator",
          coordinator.url,
          "--token",
          world.providerToken,
          "--engine",
          "echo",
          "--model",
          BUILD,
          "--max-concurrency",
          "32",
          "--echo-tokens-per-second",
          "200",
        ];
        for (let i = 0; i < 2; i++) providers.push(startProvider(providerArgs));
        await Promise.all(providers.map((p) => p.connected));
        const traffic = new Traffic(world, settings.seed);
        const pid = coordinator.proc.pid;

        // Warm-up, then rest: the baseline is taken with nothing in flight.
        const warmup = Math.min(60, Math.max(3, settings.seconds * 0.15));
        await traffic.run(settings.workers, warmup * 1000);
        await quiesce(coordinator, world);
        baseline = { rss: rssBytes(pid), fds: openFds(pid) };

        // The main phase, with a provider killed and restarted on a schedule.
        const mainMs = Math.max(1000, (settings.seconds - warmup) * 1000);
        const started = performance.now();
        const rss: number[] = [];
        const sampler = setInterval(() => {
          if (coordinator?.proc.exitCode === null) rss.push(rssBytes(pid));
        }, 1000);
        let kills = 0;
        const faults = (async () => {
          for (let k = 1; ; k++) {
            const at = started + k * settings.killEverySeconds * 1000;
            if (at > started + mainMs - 2000) return;
            await Bun.sleep(at - performance.now()); // a schedule, not a wait for a condition
            const index = k % providers.length;
            const victim = providers[index] as ProviderProcess;
            victim.proc.kill("SIGKILL");
            await victim.proc.exited;
            kills++;
            const fresh = startProvider(providerArgs);
            providers[index] = fresh;
            await fresh.connected;
          }
        })();
        await Promise.all([traffic.run(settings.workers, mainMs), faults]);
        clearInterval(sampler);
        await quiesce(coordinator, world);
        outcomes = traffic.outcomes;

        c.tried(
          `${outcomes.length} requests, the first ${warmup.toFixed(0)} s a warm-up (${tallyOf(outcomes, (o) => o.kind)}); ${kills} provider kill(s) and restart(s); coordinator RSS sampled every second: ${mib(Math.min(...rss))} to ${mib(Math.max(...rss))}`,
        );
        const wrong = outcomes.filter((o) => !o.allowed);
        expect(wrong.map((o) => `${o.kind}: ${o.status}${o.code ? ` ${o.code}` : ""} ${o.ending ?? ""}`).slice(0, 20)).toEqual([]);
        c.held(
          `every request ended with an outcome its kind allows (${tallyOf(outcomes, (o) => `${o.status}${o.ending ? `/${o.ending}` : ""}`)})`,
        );
        expect(outcomes.flatMap((o) => (o.envelopeProblem ? [`${o.kind}: ${o.envelopeProblem}`] : [])).slice(0, 20)).toEqual([]);
        c.held("every error in the spec's envelope with a listed status, type and code; no 500");
      },
      (settings.seconds + 240) * 1000,
    );

    reliabilityCase(group, "the books balance", async (c) => {
      const { coordinator, world } = ran();
      c.tried("read the ledger, balances, usage rows and keys from the database file (read-only) after the traffic");
      using db = new Database(join(coordinator.dir, "umbra.db"), { readonly: true });
      const balances = db.query<{ id: string; balance: number; ledger: number | null }, []>(
        `SELECT b.account_id AS id, b.balance_micro_usd AS balance,
                (SELECT SUM(amount_micro_usd) FROM ledger_entries l WHERE l.account_id = b.account_id) AS ledger
         FROM balances b`,
      );
      const unbalanced = balances.all().filter((b) => b.balance !== (b.ledger ?? 0));
      expect(unbalanced).toEqual([]);
      c.held(`per account, the ledger sums to the balance (${balances.all().length} accounts)`);

      const kinds = Object.fromEntries(
        db
          .query<{ kind: string; total: number; n: number }, []>(
            "SELECT kind, SUM(amount_micro_usd) AS total, COUNT(*) AS n FROM ledger_entries GROUP BY kind",
          )
          .all()
          .map((k) => [k.kind, k]),
      );
      const sum = (kind: string) => kinds[kind]?.total ?? 0;
      expect({ credits: sum("credit"), moved: sum("charge") + sum("earning") + sum("fee") }).toEqual({ credits: world.credited, moved: 0 });
      c.held(
        `money is conserved: credits ${sum("credit")} µUSD in; charges ${sum("charge")} = -(earnings ${sum("earning")} + fees ${sum("fee")})`,
      );

      const charges = db
        .query<{ request_id: string | null; amount: number; cost: number | null }, []>(
          `SELECT l.request_id, l.amount_micro_usd AS amount, u.cost_micro_usd AS cost
           FROM ledger_entries l LEFT JOIN usage u ON u.request_id = l.request_id WHERE l.kind = 'charge'`,
        )
        .all();
      const paidRows = db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM usage WHERE cost_micro_usd > 0").get()?.n ?? 0;
      expect(charges.filter((x) => x.request_id === null || x.cost !== -x.amount)).toEqual([]);
      expect(new Set(charges.map((x) => x.request_id)).size).toBe(charges.length);
      expect(charges.length).toBe(paidRows);
      c.held(`one charge per paid usage row, for exactly its cost (${charges.length} charges)`);

      const keys = db
        .query<{ id: string; spent: number; cap: number | null; used: number | null }, []>(
          `SELECT k.id, k.spent_micro_usd AS spent, k.spend_cap_micro_usd AS cap,
                  (SELECT SUM(cost_micro_usd) FROM usage u WHERE u.key_id = k.id) AS used
           FROM api_keys k`,
        )
        .all();
      expect(keys.filter((k) => k.spent !== (k.used ?? 0) || (k.cap !== null && k.spent > k.cap))).toEqual([]);
      const capped = keys.find((k) => k.id === world.keys.capped.id);
      c.held(`every key's spent total equals its usage; the capped key spent ${capped?.spent} of its ${SPEND_CAP} µUSD cap`);
    });

    reliabilityCase(group, "no reservation held", async (c) => {
      const { coordinator, world } = ran();
      c.tried("GET /admin/v1/accounts/{id} for every account after the traffic ended");
      const accounts = await Promise.all(
        world.accountIds.map((id) =>
          coordinator.admin<{ reserved_micro_usd: number; balance_micro_usd: number }>("GET", `/accounts/${id}`),
        ),
      );
      expect(accounts.map((a) => a.reserved_micro_usd)).toEqual(world.accountIds.map(() => 0));
      using db = new Database(join(coordinator.dir, "umbra.db"), { readonly: true });
      const stored = db.query<{ reserved: number | null }, []>("SELECT SUM(reserved_micro_usd) AS reserved FROM balances").get();
      expect(stored?.reserved ?? 0).toBe(0);
      c.held(`reserved 0 for all ${accounts.length} accounts, live and stored: the whole balance is available again`);
    });

    reliabilityCase(group, "every request has an outcome in the coordinator's records", async (c) => {
      const { coordinator } = ran();
      c.tried("compare the clients' tallies with /metrics and with the usage rows (by x-request-id)");
      const metrics = await (await fetch(`${coordinator.url}/metrics`)).text();
      const chat = outcomes.filter((o) => o.chat);
      const clientStatuses = countBy(chat, (o) => String(o.status));
      expect(series(metrics, "umbra_http_requests_total", { method: "POST", route: "/v1/chat/completions" }, "status")).toEqual(
        clientStatuses,
      );
      const lists = outcomes.filter((o) => o.kind === "models").length;
      expect(series(metrics, "umbra_http_requests_total", { method: "GET", route: "/v1/models" }, "status")).toEqual({ "200": lists });
      c.held(`/metrics counts exactly the statuses the clients saw (${tallyOf(chat, (o) => String(o.status))})`);

      using db = new Database(join(coordinator.dir, "umbra.db"), { readonly: true });
      const rows = db
        .query<{ request_id: string; outcome: string; prompt_tokens: number; completion_tokens: number; provider_id: string | null }, []>(
          "SELECT request_id, outcome, prompt_tokens, completion_tokens, provider_id FROM usage",
        )
        .all();
      const byId = new Map(rows.map((r) => [r.request_id, r]));
      const problems: string[] = [];
      for (const o of chat.filter((x) => x.status === 200)) {
        const row = o.requestId === undefined ? undefined : byId.get(o.requestId);
        if (!row) {
          problems.push(`${o.kind}: no usage row for a 200`);
          continue;
        }
        const allowed = o.ending === "client left" ? ["cancelled", "completed"] : o.ending === "in-band error" ? ["failed"] : ["completed"];
        if (!allowed.includes(row.outcome)) problems.push(`${o.kind}/${o.ending}: row outcome ${row.outcome}`);
        if (o.usage && (o.usage.prompt_tokens !== row.prompt_tokens || o.usage.completion_tokens !== row.completion_tokens)) {
          problems.push(`${o.kind}: usage differs from the answer`);
        }
      }
      expect(problems.slice(0, 20)).toEqual([]);
      const answered = new Set(chat.map((o) => o.requestId).filter((id) => id !== undefined));
      const afterReservation = chat.filter((o) => o.status !== 200 && o.reserved).length;
      expect(rows.filter((r) => !answered.has(r.request_id)).length).toBe(afterReservation);
      expect(rows.length).toBe(answered.size + afterReservation);
      c.held(
        `a usage row for every answer, with its outcome and tokens, and one for each of the ${afterReservation} failures after reservation (${rows.length} rows: ${tallyOf(rows, (r) => r.outcome)})`,
      );

      const committed = countBy(
        rows.filter((r) => r.provider_id !== null),
        (r) => r.outcome,
      );
      const counted = series(metrics, "umbra_chat_completions_total", {}, "outcome");
      expect(counted).toEqual(committed);
      c.held(`umbra_chat_completions_total by outcome equals the rows of dispatched requests (${JSON.stringify(counted)})`);
    });

    reliabilityCase(group, "no leaked memory or descriptors", async (c) => {
      const { coordinator, baseline } = ran();
      const pid = coordinator.proc.pid;
      c.tried(`the coordinator's VmRSS and /proc/${pid}/fd count at rest after warm-up and at rest after the traffic`);
      const fds = await waitFor(
        () => {
          const n = openFds(pid);
          return n <= baseline.fds + 2 ? n : undefined;
        },
        `open descriptors back near ${baseline.fds}`,
        30_000,
      ).catch(() => openFds(pid));
      expect(fds).toBeLessThanOrEqual(baseline.fds + 2);
      c.held(`open descriptors back to ${fds} (after warm-up: ${baseline.fds})`);
      const rss = rssBytes(pid);
      const bound = Math.max(settings.rssGrowthBytes, baseline.rss / 4);
      expect(rss - baseline.rss).toBeLessThan(bound);
      c.held(`RSS ${mib(baseline.rss)} after warm-up -> ${mib(rss)} at the end (growth bound ${mib(bound)})`);
    });

    reliabilityCase(group, "still serving", async (c) => {
      const { coordinator, world } = ran();
      c.tried("a normal chat request after the soak");
      expect(coordinator.proc.exitCode).toBeNull();
      const response = await fetch(`${coordinator.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${world.keys.main.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: ALIAS, messages: [{ role: "user", content: "alpha beta" }] }),
      });
      expect(response.status).toBe(200);
      expect(((await response.json()) as { object: string }).object).toBe("chat.completion");
      c.held("the coordinator process is alive and answers 200");
    });
  });
}

async function seedWorld(c: CoordinatorProcess): Promise<SoakWorld> {
  await c.admin("PUT", `/models/${BUILD}`, { max_output_length: 64 });
  await c.admin("PUT", `/aliases/${ALIAS}`, { build_id: BUILD });
  await c.admin("PUT", `/prices/${BUILD}`, PRICES);
  const account = async (name: string, credit: number) => {
    const a = await c.admin<{ id: string }>("POST", "/accounts", { name });
    if (credit > 0) await c.admin("POST", `/accounts/${a.id}/credit`, { amount_micro_usd: credit });
    return a.id;
  };
  const main = await account("soak", CREDIT);
  const broke = await account("soak-broke", 0);
  const host = await account("soak-host", 0);
  const key = (accountId: string, extra: Record<string, unknown> = {}) =>
    c.admin<{ id: string; key: string }>("POST", "/keys", { account_id: accountId, ...extra });
  const token = await c.admin<{ token: string }>("POST", "/provider-tokens", { account_id: host });
  return {
    url: c.url,
    model: ALIAS,
    build: BUILD,
    providerToken: token.token,
    accountIds: [main, broke, host],
    credited: CREDIT,
    keys: {
      main: await key(main),
      limited: await key(main, { rpm: 20 }),
      capped: await key(main, { spend_cap_micro_usd: SPEND_CAP }),
      broke: await key(broke),
    },
  };
}

/** Nothing in flight: every hold released (the settlements of cancelled streams land just after the clients leave). */
async function quiesce(c: CoordinatorProcess, world: SoakWorld): Promise<void> {
  await waitFor(
    async () => {
      const accounts = await Promise.all(world.accountIds.map((id) => c.admin<{ reserved_micro_usd: number }>("GET", `/accounts/${id}`)));
      return accounts.every((a) => a.reserved_micro_usd === 0);
    },
    "every reservation released",
    30_000,
  );
}

function countBy<T>(items: readonly T[], key: (item: T) => string): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const item of items) counts[key(item)] = (counts[key(item)] ?? 0) + 1;
  return counts;
}

function tallyOf<T>(items: readonly T[], key: (item: T) => string): string {
  return Object.entries(countBy(items, key))
    .sort()
    .map(([k, n]) => `${k} ${n}`)
    .join(", ");
}

/** The samples of a Prometheus counter whose labels include `match`, summed by the label `by`. */
function series(text: string, name: string, match: Record<string, string>, by: string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name}{`)) continue;
    const labels = Object.fromEntries([...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    if (!Object.entries(match).every(([k, v]) => labels[k] === v)) continue;
    const key = labels[by] ?? "";
    out[key] = (out[key] ?? 0) + Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return out;
}
