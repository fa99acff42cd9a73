import { desc, eq, sql } from "drizzle-orm";
import { modelAliases, modelBuilds, modelPrices, usage } from "../schema.ts";
import type { CatalogStore, ModelBuild, PriceRow, PriceStore, UsageStore } from "../types.ts";
import type { Db } from "./open.ts";

function toBuild(row: typeof modelBuilds.$inferSelect): ModelBuild {
  const { updatedAt: _updatedAt, ...build } = row;
  return build;
}

export function sqliteCatalog(db: Db): CatalogStore {
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
  const getBuild = (id: string) => {
    const row = buildById.get({ id });
    return row && toBuild(row);
  };
  const getAlias = (alias: string) => aliasById.get({ alias });
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
      return getBuild(build.id) as ModelBuild;
    },
    getBuild: async (id) => getBuild(id),
    listBuilds: async () => db.select().from(modelBuilds).orderBy(modelBuilds.id).all().map(toBuild),
    async setAlias(alias, buildId, at) {
      if (!getBuild(buildId)) return undefined;
      db.insert(modelAliases)
        .values({ alias, buildId, updatedAt: at })
        .onConflictDoUpdate({ target: modelAliases.alias, set: { buildId, updatedAt: at } })
        .run();
      return getAlias(alias);
    },
    getAlias: async (alias) => getAlias(alias),
    listAliases: async () =>
      db.select({ alias: modelAliases.alias, buildId: modelAliases.buildId }).from(modelAliases).orderBy(modelAliases.alias).all(),
    deleteAlias: async (alias) => db.delete(modelAliases).where(eq(modelAliases.alias, alias)).returning().all().length > 0,
  };
}

const priceColumns = {
  model: modelPrices.model,
  inputPrice: modelPrices.inputPrice,
  outputPrice: modelPrices.outputPrice,
  cacheReadPrice: modelPrices.cacheReadPrice,
};

export function sqlitePrices(db: Db): PriceStore {
  const byModel = db
    .select(priceColumns)
    .from(modelPrices)
    .where(eq(modelPrices.model, sql.placeholder("model")))
    .prepare();
  const get = (model: string): PriceRow | undefined => byModel.get({ model });
  return {
    async set(row, at) {
      const { model: _model, ...update } = row;
      db.insert(modelPrices)
        .values({ ...row, updatedAt: at })
        .onConflictDoUpdate({ target: modelPrices.model, set: { ...update, updatedAt: at } })
        .run();
      return get(row.model) as PriceRow;
    },
    clear: async (model) => db.delete(modelPrices).where(eq(modelPrices.model, model)).returning().all().length > 0,
    get: async (model) => get(model),
    list: async () => db.select(priceColumns).from(modelPrices).orderBy(modelPrices.model).all(),
  };
}

export function sqliteUsage(db: Db): UsageStore {
  return {
    record: async (row) => db.insert(usage).values(row).onConflictDoNothing().returning({ id: usage.requestId }).all().length > 0,
    list: async (accountId, limit) =>
      db
        .select()
        .from(usage)
        .where(eq(usage.accountId, accountId))
        .orderBy(desc(usage.startedAt), desc(usage.requestId))
        .limit(limit)
        .all(),
  };
}
