/**
 * GET /v1/models and GET /v1/models/{id} (spec: consumer-api.md, Model / ModelMetadata / ModelList and the
 * two endpoint sections). In-process through the harness; a fixed clock pins `created`.
 */
import { describe, expect, test } from "bun:test";
import type { FleetView, ModelCapacity } from "../../src/fleet/fleet-view.ts";
import { seedAccount, seedCatalog, type TestApp, testApp } from "../support/harness.ts";

const NOW_MS = 1_700_000_000_123;
const NOW_S = 1_700_000_000;
const clock = { now: () => NOW_MS };

const EMPTY_METADATA = {
  provider_count: 0,
  attested_providers: 0,
  trust_level: "none",
  routable_providers: 0,
  warm_providers: 0,
  can_accept: false,
};

/** The alias from seedCatalog, as the spec's Model: the build's fields under the alias id, the alias's price. */
const ALIAS_MODEL = {
  id: "org/model",
  object: "model",
  created: NOW_S,
  owned_by: "org",
  metadata: { model_type: "chat", quantization: "4bit", ...EMPTY_METADATA },
  name: "Base",
  quantization: "4bit",
  context_length: 8192,
  max_output_length: 2048,
  pricing: { prompt: "0.000000065", completion: "0.00000013", image: "0", request: "0", input_cache_read: "0.0000000325" },
};

/** Config defaults: 500000 / 1500000 µUSD per million, cache read 50% off. */
const FALLBACK_PRICING = { prompt: "0.0000005", completion: "0.0000015", image: "0", request: "0", input_cache_read: "0.00000025" };

/** The build the alias hides: same fields, its own id, and no price of its own (fallback). */
const BUILD_MODEL = { ...ALIAS_MODEL, id: "org/base-build-4bit", pricing: FALLBACK_PRICING };

/** A build created with `{}`: required fields and pricing only. */
const PLAIN_MODEL = {
  id: "other/plain",
  object: "model",
  created: NOW_S,
  owned_by: "umbra",
  metadata: { model_type: "chat", quantization: "unknown", ...EMPTY_METADATA },
  pricing: FALLBACK_PRICING,
};

async function seeded(options: { fleet?: FleetView } = {}): Promise<TestApp & { apiKey: string }> {
  const t = await testApp({ clock, ...options });
  await seedCatalog(t);
  const { apiKey } = await seedAccount(t);
  return Object.assign(t, { apiKey });
}

function ids(body: unknown): string[] {
  return (body as { data: { id: string }[] }).data.map((m) => m.id);
}

function notFound(message: string) {
  return { error: { message, type: "not_found_error", code: "model_not_found", param: "model" } };
}

const REQUIRED_MODEL = { id: "string", object: "string", created: "integer", owned_by: "string", metadata: "object" } as const;
const REQUIRED_METADATA = {
  model_type: "string",
  quantization: "string",
  provider_count: "integer",
  attested_providers: "integer",
  trust_level: "string",
  routable_providers: "integer",
  warm_providers: "integer",
  can_accept: "boolean",
} as const;
const OPTIONAL_MODEL = {
  name: "string",
  hugging_face_id: "string",
  description: "string",
  quantization: "string",
  deprecation_date: "string",
  input_modalities: "string[]",
  output_modalities: "string[]",
  supported_sampling_parameters: "string[]",
  supported_features: "string[]",
  context_length: "integer",
  max_output_length: "integer",
  pricing: "object",
} as const;
type Kind = "string" | "integer" | "boolean" | "object" | "string[]";

function kindOf(v: unknown): Kind | "other" {
  if (typeof v === "string") return "string";
  if (typeof v === "boolean") return "boolean";
  if (typeof v === "number" && Number.isSafeInteger(v)) return "integer";
  if (Array.isArray(v)) return v.every((x) => typeof x === "string") ? "string[]" : "other";
  if (typeof v === "object" && v !== null) return "object";
  return "other";
}

