/**
 * Bearer secrets: API keys (`sk-umbra-`), provider device tokens (`umbra-pt-`) and record ids.
 * A secret is a prefix plus 256 random bits in base64url; the store keeps only its SHA-256 (hex).
 */
import { randomBytes } from "node:crypto";

export const API_KEY_PREFIX = "sk-umbra-";
export const PROVIDER_TOKEN_PREFIX = "umbra-pt-";

export interface IssuedSecret {
  readonly secret: string;
  readonly hash: string;
  readonly hint: string;
}

export function sha256Hex(text: string): string {
  // Bun's hasher: no Hash stream object per call (every authenticated request hashes its key).
  return Bun.CryptoHasher.hash("sha256", text, "hex");
}

export function issueSecret(prefix: string): IssuedSecret {
  const secret = prefix + randomBytes(32).toString("base64url");
  return { secret, hash: sha256Hex(secret), hint: secret.slice(-4) };
}

/** A short random id with a type prefix, e.g. `acct_3f9k...`. Not a secret. */
export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(12).toString("base64url").replaceAll("-", "x").replaceAll("_", "y")}`;
}
