/**
 * The OpenAPI document's resource schemas: Model (with metadata, attestation and per-token prices), the
 * model list, the public price list, the coordinator's attestation document, the public provider list and
 * the health answers. Field names are those src/catalog/catalog.ts, src/billing/pricing.ts,
 * src/attestation/coordinator-attestation.ts and src/fleet/public-list.ts write; closed vocabularies are
 * taken from the code's own tables (trust levels, secure boot levels, page bounds).
 */
import { TRUST_LEVELS } from "../../../attestation/provider/levels.ts";
import { SECURE_BOOT_LEVELS } from "../../../attestation/provider/posture.ts";
import { PAGE_LIMIT } from "../../fleet/public-list.ts";
import { int64, type JsonSchema, object, orNull, ref, string } from "./schema.ts";

const count = (description: string) => int64(description, 0);
const strings = (description: string): JsonSchema => ({ type: "array", items: { type: "string" }, description });
const trustLevel: JsonSchema = { type: "string", enum: [...TRUST_LEVELS], description: "Highest verified level." };
const hex = (bytes: number, description: string): JsonSchema => ({ type: "string", pattern: `^[0-9a-f]{${bytes * 2}}$`, description });
const usdPerToken = (description: string) => ({ type: "string", pattern: "^[0-9]+(\\.[0-9]+)?$", description });
const usdPerMillion = (description: string) => ({ type: "string", pattern: "^\\$[0-9]+\\.[0-9]{2,}$", description });
const microUsd = (description: string) => int64(`${description} µUSD per million tokens.`, 0);

export function resourceSchemas(): Record<string, JsonSchema> {
  return {
    ModelAttestation: object(
      {
        secure_enclave: { type: "boolean" },
        sip_enabled: { type: "boolean" },
        secure_boot: { type: "boolean" },
        device_chain_verified: { type: "boolean", description: "Every attested provider's level rests on a verified device chain." },
        device_chain_sources: {
          type: "array",
          items: { type: "string", enum: ["evidence", "mdm"] },
          description:
            "Which chains vouched among the attested providers, sorted: `mdm` (a stored MDM answer), `evidence` (the hello's own).",
        },
      },
      ["secure_enclave", "sip_enabled", "secure_boot", "device_chain_verified", "device_chain_sources"],
      "From verified evidence only; `sip_enabled` and `secure_boot` are true only when every attested provider proved them.",
    ),
    ModelMetadata: object(
      {
        model_type: string("e.g. `chat`."),
        quantization: string("`unknown` when not recorded."),
        provider_count: count("Providers connected for this build (every replica)."),
        attested_providers: count("Providers with verified attestation."),
        trust_level: trustLevel,
        routable_providers: count("Providers that may take requests now."),
        warm_providers: count("Providers with the model loaded."),
        can_accept: { type: "boolean", description: "A request would find a free slot now." },
        attestation: ref("ModelAttestation"),
        display_name: string(),
      },
      [
        "model_type",
        "quantization",
        "provider_count",
        "attested_providers",
        "trust_level",
        "routable_providers",
        "warm_providers",
        "can_accept",
      ],
    ),
    ModelPricing: object(
      {
        prompt: usdPerToken("USD per input token."),
        completion: usdPerToken("USD per output token."),
        image: usdPerToken("USD per image (`0` today)."),
        request: usdPerToken("USD per request (`0` today)."),
        input_cache_read: usdPerToken("USD per input token served from the prefix cache."),
      },
      ["prompt", "completion", "image", "request", "input_cache_read"],
      "Prices per single token (not per million), exact decimal strings.",
    ),
    Model: object(
      {
        id: string("The id to request; may contain slashes. An alias is listed under its own id."),
        object: { type: "string", const: "model" },
        created: int64("Unix seconds."),
        owned_by: string(),
        metadata: ref("ModelMetadata"),
        name: string(),
        hugging_face_id: string(),
        description: string(),
        quantization: string(),
        deprecation_date: string("YYYY-MM-DD."),
        input_modalities: strings("e.g. `text`, `image`."),
        output_modalities: strings("e.g. `text`."),
        supported_sampling_parameters: strings("Sampling parameters the runtime honours."),
        supported_features: strings("Features, e.g. `tools`."),
        context_length: int64(undefined, 0),
        max_output_length: int64("Output budgets are clamped to it.", 0),
        pricing: ref("ModelPricing"),
      },
      ["id", "object", "created", "owned_by", "metadata"],
      "Optional fields are present only when known; `pricing` is always present here.",
    ),
    ModelList: object(
      { object: { type: "string", const: "list" }, data: { type: "array", items: ref("Model") } },
      ["object", "data"],
      "Sorted by id.",
    ),
    PriceEntry: object(
      {
        model: string(),
        input_price: microUsd("Effective input rate,"),
        input_usd: usdPerMillion("The same in USD per million tokens, e.g. `$0.065`."),
        output_price: microUsd("Output rate,"),
        output_usd: usdPerMillion("USD per million tokens."),
        cache_read_price: microUsd("Cache-read rate (the input rate less the default discount when none is stored),"),
        cache_read_usd: usdPerMillion("USD per million tokens."),
      },
      ["model", "input_price", "input_usd", "output_price", "output_usd", "cache_read_price", "cache_read_usd"],
    ),
    PricingResponse: object(
      {
        prices: { type: "array", items: ref("PriceEntry"), description: "One row per model with a stored price, sorted by model." },
        fallback_input_price: microUsd("For models without a stored price:"),
        fallback_input_usd: usdPerMillion("USD per million tokens."),
        fallback_output_price: microUsd("For models without a stored price:"),
        fallback_output_usd: usdPerMillion("USD per million tokens."),
        fallback_cache_read_price: microUsd("For models without a stored price:"),
        fallback_cache_read_usd: usdPerMillion("USD per million tokens."),
      },
      [
        "prices",
        "fallback_input_price",
        "fallback_input_usd",
        "fallback_output_price",
        "fallback_output_usd",
        "fallback_cache_read_price",
        "fallback_cache_read_usd",
      ],
      "No update timestamp: fetch again for current rates. Units differ from ModelPricing's.",
    ),
    CoordinatorAttestation: coordinatorAttestation(),
    ProviderPosture: object(
      {
        sip_enabled: { type: "boolean" },
        secure_boot: { type: "string", enum: [...SECURE_BOOT_LEVELS] },
        third_party_kexts: { type: "boolean" },
        os_version: string("macOS version, e.g. `15.1.1`."),
      },
      ["sip_enabled", "secure_boot", "third_party_kexts", "os_version"],
    ),
    ProviderAttestation: object(
      {
        provider_id: string(),
        trust_level: trustLevel,
        routable: { type: "boolean", description: "At or above the routing floor: always true here." },
        secure_enclave: { type: "boolean", description: "Signed evidence verified." },
        device_chain_verified: { type: "boolean", description: "Apple MDA chain verified and bound to the identity key." },
        device_chain_source: {
          anyOf: [{ type: "string", enum: ["mdm", "evidence"] }, { type: "null" }],
          description:
            "Which chain vouched: `mdm` (the Mac's MDM answer, stored and re-checked), `evidence` (the hello's own); null below hardware.",
        },
        device_chain_accepted_until: {
          anyOf: [{ type: "integer" }, { type: "null" }],
          description: "Unix ms: the last moment the stored MDM chain passes without a fresh one; null otherwise.",
        },
        identity_key: orNull(string("P-256 public key, 65-byte uncompressed point, base64url.")),
        identity_key_sha256: orNull(hex(32, "SHA-256 of the identity key (a receipt's `metadata.provider_key_id`).")),
        encryption_key: orNull(string("This connection's X25519 key, base64url.")),
        posture: { anyOf: [ref("ProviderPosture"), { type: "null" }], description: "Null without verified evidence." },
        models: strings("Builds served."),
      },
      [
        "provider_id",
        "trust_level",
        "routable",
        "secure_enclave",
        "device_chain_verified",
        "device_chain_source",
        "device_chain_accepted_until",
        "identity_key",
        "identity_key_sha256",
        "encryption_key",
        "posture",
        "models",
      ],
    ),
    ProviderAttestationList: object(
      {
        object: { type: "string", const: "list" },
        data: { type: "array", items: ref("ProviderAttestation"), maxItems: PAGE_LIMIT.max },
        has_more: { type: "boolean", description: "More matching entries follow: ask again with `after` = the page's last `provider_id`." },
      },
      ["object", "data", "has_more"],
    ),
    Health: object({ status: { type: "string", const: "ok" } }, ["status"]),
    Ready: object({ status: { type: "string", const: "ready" } }, ["status"]),
    NotReady: object({ status: { type: "string", const: "unavailable" }, reason: { type: "string", enum: ["shutting down", "store"] } }, [
      "status",
      "reason",
    ]),
  };
}