/** Lists every field whose presence or type breaks the spec's tables, as "path: problem". */
function shapeProblems(model: Record<string, unknown>): string[] {
  const problems: string[] = [];
  const check = (where: string, o: Record<string, unknown>, required: Record<string, Kind>, optional: Record<string, Kind>) => {
    for (const [k, kind] of Object.entries(required)) {
      if (!(k in o)) problems.push(`${where}.${k}: missing`);
      else if (kindOf(o[k]) !== kind) problems.push(`${where}.${k}: not ${kind}`);
    }
    for (const [k, v] of Object.entries(o)) {
      if (k in required) continue;
      const kind = optional[k];
      if (kind === undefined) problems.push(`${where}.${k}: not in the spec`);
      else if (v === null || kindOf(v) !== kind) problems.push(`${where}.${k}: not ${kind}`);
    }
  };
  check("model", model, REQUIRED_MODEL, OPTIONAL_MODEL);
  const metadata = model.metadata as Record<string, unknown>;
  check("metadata", metadata, REQUIRED_METADATA, { attestation: "object", display_name: "string" });
  if (metadata.attestation !== undefined) {
    const bools = {
      secure_enclave: "boolean",
      sip_enabled: "boolean",
      secure_boot: "boolean",
      device_chain_verified: "boolean",
      device_chain_sources: "string[]",
    } as const;
    check("attestation", metadata.attestation as Record<string, unknown>, bools, {});
  }
  if (model.pricing !== undefined) {
    const strings = { prompt: "string", completion: "string", image: "string", request: "string", input_cache_read: "string" } as const;
    check("pricing", model.pricing as Record<string, unknown>, strings, {});
  }
  if (model.object !== "model") problems.push("model.object: not 'model'");
  return problems;
}

