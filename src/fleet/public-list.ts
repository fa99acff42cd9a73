/**
 * The public provider list (GET /v1/providers/attestation): what anyone may know about the connected
 * providers' attestation, built once per fleet change and served as bytes.
 *
 * Invariants:
 * - Listed: sessions welcomed at or above the routing floor (the fleet decides); never account ids,
 *   device tokens or serial numbers.
 * - Built lazily, on the first read after the fleet's version moved (a session welcomed, ended, or its
 *   trust withdrawn): entries sorted by `provider_id` (UTF-16 code unit order), each serialized once.
 *   Reads between changes reuse those strings; the default first page is kept whole.
 */

import { type DeviceChainSource, deviceChainSource, type TrustLevel } from "../../attestation/provider/levels.ts";
import { postureJson } from "../../attestation/provider/posture.ts";
import { toBase64url } from "../crypto/encoding.ts";
import type { ProviderSession } from "./session.ts";

export interface PublicProviderAttestation {
  readonly provider_id: string;
  readonly trust_level: TrustLevel;
  readonly routable: boolean;
  readonly secure_enclave: boolean;
  readonly device_chain_verified: boolean;
  /** Which chain vouched: `mdm` (the Mac's stored MDM answer, re-checked), `evidence` (the hello's own), null. */
  readonly device_chain_source: DeviceChainSource | null;
  /** Until when (Unix ms) the stored MDM chain passes without a fresh one; null otherwise. */
  readonly device_chain_accepted_until: number | null;
  /** The identity key (P-256, 65-byte uncompressed point, base64url) that signs evidence and challenges. */
  readonly identity_key: string | null;
  readonly identity_key_sha256: string | null;
  /** This connection's X25519 key, to which requests are sealed. */
  readonly encryption_key: string | null;
  readonly posture: Readonly<Record<string, unknown>> | null;
  readonly models: readonly string[];
}

/** Bounds of `limit` (entries per page) and its default. */
export const PAGE_LIMIT = { min: 1, max: 100, fallback: 100 } as const;

export interface PublicListQuery {
  readonly limit: number;
  /** A `provider_id`: the page starts after it. */
  readonly after?: string;
  /** Only entries with this identity key (hex SHA-256), e.g. the signer of a receipt. */
  readonly identityKeySha256?: string;
}

/** What the fleet hands the list: a counter that moves on every change, and the listed entries. */
export interface PublicListSource {
  version(): number;
  entries(): PublicProviderAttestation[];
}

interface Snapshot {
  readonly version: number;
  readonly ids: readonly string[];
  readonly keyIds: readonly (string | null)[];
  readonly json: readonly string[];
  readonly firstPage: string;
}

/** One entry of the public list for a welcomed session at or above the routing floor (so `routable`). */
export function publicEntry(s: ProviderSession): PublicProviderAttestation {
  const a = s.attestation;
  return {
    provider_id: s.id,
    trust_level: s.trust,
    routable: true,
    secure_enclave: a?.secureEnclave ?? false,
    device_chain_verified: a?.mdaVerified ?? false,
    device_chain_source: deviceChainSource(a),
    device_chain_accepted_until: a?.deviceChain?.acceptedUntil ?? null,
    identity_key: a?.identityKey ? toBase64url(a.identityKey.point) : null,
    identity_key_sha256: a?.identityKey?.id ?? null,
    encryption_key: s.encryptionKey ? toBase64url(s.encryptionKey) : null,
    posture: a?.posture ? postureJson(a.posture) : null,
    models: [...s.models.keys()],
  };
}

const render = (entries: readonly string[], hasMore: boolean) => `{"object":"list","data":[${entries.join(",")}],"has_more":${hasMore}}`;

export class PublicProviderList {
  private snapshot: Snapshot | undefined;
  private built = 0;

  constructor(private readonly source: PublicListSource) {}

  /** How many times the list was built (once per fleet change that was read). */
  get builds(): number {
    return this.built;
  }

  /**
   * The JSON body of one page: at most `limit` entries (PAGE_LIMIT) with `provider_id` greater than `after`,
   * optionally only those whose `identity_key_sha256` matches; `has_more` says whether another matching
   * entry follows. `after` need not name a listed provider (it may have left meanwhile).
   */
  page(query: PublicListQuery): string {
    const s = this.current();
    if (query.after === undefined && query.identityKeySha256 === undefined && query.limit === PAGE_LIMIT.fallback) return s.firstPage;
    const out: string[] = [];
    let hasMore = false;
    for (let i = query.after === undefined ? 0 : firstAfter(s.ids, query.after); i < s.ids.length; i++) {
      if (query.identityKeySha256 !== undefined && s.keyIds[i] !== query.identityKeySha256) continue;
      if (out.length === query.limit) {
        hasMore = true;
        break;
      }
      out.push(s.json[i] as string);
    }
    return render(out, hasMore);
  }

  private current(): Snapshot {
    const version = this.source.version();
    if (this.snapshot?.version === version) return this.snapshot;
    const entries = this.source.entries().sort((x, y) => (x.provider_id < y.provider_id ? -1 : 1));
    const json = entries.map((e) => JSON.stringify(e));
    this.built++;
    this.snapshot = {
      version,
      ids: entries.map((e) => e.provider_id),
      keyIds: entries.map((e) => e.identity_key_sha256),
      json,
      firstPage: render(json.slice(0, PAGE_LIMIT.fallback), json.length > PAGE_LIMIT.fallback),
    };
    return this.snapshot;
  }
}

/** Index of the first id greater than `after` in sorted `ids`. */
function firstAfter(ids: readonly string[], after: string): number {
  let lo = 0;
  let hi = ids.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((ids[mid] as string) <= after) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
