/**
 * The digest of the coordinator's non-secret configuration: what the measured kernel command line
 * (`umbra.config=<hex>`) or the report's HOST_DATA binds, so that a host cannot change a setting unseen
 * (docs/operations.md "Configuration binding"). The byte layout is configCanonicalBytes'.
 *
 * It covers every field of the loaded Config, defaults included, so two spellings of one effective
 * configuration give one digest; except the secrets (SECRET_FIELDS, provisioned after boot) and the
 * binding's own settings (BINDING_FIELDS: a digest cannot contain itself; /init adds them) and the replica id
 * (PER_REPLICA_FIELDS: one digest for every replica of a deployment). A field added
 * to Config later is covered without a change here (an unsupported value type throws, so a test notices).
 * The JWT verification key (`jwt.publicKey`) is covered: it is public; its integrity matters.
 */
import { sha256 } from "@noble/hashes/sha2.js";
import { CanonicalBytes } from "../crypto/canonical.ts";
import type { Config } from "./config.ts";

export const CONFIG_DIGEST_TAG = "umbra-config-v1";
/** Config fields that are secrets: provisioned, never bound. */
const SECRET_FIELDS: readonly string[] = [
  "adminToken",
  "dbPassword",
  "oidc.clientSecret",
  "cluster.redisPassword",
  "cluster.natsPassword",
  "mdmEnrolment.caKey",
  "mdmEnrolment.signingP12",
  "mdmEnrolment.signingP12Password",
  "mdm.apiKey",
  "mdm.webhookKey",
  "mdaSeed",
];
/** Each replica's own name (generated per process by default) and journal file: replicas of one deployment share a digest. */
const PER_REPLICA_FIELDS: readonly string[] = ["cluster.replicaId", "cluster.settlementJournal"];
/** The binding's own settings. */
const BINDING_FIELDS: readonly string[] = ["configBinding", "configDigest"];

const MAX_VALUE_BYTES = 1 << 20;
const UTF8 = new TextEncoder();

type Entry = readonly [name: string, value: unknown];

function entries(prefix: string, value: object): Entry[] {
  const out: Entry[] = [];
  for (const [key, v] of Object.entries(value)) {
    const name = prefix + key;
    if (v === undefined || SECRET_FIELDS.includes(name) || BINDING_FIELDS.includes(name) || PER_REPLICA_FIELDS.includes(name)) continue;
    if (v !== null && typeof v === "object" && !(v instanceof Uint8Array) && !Array.isArray(v)) out.push(...entries(`${name}.`, v));
    else out.push([name, v]);
  }
  return out;
}

/**
 * The canonical bytes (src/crypto/canonical.ts; integers unsigned big-endian; lp(x) = u32(len(x)) || x):
 *   bytes = lp("umbra-config-v1") || u32(n) || entry_1 || ... || entry_n
 *   entry = lp(UTF-8(name)) || u32(kind) || value, entries sorted by name (ASCII order)
 *   name  = the Config field name; a nested object's fields are "parent.field" (e.g. "jwt.issuer"); an
 *           absent optional field has no entry
 *   kind  0 null (no value) | 1 string: lp(UTF-8) | 2 integer (0..2^53-1): u64 | 3 boolean: u32(0|1)
 *         | 4 bytes: lp(bytes) | 5 list of strings: u32(count) || lp(UTF-8) ...
 * Throws TypeError naming a field whose value has no kind.
 */
export function configCanonicalBytes(config: Config): Uint8Array {
  const list = entries("", config).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const out = CanonicalBytes.tagged(CONFIG_DIGEST_TAG).u32("count", list.length);
  for (const [name, value] of list) {
    out.text("name", name, 256);
    if (value === null) out.u32("kind", 0);
    else if (typeof value === "string") out.u32("kind", 1).bytes(name, UTF8.encode(value), MAX_VALUE_BYTES);
    else if (typeof value === "number") out.u32("kind", 2).u64(name, value);
    else if (typeof value === "boolean") out.u32("kind", 3).u32(name, value ? 1 : 0);
    else if (value instanceof Uint8Array) out.u32("kind", 4).bytes(name, value, MAX_VALUE_BYTES);
    else if (Array.isArray(value) && value.every((v) => typeof v === "string")) {
      out.u32("kind", 5).u32(name, value.length);
      for (const v of value) out.bytes(name, UTF8.encode(v), MAX_VALUE_BYTES);
    } else throw new TypeError(`config field ${name} has no canonical form`);
  }
  return out.finish();
}

/** SHA-256 of the canonical bytes: 32 bytes (configDigestHex: 64 lowercase hex digits, as `umbra-coordinator config-digest` prints). */
export function configDigest(config: Config): Uint8Array {
  return sha256(configCanonicalBytes(config));
}

export const configDigestHex = (config: Config): string => Buffer.from(configDigest(config)).toString("hex");
