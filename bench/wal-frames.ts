/**
 * WAL frames (pages) written per settlement commit, counted from the WAL file itself: the money path's
 * commit cost is about one page write per frame (bench/HISTORY.md). Settles BATCHES batches of N
 * settlements (one payer with a key, one provider, the platform's fee) through the SQLite store while a
 * reader holds the WAL open (so it is not restarted), then reads the frame headers and reports frames per
 * commit and which tables' pages appear in most commits.
 *
 * `node_modules/.bin/bun bench/wal-frames.ts` (N, default 12; BATCHES, default 200).
 */
import { Database } from "bun:sqlite";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createSqliteStore } from "../src/store/sqlite/index.ts";
import type { Settlement } from "../src/store/types.ts";

const N = Number(process.env.N ?? 12);
const BATCHES = Number(process.env.BATCHES ?? 200);
const dir = mkdtempSync(join(tmpdir(), "umbra-wal-frames-"));
const path = join(dir, "umbra.db");
const store = createSqliteStore(path);
await store.accounts.create({ id: "payer", name: "payer", at: 0 });
await store.accounts.credit({ accountId: "payer", amount: 1e15, at: 0 });
await store.accounts.create({ id: "provider", name: "provider", at: 0 });
const keyFields = { hint: "hint", name: null, allowedModels: null, spendCap: null, rpm: null, tpm: null, selfRouteOnly: false };
await store.keys.create({ id: "key", accountId: "payer", keyHash: "hash", ...keyFields, createdAt: 0 });

let n = 0;
function settlement(): Settlement {
  n++;
  const at = Date.now();
  const requestId = `req_${at.toString(36).padStart(9, "0")}${String(n).padStart(8, "0")}`;
  const usage = {
    requestId,
    accountId: "payer",
    keyId: "key",
    model: "bench/echo",
    buildId: "bench/echo",
    providerId: "prov_bench",
    promptTokens: 40,
    cachedTokens: 0,
    completionTokens: 16,
    cost: 100,
    startedAt: at,
    firstContentMs: 1,
    durationMs: 2,
    outcome: "completed" as const,
  };
  return { requestId, accountId: "payer", keyId: "key", charge: 100, providerAccountId: "provider", earning: 80, fee: 20, at, usage };
}
const batch = () => Array.from({ length: N }, settlement);

for (let i = 0; i < 50; i++) await store.money.settle(batch());
const reader = new Database(path, { readonly: true });
reader.exec("BEGIN");
reader.query("SELECT count(*) FROM usage").get(); // a read snapshot: the WAL cannot restart under it
const walBytes = () => readFileSync(`${path}-wal`);
const start = walBytes().length;
for (let i = 0; i < BATCHES; i++) await store.money.settle(batch());
const wal = walBytes();
const pageSize = wal.readUInt32BE(8);
const commits: number[][] = [];
let current: number[] = [];
for (let offset = Math.max(32, start); offset + 24 + pageSize <= wal.length; offset += 24 + pageSize) {
  current.push(wal.readUInt32BE(offset));
  if (wal.readUInt32BE(offset + 4) !== 0) {
    commits.push(current);
    current = [];
  }
}
reader.exec("COMMIT");
const owner = new Map(
  (reader.query("SELECT name, pageno FROM dbstat").all() as { name: string; pageno: number }[]).map((r) => [r.pageno, r.name]),
);
const perPage = new Map<string, number>();
for (const c of commits)
  for (const page of new Set(c)) {
    const table = owner.get(page) ?? "(new page)";
    perPage.set(table, (perPage.get(table) ?? 0) + 1);
  }
console.log(
  `${N} settlements per commit: ${(commits.reduce((s, c) => s + c.length, 0) / commits.length).toFixed(2)} WAL frames per commit`,
);
console.table(
  [...perPage.entries()]
    .sort((a, b) => b[1] - a[1])
    .map(([table, count]) => ({ table, frames_per_commit: Number((count / commits.length).toFixed(2)) })),
);
reader.close();
store.close();
rmSync(dir, { recursive: true, force: true });