describe("GET /v1/models", () => {
  test("aliases hide their builds by default", async () => {
    await using t = await seeded();
    const r = await t.call("GET", "/v1/models", { token: t.apiKey });
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toStartWith("application/json");
    expect(r.body).toEqual({ object: "list", data: [ALIAS_MODEL, PLAIN_MODEL] });
  });

  test("include_builds=1 adds the hidden builds", async () => {
    await using t = await seeded();
    const r = await t.call("GET", "/v1/models?include_builds=1", { token: t.apiKey });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ object: "list", data: [BUILD_MODEL, ALIAS_MODEL, PLAIN_MODEL] });
  });

  test("a build stops being hidden once its alias is deleted", async () => {
    await using t = await seeded();
    expect((await t.admin("DELETE", "/aliases/org/model")).status).toBe(200);
    const r = await t.call("GET", "/v1/models", { token: t.apiKey });
    expect(ids(r.body)).toEqual(["org/base-build-4bit", "other/plain"]);
  });

  test.each(["0", "true", "", "2", "01", "1%20", "yes"])("include_builds=%p is 400 invalid_request_error", async (value) => {
    await using t = await seeded();
    const r = await t.call("GET", `/v1/models?include_builds=${value}`, { token: t.apiKey });
    expect(r.status).toBe(400);
    expect(r.body).toEqual({
      error: { message: expect.any(String), type: "invalid_request_error", code: "invalid_value", param: "include_builds" },
    });
  });

  test("include_builds without a value is 400 too", async () => {
    await using t = await seeded();
    const r = await t.call("GET", "/v1/models?include_builds", { token: t.apiKey });
    expect(r.status).toBe(400);
    expect((r.body as { error: { param: string } }).error.param).toBe("include_builds");
  });

  test("an empty catalog is an empty list", async () => {
    await using t = await testApp({ clock });
    const { apiKey } = await seedAccount(t);
    const r = await t.call("GET", "/v1/models", { token: apiKey });
    expect(r).toMatchObject({ status: 200, body: { object: "list", data: [] } });
  });

  test("every model carries the required fields with the spec's types and nothing outside the spec", async () => {
    await using t = await seeded();
    await t.app.admin.upsertModel("full/build", {
      owned_by: "full-org",
      model_type: "chat",
      name: "Full",
      display_name: "Full (display)",
      hugging_face_id: "full-org/full",
      description: "every optional field set",
      quantization: "8bit",
      deprecation_date: "2027-01-31",
      input_modalities: ["text"],
      output_modalities: ["text"],
      supported_sampling_parameters: ["temperature", "top_p"],
      supported_features: ["streaming"],
      context_length: 32768,
      max_output_length: 4096,
    });
    const r = await t.call("GET", "/v1/models?include_builds=1", { token: t.apiKey });
    const data = (r.body as { data: Record<string, unknown>[] }).data;
    expect(data).toHaveLength(4);
    expect(data.flatMap(shapeProblems)).toEqual([]);
  });

  test("the shape check itself catches a wrong type, a missing field and an unknown field", () => {
    const broken = { ...PLAIN_MODEL, created: "1700000000", extra: 1, metadata: { ...PLAIN_MODEL.metadata, can_accept: undefined } };
    expect(shapeProblems(broken)).toEqual([
      "model.created: not integer",
      "model.extra: not in the spec",
      "metadata.can_accept: not boolean",
    ]);
  });

  test("a build created with every optional field shows them all, display_name inside metadata", async () => {
    await using t = await seeded();
    await t.app.admin.upsertModel("full/build", {
      created: 1_650_000_000,
      owned_by: "full-org",
      model_type: "chat",
      name: "Full",
      display_name: "Full (display)",
      hugging_face_id: "full-org/full",
      description: "every optional field set",
      quantization: "8bit",
      deprecation_date: "2027-01-31",
      input_modalities: ["text"],
      output_modalities: ["text"],
      supported_sampling_parameters: ["temperature", "top_p"],
      supported_features: ["streaming"],
      context_length: 32768,
      max_output_length: 4096,
    });
    const r = await t.call("GET", "/v1/models/full/build", { token: t.apiKey });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      id: "full/build",
      object: "model",
      created: 1_650_000_000,
      owned_by: "full-org",
      metadata: { model_type: "chat", quantization: "8bit", ...EMPTY_METADATA, display_name: "Full (display)" },
      name: "Full",
      hugging_face_id: "full-org/full",
      description: "every optional field set",
      quantization: "8bit",
      deprecation_date: "2027-01-31",
      input_modalities: ["text"],
      output_modalities: ["text"],
      supported_sampling_parameters: ["temperature", "top_p"],
      supported_features: ["streaming"],
      context_length: 32768,
      max_output_length: 4096,
      pricing: FALLBACK_PRICING,
    });
  });

  test("a build created with {} has no optional field except pricing", async () => {
    await using t = await seeded();
    const r = await t.call("GET", "/v1/models/other/plain", { token: t.apiKey });
    const model = r.body as Record<string, unknown>;
    expect(Object.keys(model).sort()).toEqual(["created", "id", "metadata", "object", "owned_by", "pricing"]);
    expect(Object.keys(model.metadata as object).sort()).toEqual(Object.keys(PLAIN_MODEL.metadata).sort());
    expect(model).toEqual(PLAIN_MODEL);
  });
});

