/**
 * The model catalog as consumers see it: builds and aliases from the store, capacity from the fleet,
 * per-token prices from billing.
 *
 * Rules: an alias hides the build it points to from the default list (`include_builds=1` shows it); a
 * hidden build stays retrievable by exact id; required Model and ModelMetadata fields are always present,
 * optional ones only when known. A key's model allowlist filters both listing and retrieval.
 * Requests are routed by build: a provider serving an alias or an unknown id gets none (servedModelWarnings).
 */

import { type ModelPricing, modelPricing, type PricingService } from "../billing/pricing.ts";
import type { FleetView } from "../fleet/fleet-view.ts";
import type { ModelWarning } from "../protocol/frames.ts";
import type { CatalogStore, ModelAlias, ModelBuild } from "../store/types.ts";

export interface ModelAttestation {
  secure_enclave: boolean;
  sip_enabled: boolean;
  secure_boot: boolean;
  device_chain_verified: boolean;
  device_chain_sources: string[];
}

export interface ModelMetadata {
  model_type: string;
  quantization: string;
  provider_count: number;
  attested_providers: number;
  trust_level: string;
  routable_providers: number;
  warm_providers: number;
  can_accept: boolean;
  attestation?: ModelAttestation;
  display_name?: string;
}

export interface Model {
  id: string;
  object: "model";
  created: number;
  owned_by: string;
  metadata: ModelMetadata;
  name?: string;
  hugging_face_id?: string;
  description?: string;
  quantization?: string;
  deprecation_date?: string;
  input_modalities?: string[];
  output_modalities?: string[];
  supported_sampling_parameters?: string[];
  supported_features?: string[];
  context_length?: number;
  max_output_length?: number;
  pricing?: ModelPricing;
}

/** A requested id resolved to the build that serves it. */
export interface ResolvedModel {
  readonly id: string;
  readonly build: ModelBuild;
  readonly isAlias: boolean;
}

/** Which models a caller may see; `undefined` allows every model. */
export type ModelFilter = ((id: string, buildId: string) => boolean) | undefined;

export class CatalogService {
  constructor(
    private readonly store: CatalogStore,
    private readonly fleet: FleetView,
    private readonly pricing: PricingService,
  ) {}

  /**
   * Resolves an alias or build id; undefined when unknown. Synchronous when the store answers from memory
   * (every chat request asks: no promise then).
   */
  resolve(id: string): ResolvedModel | undefined | Promise<ResolvedModel | undefined> {
    const alias = this.store.getAlias(id);
    if (alias instanceof Promise) return this.resolveLater(id, alias);
    return resolvedAs(id, alias, this.store.getBuild(alias ? alias.buildId : id));
  }

  private async resolveLater(id: string, pending: Promise<ModelAlias | undefined>): Promise<ResolvedModel | undefined> {
    const alias = await pending;
    return resolvedAs(id, alias, await this.store.getBuild(alias ? alias.buildId : id));
  }

  /**
   * The ids a provider says it serves that are not builds: an alias (with the build to serve instead), or
   * an id the catalog does not know. Empty when every id is a build.
   */
  async servedModelWarnings(ids: readonly string[]): Promise<ModelWarning[]> {
    const warnings: ModelWarning[] = [];
    for (const id of ids) {
      if (await this.store.getBuild(id)) continue;
      const alias = await this.store.getAlias(id);
      warnings.push(alias ? { model: id, reason: "alias", build_id: alias.buildId } : { model: id, reason: "not_in_catalog" });
    }
    return warnings;
  }

  /** Every build with the aliases that name it (GET /v1/provider/models), sorted by id. */
  async buildsWithAliases(): Promise<{ id: string; aliases: string[] }[]> {
    const [builds, aliases] = await Promise.all([this.store.listBuilds(), this.store.listAliases()]);
    const byBuild = new Map(builds.map((b) => [b.id, [] as string[]]));
    for (const a of aliases) byBuild.get(a.buildId)?.push(a.alias);
    const order = (x: string, y: string) => (x < y ? -1 : x > y ? 1 : 0);
    return [...byBuild].map(([id, names]) => ({ id, aliases: names.sort(order) })).sort((x, y) => order(x.id, y.id));
  }

