/**
 * The wrong-row canary: thousands of concurrent parameterised queries of eight shapes (plain selects,
 * joins, a read-only transaction, an aggregate) through the Postgres store's own pool, each asking for
 * one of many distinct rows; every answer must be its own. It guards against a driver or runtime that
 * hands one query's rows to another under load (docs: ../shared/research/scale-out.md section 1.2).
 * Skipped, saying so, when no PostgreSQL answers.
 */
import { describe, expect, test } from "bun:test";
import type { Store } from "../../../src/store/types.ts";
import { newBuild } from "../../store/conformance.ts";
import { testDatabase } from "../../support/pg.ts";
import { seededRandom } from "../../support/random.ts";

const SUITE = "Postgres wrong-row canary";
const db = await testDatabase([SUITE]);

const ROWS = 200;
const QUERIES = 4_000;
const T0 = 1_790_000_000_000;

async function seed(store: Store, i: number): Promise<void> {
  await store.accounts.create({ id: `a-${i}`, name: `account ${i}`, at: T0 + i });
  await store.accounts.credit({ accountId: `a-${i}`, amount: (i + 1) * 7, at: T0 + i });
  const key = { id: `k-${i}`, accountId: `a-${i}`, keyHash: `h-${i}`, hint: `…${i}`, name: `key ${i}`, allowedModels: [`m-${i}`] };
  await store.keys.create({ ...key, spendCap: null, rpm: i, tpm: null, selfRouteOnly: false, createdAt: T0 });
  await store.prices.set({ model: `m-${i}`, inputPrice: i * 3, outputPrice: i * 5, cacheReadPrice: null }, T0);
  await store.catalog.upsertBuild(newBuild({ id: `b-${i}`, created: T0, inputModalities: [`in-${i}`], contextLength: i }), T0);
  await store.usage.record({
    ...{ requestId: `r-${i}`, accountId: `a-${i}`, keyId: `k-${i}`, model: `m-${i}`, buildId: `b-${i}`, providerId: null },
    ...{
      promptTokens: i,
      cachedTokens: 0,
      completionTokens: 2 * i,
      cost: 0,
      startedAt: T0,
      firstContentMs: null,
      durationMs: 1,
      outcome: "ok",
    },
  });
}

/** Each shape: the query for row `i`, and what it must answer. */
const SHAPES: readonly ((store: Store, i: number) => Promise<[unknown, unknown]>)[] = [
  async (s, i) => [(await s.accounts.get(`a-${i}`))?.balance, (i + 1) * 7],
  async (s, i) => [(await s.keys.findByHash(`h-${i}`))?.rpm, i],
  async (s, i) => [(await s.keys.get(`k-${i}`))?.allowedModels, [`m-${i}`]],
  async (s, i) => [(await s.prices.get(`m-${i}`))?.outputPrice, i * 5],
  async (s, i) => [(await s.catalog.getBuild(`b-${i}`))?.inputModalities, [`in-${i}`]],
  async (s, i) => [await s.money.balance(`a-${i}`), (i + 1) * 7],
  async (s, i) => [(await s.accounts.ledger(`a-${i}`, 1))[0]?.balanceAfter, (i + 1) * 7],
  async (s, i) => [(await s.usage.totals(`a-${i}`, {})).byKey[0], expect.objectContaining({ key: `k-${i}`, completionTokens: 2 * i })],
];

describe.skipIf(db === undefined)(SUITE, () => {
  test(`${QUERIES} concurrent queries of ${SHAPES.length} shapes over ${ROWS} rows: each gets its own answer`, async () => {
    const store = await (db as NonNullable<typeof db>).store({ max: 4 });
    try {
      for (let i = 0; i < ROWS; i += 20) await Promise.all(Array.from({ length: 20 }, (_, j) => seed(store, i + j)));
      const random = seededRandom(21);
      const asked = Array.from({ length: QUERIES }, () => ({
        shape: Math.floor(random() * SHAPES.length),
        row: Math.floor(random() * ROWS),
      }));
      const answers = await Promise.all(asked.map(({ shape, row }) => (SHAPES[shape] as (typeof SHAPES)[number])(store, row)));
      const wrong = answers.flatMap(([got, want], n) => {
        try {
          expect(got).toEqual(want);
          return [];
        } catch {
          return [{ ...asked[n], got }];
        }
      });
      expect({ answered: answers.length, wrong: wrong.slice(0, 5), wrongCount: wrong.length }).toEqual({
        answered: QUERIES,
        wrong: [],
        wrongCount: 0,
      });
    } finally {
      await store.end();
    }
  });
});