describe("fleet capacity in metadata", () => {
  test("with the default empty fleet every figure is zero and nothing can accept", async () => {
    await using t = await seeded();
    const r = await t.call("GET", "/v1/models?include_builds=1", { token: t.apiKey });
    const metadata = (r.body as { data: { metadata: Record<string, unknown> }[] }).data.map((m) => m.metadata);
    expect(metadata).toHaveLength(3);
    for (const m of metadata) {
      expect(m).toMatchObject(EMPTY_METADATA);
      expect(m.attestation).toBeUndefined();
    }
  });

  test("reflects the fleet view, asked by build id (an alias reports its build's capacity)", async () => {
    const asked: string[] = [];
    const busy: ModelCapacity = {
      providerCount: 3,
      attestedProviders: 2,
      routableProviders: 2,
      warmProviders: 1,
      canAccept: true,
      trustLevel: "hardware",
      attestation: { secureEnclave: true, sipEnabled: true, secureBoot: false, deviceChainVerified: true, deviceChainSources: ["mdm"] },
    };
    const selfSigned: ModelCapacity = {
      providerCount: 1,
      attestedProviders: 0,
      routableProviders: 0,
      warmProviders: 0,
      canAccept: false,
      trustLevel: "self_signed",
    };
    const fleet: FleetView = {
      capacity(buildId) {
        asked.push(buildId);
        return buildId === "org/base-build-4bit" ? busy : selfSigned;
      },
    };
    await using t = await seeded({ fleet });
    const r = await t.call("GET", "/v1/models", { token: t.apiKey });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      object: "list",
      data: [
        {
          ...ALIAS_MODEL,
          metadata: {
            model_type: "chat",
            quantization: "4bit",
            provider_count: 3,
            attested_providers: 2,
            trust_level: "hardware",
            routable_providers: 2,
            warm_providers: 1,
            can_accept: true,
            attestation: {
              secure_enclave: true,
              sip_enabled: true,
              secure_boot: false,
              device_chain_verified: true,
              device_chain_sources: ["mdm"],
            },
          },
        },
        {
          ...PLAIN_MODEL,
          metadata: {
            model_type: "chat",
            quantization: "unknown",
            provider_count: 1,
            attested_providers: 0,
            trust_level: "self_signed",
            routable_providers: 0,
            warm_providers: 0,
            can_accept: false,
          },
        },
      ],
    });
    expect(asked.sort()).toEqual(["org/base-build-4bit", "other/plain"]);
  });

  test("capacity is read per request, not cached", async () => {
    let canAccept = false;
    const fleet: FleetView = {
      capacity: () => ({
        providerCount: canAccept ? 1 : 0,
        attestedProviders: 0,
        routableProviders: canAccept ? 1 : 0,
        warmProviders: 0,
        canAccept,
        trustLevel: "none",
      }),
    };
    await using t = await seeded({ fleet });
    const first = await t.call("GET", "/v1/models/org/model", { token: t.apiKey });
    canAccept = true;
    const second = await t.call("GET", "/v1/models/org/model", { token: t.apiKey });
    expect((first.body as { metadata: object }).metadata).toMatchObject({ can_accept: false, routable_providers: 0 });
    expect((second.body as { metadata: object }).metadata).toMatchObject({ can_accept: true, routable_providers: 1 });
  });
});