  async list(includeBuilds: boolean, filter: ModelFilter): Promise<Model[]> {
    const [builds, aliases] = await Promise.all([this.store.listBuilds(), this.store.listAliases()]);
    const byId = new Map(builds.map((b) => [b.id, b]));
    const hidden = new Set(aliases.map((a) => a.buildId));
    const entries: ResolvedModel[] = [];
    for (const a of aliases) {
      const build = byId.get(a.buildId);
      if (build) entries.push({ id: a.alias, build, isAlias: true });
    }
    for (const b of builds) {
      if (includeBuilds || !hidden.has(b.id)) entries.push({ id: b.id, build: b, isAlias: false });
    }
    entries.sort((x, y) => (x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
    const visible = filter ? entries.filter((e) => filter(e.id, e.build.id)) : entries;
    return Promise.all(visible.map((e) => this.toModel(e)));
  }

  /** The Model for an id, or undefined when unknown or filtered out. */
  async retrieve(id: string, filter: ModelFilter): Promise<Model | undefined> {
    const resolved = await this.resolve(id);
    if (!resolved || (filter && !filter(resolved.id, resolved.build.id))) return undefined;
    return this.toModel(resolved);
  }

  private async toModel({ id, build }: ResolvedModel): Promise<Model> {
    const capacity = this.fleet.capacity(build.id);
    const metadata: ModelMetadata = {
      model_type: build.modelType,
      quantization: build.quantization ?? "unknown",
      provider_count: capacity.providerCount,
      attested_providers: capacity.attestedProviders,
      trust_level: capacity.trustLevel,
      routable_providers: capacity.routableProviders,
      warm_providers: capacity.warmProviders,
      can_accept: capacity.canAccept,
    };
    if (capacity.attestation) {
      metadata.attestation = {
        secure_enclave: capacity.attestation.secureEnclave,
        sip_enabled: capacity.attestation.sipEnabled,
        secure_boot: capacity.attestation.secureBoot,
        device_chain_verified: capacity.attestation.deviceChainVerified,
        device_chain_sources: [...capacity.attestation.deviceChainSources],
      };
    }
    if (build.displayName !== null) metadata.display_name = build.displayName;

    const model: Model = { id, object: "model", created: build.created, owned_by: build.ownedBy, metadata };
    const optional = {
      name: build.name,
      hugging_face_id: build.huggingFaceId,
      description: build.description,
      quantization: build.quantization,
      deprecation_date: build.deprecationDate,
      input_modalities: build.inputModalities && [...build.inputModalities],
      output_modalities: build.outputModalities && [...build.outputModalities],
      supported_sampling_parameters: build.supportedSamplingParameters && [...build.supportedSamplingParameters],
      supported_features: build.supportedFeatures && [...build.supportedFeatures],
      context_length: build.contextLength,
      max_output_length: build.maxOutputLength,
    };
    for (const [k, v] of Object.entries(optional)) {
      if (v !== null) (model as unknown as Record<string, unknown>)[k] = v;
    }
    model.pricing = modelPricing(await this.pricing.ratesFor(id, build.id));
    return model;
  }
}

/** The model `id` resolves to: `build` (an alias's, when `alias` is one), or undefined without a build. */
function resolvedAs(
  id: string,
  alias: ModelAlias | undefined,
  build: ModelBuild | undefined | Promise<ModelBuild | undefined>,
): ResolvedModel | undefined | Promise<ResolvedModel | undefined> {
  if (build instanceof Promise) return build.then((b) => resolvedAs(id, alias, b));
  return build && { id, build, isAlias: Boolean(alias) };
}
