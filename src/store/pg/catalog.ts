/**
 * The Postgres CatalogStore (builds, aliases) and PriceStore. Their reads (every chat request's alias,
 * build and price; GET /v1/models's lists) are cached per change-feed epoch (change-feed.ts); writes here
 * move the epoch.
 */
import { eq } from "drizzle-orm";
import type { CatalogStore, ModelAlias, ModelBuild, PriceRow, PriceStore } from "../types.ts";
import { type ChangeFeed, FeedCache } from "./change-feed.ts";
import type { PgDb } from "./open.ts";
import { byCode } from "./order.ts";
import { modelAliases, modelBuilds, modelPrices } from "./schema.ts";

function toBuild(row: typeof modelBuilds.$inferSelect): ModelBuild {
  const { updatedAt: _updatedAt, ...build } = row;
  return build;
}

const aliasColumns = { alias: modelAliases.alias, buildId: modelAliases.buildId };

type Feed = Pick<ChangeFeed, "epoch" | "touch">;

export function pgCatalog(db: PgDb, feed: Feed): CatalogStore {
  const builds = new FeedCache<ModelBuild>(feed);
  const aliases = new FeedCache<ModelAlias>(feed);
  const lists = new FeedCache<readonly ModelBuild[] | readonly ModelAlias[]>(feed, 2);
  const getBuild = (id: string) =>
    builds.get(id, async () => {
      const [row] = await db.select().from(modelBuilds).where(eq(modelBuilds.id, id));
      return row && toBuild(row);
    });
  const getAlias = (alias: string) =>
    aliases.get(alias, async () => (await db.select(aliasColumns).from(modelAliases).where(eq(modelAliases.alias, alias)))[0]);
  const listBuilds = async () => (await db.select().from(modelBuilds).orderBy(byCode(modelBuilds.id))).map(toBuild);
  const listAliases = async () => db.select(aliasColumns).from(modelAliases).orderBy(byCode(modelAliases.alias));
  return {
    async upsertBuild(build, at) {
      const values = {
        ...build,
        inputModalities: build.inputModalities && [...build.inputModalities],
        outputModalities: build.outputModalities && [...build.outputModalities],
        supportedSamplingParameters: build.supportedSamplingParameters && [...build.supportedSamplingParameters],
        supportedFeatures: build.supportedFeatures && [...build.supportedFeatures],
        updatedAt: at,
      };
      const { id: _id, ...update } = values;
      await db.insert(modelBuilds).values(values).onConflictDoUpdate({ target: modelBuilds.id, set: update });
      feed.touch();
      return (await getBuild(build.id)) as ModelBuild;
    },
    getBuild,
    listBuilds: async () => [...((await lists.get("builds", listBuilds)) as readonly ModelBuild[])],
    async setAlias(alias, buildId, at) {
      if (!(await getBuild(buildId))) return undefined;
      await db
        .insert(modelAliases)
        .values({ alias, buildId, updatedAt: at })
        .onConflictDoUpdate({ target: modelAliases.alias, set: { buildId, updatedAt: at } });
      feed.touch();
      return getAlias(alias);
    },
    getAlias,
    listAliases: async () => [...((await lists.get("aliases", listAliases)) as readonly ModelAlias[])],
    async deleteAlias(alias) {
      const deleted = (await db.delete(modelAliases).where(eq(modelAliases.alias, alias)).returning()).length > 0;
      feed.touch();
      return deleted;
    },
  };
}

const priceColumns = {
  model: modelPrices.model,
  inputPrice: modelPrices.inputPrice,
  outputPrice: modelPrices.outputPrice,
  cacheReadPrice: modelPrices.cacheReadPrice,
};

export function pgPrices(db: PgDb, feed: Feed): PriceStore {
  const rows = new FeedCache<PriceRow>(feed);
  const all = new FeedCache<readonly PriceRow[]>(feed, 1);
  const get = (model: string): Promise<PriceRow | undefined> =>
    rows.get(model, async () => (await db.select(priceColumns).from(modelPrices).where(eq(modelPrices.model, model)))[0]);
  return {
    async set(row, at) {
      const { model: _model, ...update } = row;
      await db
        .insert(modelPrices)
        .values({ ...row, updatedAt: at })
        .onConflictDoUpdate({ target: modelPrices.model, set: { ...update, updatedAt: at } });
      feed.touch();
      return (await get(row.model)) as PriceRow;
    },
    async clear(model) {
      const cleared = (await db.delete(modelPrices).where(eq(modelPrices.model, model)).returning()).length > 0;
      feed.touch();
      return cleared;
    },
    get,
    list: async () => [
      ...((await all.get("all", async () => db.select(priceColumns).from(modelPrices).orderBy(byCode(modelPrices.model)))) ?? []),
    ],
  };
}
