import { eq, sql } from "drizzle-orm";
import { modelAliases, modelBuilds, modelPrices } from "../schema.ts";
import type { CatalogStore, ModelBuild, PriceRow, PriceStore } from "../types.ts";
import type { Db } from "./open.ts";
import { EpochCache, type Freshness } from "./read-cache.ts";

function toBuild(row: typeof modelBuilds.$inferSelect): ModelBuild {
  const { updatedAt: _updatedAt, ...build } = row;
  return build;
}

export function sqliteCatalog(db: Db, freshness: Freshness): CatalogStore {
  const builds = new EpochCache<ModelBuild>(freshness);
  const aliases = new EpochCache<{ alias: string; buildId: string }>(freshness);
  // Whole lists for GET /v1/models, valid for the same epoch (the catalog is small and read far more often
  // than written). Callers get copies of the arrays.
  const lists = new EpochCache<readonly ModelBuild[] | readonly { alias: string; buildId: string }[]>(freshness, 2);
  // Looked up on every chat request: prepared once, not rebuilt per call.
  const buildById = db
    .select()
    .from(modelBuilds)
    .where(eq(modelBuilds.id, sql.placeholder("id")))
    .prepare();
  const aliasById = db
    .select({ alias: modelAliases.alias, buildId: modelAliases.buildId })
    .from(modelAliases)
    .where(eq(modelAliases.alias, sql.placeholder("alias")))
    .prepare();
  const getBuild = (id: string) =>
    builds.get(id, (key) => {
      const row = buildById.get({ id: key });
      return row && toBuild(row);
    });
  const getAlias = (alias: string) => aliases.get(alias, (key) => aliasById.get({ alias: key }));
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
      db.insert(modelBuilds).values(values).onConflictDoUpdate({ target: modelBuilds.id, set: update }).run();
      freshness.touch();
      return getBuild(build.id) as ModelBuild;
    },
    getBuild: (id) => getBuild(id),
    listBuilds: async () => [
      ...(lists.get("builds", () => db.select().from(modelBuilds).orderBy(modelBuilds.id).all().map(toBuild)) as readonly ModelBuild[]),
    ],
    async setAlias(alias, buildId, at) {
      if (!getBuild(buildId)) return undefined;
      db.insert(modelAliases)
        .values({ alias, buildId, updatedAt: at })
        .onConflictDoUpdate({ target: modelAliases.alias, set: { buildId, updatedAt: at } })
        .run();
      freshness.touch();
      return getAlias(alias);
    },
    getAlias: (alias) => getAlias(alias),
    listAliases: async () => [
      ...(lists.get("aliases", () =>
        db.select({ alias: modelAliases.alias, buildId: modelAliases.buildId }).from(modelAliases).orderBy(modelAliases.alias).all(),
      ) as readonly { alias: string; buildId: string }[]),
    ],
    async deleteAlias(alias) {
      const deleted = db.delete(modelAliases).where(eq(modelAliases.alias, alias)).returning().all().length > 0;
      freshness.touch();
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

export function sqlitePrices(db: Db, freshness: Freshness): PriceStore {
  const cache = new EpochCache<PriceRow>(freshness);
  const byModel = db
    .select(priceColumns)
    .from(modelPrices)
    .where(eq(modelPrices.model, sql.placeholder("model")))
    .prepare();
  const get = (model: string): PriceRow | undefined => cache.get(model, (key) => byModel.get({ model: key }));
  return {
    async set(row, at) {
      const { model: _model, ...update } = row;
      db.insert(modelPrices)
        .values({ ...row, updatedAt: at })
        .onConflictDoUpdate({ target: modelPrices.model, set: { ...update, updatedAt: at } })
        .run();
      freshness.touch();
      return get(row.model) as PriceRow;
    },
    async clear(model) {
      const cleared = db.delete(modelPrices).where(eq(modelPrices.model, model)).returning().all().length > 0;
      freshness.touch();
      return cleared;
    },
    get: (model) => get(model),
    list: async () => db.select(priceColumns).from(modelPrices).orderBy(modelPrices.model).all(),
  };
}