function coordinatorAttestation(): JsonSchema {
  return object(
    {
      platform: { type: "string", enum: ["sev-snp", "tdx", "dev"], description: "`dev`: development evidence." },
      evidence: string("Base64 of the platform's raw report (SEV-SNP ATTESTATION_REPORT, or the TDX quote)."),
      endorsements: strings("Base64 DER certificates the host handed out with the report (SEV-SNP: VCEK, ASK, ARK); may be empty."),
      report_data: object(
        {
          hex: hex(64, "The 64 bytes the report binds."),
          layout: { type: "string", const: "sha256(tls_public_key_spki_der) || sha256(sealing_public_key)" },
          tls_public_key_sha256: hex(32, "Bytes 0..31; zeros when `tls_public_key_bound` is false."),
          sealing_key_sha256: hex(32, "Bytes 32..63: SHA-256 of the raw sealing public key."),
        },
        ["hex", "layout", "tls_public_key_sha256", "sealing_key_sha256"],
      ),
      expected_measurement: orNull(hex(48, "The build's expected launch measurement: a hint for humans, never what a verifier trusts.")),
      sealing_public_key: { type: "string", pattern: "^[A-Za-z0-9_-]{43}$", description: "X25519, raw 32 bytes, unpadded base64url." },
      tls_public_key_bound: { type: "boolean" },
      development: { type: "boolean", description: "True for `dev` evidence: proves nothing about hardware." },
      development_root: object(
        { name: string(), ark: string("Base64 DER."), ask: string("Base64 DER.") },
        ["name", "ark", "ask"],
        "Development only: the chain to verify `dev` evidence against.",
      ),
      config: object(
        {
          sha256: hex(32, "Digest of the non-secret configuration."),
          bound_by: { type: "string", enum: ["cmdline", "host-data", "none"] },
        },
        ["sha256", "bound_by"],
      ),
    },
    [
      "platform",
      "evidence",
      "endorsements",
      "report_data",
      "expected_measurement",
      "sealing_public_key",
      "tls_public_key_bound",
      "development",
    ],
    'How to verify it: docs/security.md, "Verifying the coordinator".',
  );
}
