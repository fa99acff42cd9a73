/** The Postgres CatalogStore (builds, aliases) and PriceStore (no read cache yet). */
import { eq } from "drizzle-orm";
import type { CatalogStore, ModelBuild, PriceRow, PriceStore } from "../types.ts";
import type { PgDb } from "./open.ts";
import { byCode } from "./order.ts";
import { modelAliases, modelBuilds, modelPrices } from "./schema.ts";

function toBuild(row: typeof modelBuilds.$inferSelect): ModelBuild {
  const { updatedAt: _updatedAt, ...build } = row;
  return build;
}

const aliasColumns = { alias: modelAliases.alias, buildId: modelAliases.buildId };

export function pgCatalog(db: PgDb): CatalogStore {
  const getBuild = async (id: string) => {
    const [row] = await db.select().from(modelBuilds).where(eq(modelBuilds.id, id));
    return row && toBuild(row);
  };
  const getAlias = async (alias: string) => (await db.select(aliasColumns).from(modelAliases).where(eq(modelAliases.alias, alias)))[0];
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
      return (await getBuild(build.id)) as ModelBuild;
    },
    getBuild,
    listBuilds: async () => (await db.select().from(modelBuilds).orderBy(byCode(modelBuilds.id))).map(toBuild),
    async setAlias(alias, buildId, at) {
      if (!(await getBuild(buildId))) return undefined;
      await db
        .insert(modelAliases)
        .values({ alias, buildId, updatedAt: at })
        .onConflictDoUpdate({ target: modelAliases.alias, set: { buildId, updatedAt: at } });
      return getAlias(alias);
    },
    getAlias,
    listAliases: async () => db.select(aliasColumns).from(modelAliases).orderBy(byCode(modelAliases.alias)),
    deleteAlias: async (alias) => (await db.delete(modelAliases).where(eq(modelAliases.alias, alias)).returning()).length > 0,
  };
}

const priceColumns = {
  model: modelPrices.model,
  inputPrice: modelPrices.inputPrice,
  outputPrice: modelPrices.outputPrice,
  cacheReadPrice: modelPrices.cacheReadPrice,
};

export function pgPrices(db: PgDb): PriceStore {
  const get = async (model: string): Promise<PriceRow | undefined> =>
    (await db.select(priceColumns).from(modelPrices).where(eq(modelPrices.model, model)))[0];
  return {
    async set(row, at) {
      const { model: _model, ...update } = row;
      await db
        .insert(modelPrices)
        .values({ ...row, updatedAt: at })
        .onConflictDoUpdate({ target: modelPrices.model, set: { ...update, updatedAt: at } });
      return (await get(row.model)) as PriceRow;
    },
    clear: async (model) => (await db.delete(modelPrices).where(eq(modelPrices.model, model)).returning()).length > 0,
    get,
    list: async () => db.select(priceColumns).from(modelPrices).orderBy(byCode(modelPrices.model)),
  };
}
