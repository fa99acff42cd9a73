/**
 * The fleet digest a replica publishes every period on `<prefix>.fleet.<replicaId>`: its welcomed
 * providers with what another replica needs to route to them (builds, free slots, draining, trust) and to
 * show them (/v1/models capacity and attestation figures, the /v1/providers/attestation entry of those at
 * the routing floor).
 * One digest is `n` pages {v, r, q, i, n, p} (q: the digest's number), each within max_payload.
 * Presence itself is the `<prefix>.prov.<id>` subscription; the digest only describes. Decoding
 * validates every field (ProtocolError); account and device token ids cross only the replicas' private
 * network (a token id names the machine in usage rows, never authenticates it).
 */
import {
  type AttestationFacts,
  attestationFacts,
  type DeviceChainSource,
  isTrustLevel,
  meetsTrustFloor,
  NO_EVIDENCE,
  type TrustLevel,
} from "../../attestation/provider/levels.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { PublicProviderAttestation } from "../fleet/public-list.ts";
import { MAX_BUILD_ID, MAX_CONCURRENCY, MAX_MODELS_PER_HELLO } from "../protocol/frames.ts";
import { ProtocolError } from "../protocol/parse.ts";
import { isToken, WIRE_VERSION } from "./wire.ts";

export interface DigestProvider {
  readonly id: string;
  readonly account: string;
  /** Its device token's id (usage rows of requests it serves name it); absent from older replicas. */
  readonly tok?: string;
  readonly builds: readonly string[];
  readonly warm: readonly string[];
  readonly max: number;
  readonly active: number;
  readonly draining: boolean;
  readonly trust: TrustLevel;
  /** What verified evidence proves of its posture (/v1/models attestation figures); all false when absent. */
  readonly att?: { readonly se: boolean; readonly sip: boolean; readonly sb: boolean; readonly dc?: DeviceChainSource | null };
  /** Its public attestation entry, present when it meets the owner's routing floor. */
  readonly pub?: PublicProviderAttestation;
}

/** The summary facts of a digest entry (attestationFacts of the owner's session). */
export function digestFacts(p: DigestProvider): AttestationFacts {
  return {
    level: p.trust,
    secureEnclave: p.att?.se ?? false,
    sipEnabled: p.att?.sip ?? false,
    secureBoot: p.att?.sb ?? false,
    deviceChain: p.att?.dc ?? null,
  };
}

export interface DigestPage {
  readonly replica: string;
  readonly seq: number;
  readonly index: number;
  readonly pages: number;
  readonly providers: readonly DigestProvider[];
}

const encoder = new TextEncoder();
const MAX_PAGES = 1024;

/** The welcomed sessions of `fleet` as digest entries. */
export function describeFleet(fleet: Fleet, minTrust: TrustLevel): DigestProvider[] {
  const listed = new Map(fleet.publicAttestations().map((p) => [p.provider_id, p]));
  return fleet
    .list()
    .filter((s) => s.ready)
    .map((s) => {
      const pub = meetsTrustFloor(s.trust, minTrust) ? listed.get(s.id) : undefined;
      const facts = attestationFacts(s.attestation ?? NO_EVIDENCE);
      return {
        id: s.id,
        account: s.identity.accountId,
        tok: s.identity.tokenId,
        builds: [...s.models.keys()],
        warm: [...s.warm],
        max: s.maxConcurrency,
        active: s.active,
        draining: s.draining,
        trust: s.trust,
        att: {
          se: facts.secureEnclave,
          sip: facts.sipEnabled,
          sb: facts.secureBoot,
          ...(facts.deviceChain ? { dc: facts.deviceChain } : {}),
        },
        ...(pub ? { pub } : {}),
      };
    });
}

/** The pages of one digest, each at most `maxPayload` bytes (an entry alone is far below it). */
export function encodeDigest(replica: string, seq: number, providers: readonly DigestProvider[], maxPayload: number): Uint8Array[] {
  const budget = Math.max(4096, maxPayload - 1024);
  const groups: string[][] = [[]];
  let size = 0;
  for (const p of providers) {
    const json = JSON.stringify(p);
    if (size + json.length + 1 > budget && (groups.at(-1) as string[]).length > 0) {
      groups.push([]);
      size = 0;
    }
    (groups.at(-1) as string[]).push(json);
    size += encoder.encode(json).length + 1;
  }
  return groups.map((g, i) =>
    encoder.encode(`{"v":${WIRE_VERSION},"r":${JSON.stringify(replica)},"q":${seq},"i":${i},"n":${groups.length},"p":[${g.join(",")}]}`),
  );
}