describe("GET /v1/models/{id}", () => {
  test.each([
    ["a literal slash", "/v1/models/org/model"],
    ["%2F", "/v1/models/org%2Fmodel"],
    ["lower-case %2f", "/v1/models/org%2fmodel"],
  ])("the alias with %s returns the full Model, id echoing the alias", async (_, path) => {
    await using t = await seeded();
    const r = await t.call("GET", path, { token: t.apiKey });
    expect(r.status).toBe(200);
    expect(r.body).toEqual(ALIAS_MODEL);
  });

  test("a build hidden from the default list is retrievable by its exact id", async () => {
    await using t = await seeded();
    const list = await t.call("GET", "/v1/models", { token: t.apiKey });
    expect(ids(list.body)).not.toContain("org/base-build-4bit");
    const r = await t.call("GET", "/v1/models/org/base-build-4bit", { token: t.apiKey });
    expect(r.status).toBe(200);
    expect(r.body).toEqual(BUILD_MODEL);
  });

  test("retrieve agrees with the list entry for every model", async () => {
    await using t = await seeded();
    const list = (await t.call("GET", "/v1/models?include_builds=1", { token: t.apiKey })).body as { data: { id: string }[] };
    for (const m of list.data) {
      const one = await t.call("GET", `/v1/models/${encodeURIComponent(m.id)}`, { token: t.apiKey });
      expect(one.body).toEqual(m);
    }
  });

  test("an unknown id is 404 model_not_found with param model", async () => {
    await using t = await seeded();
    const r = await t.call("GET", "/v1/models/org/unknown", { token: t.apiKey });
    expect(r.status).toBe(404);
    expect(r.body).toEqual(notFound("the model does not exist"));
  });

  test.each([
    ["a trailing slash", "/v1/models/org/model/"],
    ["a double-encoded slash (decoded once only)", "/v1/models/org%252Fmodel"],
    ["an id that differs in case", "/v1/models/ORG/MODEL"],
    ["an alias prefix", "/v1/models/org"],
  ])("%s is 404 model_not_found", async (_, path) => {
    await using t = await seeded();
    const r = await t.call("GET", path, { token: t.apiKey });
    expect(r.status).toBe(404);
    expect(r.body).toEqual(notFound(expect.any(String)));
  });

  test.each(["/v1/models/%ZZ", "/v1/models/org%2", "/v1/models/%E0%A4%A", "/v1/models/org%2Fmodel%"])(
    "broken percent-encoding %p is 404 model_not_found",
    async (path) => {
      await using t = await seeded();
      const r = await t.call("GET", path, { token: t.apiKey });
      expect(r.status).toBe(404);
      expect(r.body).toEqual(notFound(expect.any(String)));
    },
  );
});

describe("a key's allowed_models", () => {
  test("naming a build allows the aliases that point to it, in the list and on retrieve", async () => {
    await using t = await seeded();
    const { apiKey } = await seedAccount(t, { allowed_models: ["org/base-build-4bit"] });
    expect(ids((await t.call("GET", "/v1/models", { token: apiKey })).body)).toEqual(["org/model"]);
    expect(ids((await t.call("GET", "/v1/models?include_builds=1", { token: apiKey })).body)).toEqual(["org/base-build-4bit", "org/model"]);
    expect((await t.call("GET", "/v1/models/org/model", { token: apiKey })).body).toEqual(ALIAS_MODEL);
    expect((await t.call("GET", "/v1/models/org/base-build-4bit", { token: apiKey })).body).toEqual(BUILD_MODEL);
    const other = await t.call("GET", "/v1/models/other/plain", { token: apiKey });
    expect(other.status).toBe(404);
    expect(other.body).toEqual(notFound("the model does not exist"));
  });

  test("naming an alias allows that alias only, not the build behind it", async () => {
    await using t = await seeded();
    const { apiKey } = await seedAccount(t, { allowed_models: ["org/model"] });
    expect(ids((await t.call("GET", "/v1/models?include_builds=1", { token: apiKey })).body)).toEqual(["org/model"]);
    expect((await t.call("GET", "/v1/models/org/model", { token: apiKey })).status).toBe(200);
    const build = await t.call("GET", "/v1/models/org/base-build-4bit", { token: apiKey });
    expect(build.status).toBe(404);
    expect(build.body).toEqual(notFound("the model does not exist"));
  });

  test("naming an unrelated model hides the seeded alias and its build", async () => {
    await using t = await seeded();
    const { apiKey } = await seedAccount(t, { allowed_models: ["other/plain"] });
    expect(ids((await t.call("GET", "/v1/models?include_builds=1", { token: apiKey })).body)).toEqual(["other/plain"]);
    expect((await t.call("GET", "/v1/models/org/model", { token: apiKey })).status).toBe(404);
    expect((await t.call("GET", "/v1/models/org/base-build-4bit", { token: apiKey })).status).toBe(404);
  });

  test("a key without an allowlist sees every model", async () => {
    await using t = await seeded();
    const { apiKey } = await seedAccount(t, { allowed_models: null });
    expect(ids((await t.call("GET", "/v1/models?include_builds=1", { token: apiKey })).body)).toEqual([
      "org/base-build-4bit",
      "org/model",
      "other/plain",
    ]);
  });
});
