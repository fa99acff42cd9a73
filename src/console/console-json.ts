/**
 * The console's answers as JSON-ready snake_case objects (docs/api.md, "Console API"): API keys, usage
 * rows, machines and device-login previews. Times in Unix ms, money in micro-USD. A key's hint is its
 * prefix and last characters, never the secret; a machine's trust is what this coordinator verified of
 * its live sessions, while a preview's is what the machine reported (verified only when it connects).
 */
import { type ProviderAttestation, type TrustLevel, trustRank } from "../../attestation/provider/levels.ts";
import { keySettingsJson } from "../admin/admin-json.ts";
import type { LoginPreview } from "../auth/device-flow.ts";
import { API_KEY_PREFIX, PROVIDER_TOKEN_PREFIX } from "../auth/secrets.ts";
import type { ApiKeyRecord, ProviderServedRow, ProviderTokenRecord, UsageRecord } from "../store/types.ts";

/** A live provider session as the machines list reads it (the fleet's ProviderSession has these). */
export interface LiveMachine {
  readonly identity: { readonly accountId: string; readonly tokenId: string };
  readonly ready: boolean;
  readonly trust: TrustLevel;
  readonly attestation: ProviderAttestation | undefined;
  readonly models: ReadonlyMap<string, unknown>;
}

/** Where a verified trust level comes from. */
export type TrustSource = "mda_chain" | "secure_enclave" | "evidence_refused" | "no_evidence";

export const REPORTED_TRUST_NOTE = "reported by the machine, verified when it connects";

export function keyJson(k: ApiKeyRecord, lastUsedAt: number | null) {
  return {
    id: k.id,
    name: k.name,
    hint: `${API_KEY_PREFIX}...${k.hint}`,
    created_at: k.createdAt,
    last_used_at: lastUsedAt,
    revoked_at: k.revokedAt,
    ...keySettingsJson(k),
  };
}

export type UsageJson = ReturnType<typeof usageJson>;

/** A usage row; `key_name` from the account's keys (null for JWT requests and unnamed keys). */
export function usageJson(r: UsageRecord, keyNames: ReadonlyMap<string, string | null>) {
  return {
    request_id: r.requestId,
    started_at: r.startedAt,
    key_id: r.keyId,
    key_name: r.keyId === null ? null : (keyNames.get(r.keyId) ?? null),
    model: r.model,
    prompt_tokens: r.promptTokens,
    cached_tokens: r.cachedTokens,
    completion_tokens: r.completionTokens,
    cost_micro_usd: r.cost,
    outcome: r.outcome,
    duration_ms: r.durationMs,
  };
}

export function trustSource(a: ProviderAttestation | undefined): TrustSource {
  if (a?.mdaVerified) return "mda_chain";
  if (a?.secureEnclave) return "secure_enclave";
  return a?.failure ? "evidence_refused" : "no_evidence";
}

/** A connection of a machine, wherever it is held: its verified trust, the source of it, its models. */
export interface MachineView {
  readonly trust: TrustLevel;
  readonly source: TrustSource;
  readonly models: readonly string[];
}

/** A machine on another replica as its fleet digest tells it (no evidence details: the level's usual source). */
export interface RemoteMachine {
  readonly tok?: string;
  readonly trust: TrustLevel;
  readonly builds: readonly string[];
}

export function localView(s: LiveMachine): MachineView {
  return { trust: s.trust, source: trustSource(s.attestation), models: [...s.models.keys()] };
}

export function remoteView(p: RemoteMachine): MachineView {
  const source: TrustSource = p.trust === "hardware" ? "mda_chain" : p.trust === "self_signed" ? "secure_enclave" : "no_evidence";
  return { trust: p.trust, source, models: p.builds };
}

/**
 * A device token as a machine: online while a welcomed connection with it is held (here, or on another
 * replica by its digest), with the best trust of those connections and the models they offer, and what
 * it served. Its name is the token's: the approved device login's machine name, or null.
 */
export function machineJson(t: ProviderTokenRecord, views: readonly MachineView[], served: ProviderServedRow | undefined) {
  const best = views.reduce<MachineView | undefined>(
    (a, v) => (a === undefined || trustRank(v.trust) > trustRank(a.trust) ? v : a),
    undefined,
  );
  return {
    id: t.id,
    name: t.name,
    hint: `${PROVIDER_TOKEN_PREFIX}...${t.hint}`,
    created_at: t.createdAt,
    expires_at: t.expiresAt,
    revoked_at: t.revokedAt,
    online: best !== undefined,
    trust_level: best?.trust ?? null,
    trust_source: best?.source ?? null,
    models: [...new Set(views.flatMap((v) => v.models))].sort(),
    requests_served: served?.requests ?? 0,
    earnings_micro_usd: served?.earnings ?? 0,
  };
}

export function previewJson(p: LoginPreview) {
  return {
    user_code: p.userCode,
    machine_name: p.machineName,
    requested_at: p.requestedAt,
    expires_at: p.expiresAt,
    models: p.models === null ? [] : [...p.models],
    trust: { level: p.trustLevel, verified: false, note: REPORTED_TRUST_NOTE },
  };
}
