/**
 * The catalog's admin operations: model builds (upsert keeps a build's `created`), aliases (a name is a
 * build or an alias, never both) and prices (for a known build or alias). Same rules as AdminService:
 * untrusted JSON in, 400 with `param` for bad values, 404 for unknown models, 409 for name collisions;
 * everything is validated before the first write.
 */
import { Errors } from "../errors/api-error.ts";
import type { ModelBuild, PriceRow, Store } from "../store/types.ts";
import {
  MODEL_ID,
  objectBody,
  optionalInt,
  optionalString,
  optionalStringArray,
  requiredInt,
  requiredString,
} from "../validation/fields.ts";
import { buildJson, priceJson, seconds } from "./admin-json.ts";

/** One million USD per million tokens: far above any real rate, small enough to keep products exact. */
const MAX_PRICE = 1_000_000_000_000;

const BUILD_FIELDS = [
  "created",
  "owned_by",
  "model_type",
  "name",
  "display_name",
  "hugging_face_id",
  "description",
  "quantization",
  "deprecation_date",
  "input_modalities",
  "output_modalities",
  "supported_sampling_parameters",
  "supported_features",
  "context_length",
  "max_output_length",
] as const;

export class CatalogAdmin {
  constructor(
    protected readonly store: Store,
    protected readonly now: () => number,
  ) {}

  private modelId(id: string, param: string): string {
    return requiredString({ [param]: id }, param, MODEL_ID);
  }

  async upsertModel(buildId: string, body: unknown) {
    const id = this.modelId(buildId, "id");
    const o = objectBody(body ?? {}, BUILD_FIELDS);
    const existing = await this.store.catalog.getBuild(id);
    const build: ModelBuild = {
      id,
      created: optionalInt(o, "created", 0, 253402300799) ?? existing?.created ?? seconds(this.now()),
      ownedBy: optionalString(o, "owned_by", { max: 128 }) ?? "umbra",
      modelType: optionalString(o, "model_type", { max: 64 }) ?? "chat",
      name: optionalString(o, "name", { max: 200 }) ?? null,
      displayName: optionalString(o, "display_name", { max: 200 }) ?? null,
      huggingFaceId: optionalString(o, "hugging_face_id", { max: 256 }) ?? null,
      description: optionalString(o, "description", { max: 4000 }) ?? null,
      quantization: optionalString(o, "quantization", { max: 64 }) ?? null,
      deprecationDate:
        optionalString(o, "deprecation_date", {
          max: 32,
          pattern: /^\d{4}-\d{2}-\d{2}$/,
          patternHint: "must be a date as YYYY-MM-DD",
        }) ?? null,
      inputModalities: optionalStringArray(o, "input_modalities", { max: 32 }) ?? null,
      outputModalities: optionalStringArray(o, "output_modalities", { max: 32 }) ?? null,
      supportedSamplingParameters: optionalStringArray(o, "supported_sampling_parameters", { max: 64 }) ?? null,
      supportedFeatures: optionalStringArray(o, "supported_features", { max: 64 }) ?? null,
      contextLength: optionalInt(o, "context_length", 1, 100_000_000) ?? null,
      maxOutputLength: optionalInt(o, "max_output_length", 1, 100_000_000) ?? null,
    };
    if (build.contextLength !== null && build.maxOutputLength !== null && build.maxOutputLength > build.contextLength) {
      throw Errors.invalidValue("'max_output_length' must not exceed 'context_length'", "max_output_length");
    }
    if (await this.store.catalog.getAlias(id)) throw Errors.conflict(`'${id}' is already an alias`, "id");
    return buildJson(await this.store.catalog.upsertBuild(build, this.now()));
  }

  async listBuilds() {
    return { object: "list" as const, data: (await this.store.catalog.listBuilds()).map(buildJson) };
  }

  async setAlias(aliasId: string, body: unknown) {
    const alias = this.modelId(aliasId, "alias");
    const o = objectBody(body, ["build_id"]);
    const buildId = requiredString(o, "build_id", MODEL_ID);
    if (await this.store.catalog.getBuild(alias)) throw Errors.conflict(`'${alias}' is already a build id`, "alias");
    const set = await this.store.catalog.setAlias(alias, buildId, this.now());
    if (!set) throw Errors.modelNotFound(`no model build '${buildId}'`, "build_id");
    return { alias: set.alias, object: "model_alias" as const, build_id: set.buildId };
  }

  async deleteAlias(aliasId: string) {
    const alias = this.modelId(aliasId, "alias");
    if (!(await this.store.catalog.deleteAlias(alias))) throw Errors.modelNotFound(`no alias '${alias}'`, "alias");
    return { alias, object: "model_alias" as const, deleted: true };
  }

  async listAliases() {
    return {
      object: "list" as const,
      data: (await this.store.catalog.listAliases()).map((a) => ({ alias: a.alias, object: "model_alias" as const, build_id: a.buildId })),
    };
  }

  private async requireModel(model: string): Promise<void> {
    if (!(await this.store.catalog.getAlias(model)) && !(await this.store.catalog.getBuild(model))) {
      throw Errors.modelNotFound(`no model '${model}'`, "model");
    }
  }

  async setPrice(modelId: string, body: unknown) {
    const model = this.modelId(modelId, "model");
    const o = objectBody(body, ["input_price", "output_price", "cache_read_price"]);
    const row: PriceRow = {
      model,
      inputPrice: requiredInt(o, "input_price", 0, MAX_PRICE),
      outputPrice: requiredInt(o, "output_price", 0, MAX_PRICE),
      cacheReadPrice: optionalInt(o, "cache_read_price", 0, MAX_PRICE) ?? null,
    };
    await this.requireModel(model);
    return priceJson(await this.store.prices.set(row, this.now()));
  }

  async clearPrice(modelId: string) {
    const model = this.modelId(modelId, "model");
    await this.requireModel(model);
    const deleted = await this.store.prices.clear(model);
    return { model, object: "price" as const, deleted };
  }

  async listPrices() {
    return { object: "list" as const, data: (await this.store.prices.list()).map(priceJson) };
  }
}