type Obj = Record<string, unknown>;
const fail = (reason: string): never => {
  throw new ProtocolError(reason);
};
const obj = (v: unknown, what: string): Obj =>
  typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Obj) : fail(`${what} must be an object`);
const int = (o: Obj, k: string, min: number, max: number): number => {
  const v = o[k];
  return typeof v === "number" && Number.isInteger(v) && v >= min && v <= max ? v : fail(`digest field '${k}' out of range`);
};
const token = (o: Obj, k: string): string => {
  const v = o[k];
  return typeof v === "string" && isToken(v) ? v : fail(`digest field '${k}' is not an id`);
};
const strings = (o: Obj, k: string): string[] => {
  const v = o[k];
  const ok = Array.isArray(v) && v.length <= MAX_MODELS_PER_HELLO;
  if (!ok || !v.every((x) => typeof x === "string" && x.length > 0 && x.length <= MAX_BUILD_ID))
    fail(`digest field '${k}' must list builds`);
  return v as string[];
};

function publicEntry(v: unknown, id: string): PublicProviderAttestation {
  const o = obj(v, "pub");
  const text = (k: string) => (o[k] === null || typeof o[k] === "string" ? (o[k] as string | null) : fail(`pub.${k} must be text or null`));
  const flag = (k: string) => (typeof o[k] === "boolean" ? (o[k] as boolean) : fail(`pub.${k} must be a boolean`));
  if (o.provider_id !== id || !isTrustLevel(o.trust_level)) fail("pub does not describe its provider");
  const posture = o.posture === null ? null : obj(o.posture, "pub.posture");
  return {
    provider_id: id,
    trust_level: o.trust_level as TrustLevel,
    routable: flag("routable"),
    secure_enclave: flag("secure_enclave"),
    device_chain_verified: flag("device_chain_verified"),
    // Absent from a replica of an earlier version: read as null.
    device_chain_source: o.device_chain_source === "mdm" || o.device_chain_source === "evidence" ? o.device_chain_source : null,
    device_chain_accepted_until: typeof o.device_chain_accepted_until === "number" ? o.device_chain_accepted_until : null,
    identity_key: text("identity_key"),
    identity_key_sha256: text("identity_key_sha256"),
    encryption_key: text("encryption_key"),
    posture,
    models: strings(o, "models"),
  };
}

function facts(v: unknown): { se: boolean; sip: boolean; sb: boolean; dc?: DeviceChainSource } {
  const o = obj(v, "att");
  const flag = (k: string) => (typeof o[k] === "boolean" ? (o[k] as boolean) : fail(`att.${k} must be a boolean`));
  // `dc` (which device chain vouched) is absent below hardware and from replicas of earlier versions.
  return { se: flag("se"), sip: flag("sip"), sb: flag("sb"), ...(o.dc === "mdm" || o.dc === "evidence" ? { dc: o.dc } : {}) };
}

function provider(v: unknown): DigestProvider {
  const o = obj(v, "provider");
  const id = token(o, "id");
  const trust = o.trust;
  if (!isTrustLevel(trust)) fail("digest field 'trust' is not a trust level");
  if (typeof o.draining !== "boolean") fail("digest field 'draining' must be a boolean");
  const account = o.account;
  if (typeof account !== "string" || account.length === 0 || account.length > 128) fail("digest field 'account' must be an id");
  return {
    id,
    account: account as string,
    ...(o.tok !== undefined ? { tok: token(o, "tok") } : {}),
    builds: strings(o, "builds"),
    warm: strings(o, "warm"),
    max: int(o, "max", 1, MAX_CONCURRENCY),
    active: int(o, "active", 0, 1_000_000),
    draining: o.draining as boolean,
    trust: trust as TrustLevel,
    ...(o.att !== undefined ? { att: facts(o.att) } : {}),
    ...(o.pub !== undefined ? { pub: publicEntry(o.pub, id) } : {}),
  };
}

/** One digest page. @throws ProtocolError */
export function decodeDigest(data: Uint8Array): DigestPage {
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(data));
  } catch {
    fail("digest is not JSON");
  }
  const o = obj(value, "digest");
  if (o.v !== WIRE_VERSION) fail("digest of another version");
  const pages = int(o, "n", 1, MAX_PAGES);
  const list = o.p;
  if (!Array.isArray(list)) fail("digest field 'p' must be a list");
  return {
    replica: token(o, "r"),
    seq: int(o, "q", 0, Number.MAX_SAFE_INTEGER),
    index: int(o, "i", 0, pages - 1),
    pages,
    providers: (list as unknown[]).map(provider),
  };
}
