/**
 * JWT verification through jose: signature by the identity provider's key (a JWKS URL, or one static
 * public key as PEM or JWK JSON), asymmetric algorithms only, issuer and audience checked, expiry with
 * a small clock tolerance. Returns the value of the configured account claim.
 */
import { createRemoteJWKSet, importJWK, importSPKI, type JWK, type JWTVerifyGetKey, jwtVerify } from "jose";

const ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"];

export interface JwtConfig {
  readonly issuer: string;
  readonly audience: string;
  readonly jwksUrl?: string;
  /** PEM (SPKI) or a JWK as JSON. */
  readonly publicKey?: string;
  readonly accountClaim: string;
}

export type JwtVerifier = (token: string) => Promise<string>;

class JwtRejected extends Error {
  override readonly name = "JwtRejected";
}

function staticKey(material: string): JWTVerifyGetKey {
  const cache = new Map<string, Promise<CryptoKey>>();
  const trimmed = material.trim();
  return (header) => {
    const alg = header.alg;
    let key = cache.get(alg);
    if (!key) {
      key = trimmed.startsWith("{") ? (importJWK(JSON.parse(trimmed) as JWK, alg) as Promise<CryptoKey>) : importSPKI(trimmed, alg);
      cache.set(alg, key);
    }
    return key;
  };
}

export function createJwtVerifier(config: JwtConfig, now: () => number): JwtVerifier {
  const key: JWTVerifyGetKey = config.jwksUrl
    ? createRemoteJWKSet(new URL(config.jwksUrl), { timeoutDuration: 5000, cooldownDuration: 30_000 })
    : staticKey(config.publicKey ?? "");
  return async (token) => {
    let payload: Record<string, unknown>;
    try {
      ({ payload } = await jwtVerify(token, key, {
        issuer: config.issuer,
        audience: config.audience,
        algorithms: ALGORITHMS,
        clockTolerance: 30,
        currentDate: new Date(now()),
        requiredClaims: ["exp"],
      }));
    } catch (e) {
      throw new JwtRejected(e instanceof Error ? e.name : "invalid");
    }
    const claim = payload[config.accountClaim];
    if (typeof claim !== "string" || claim === "") throw new JwtRejected(`claim ${config.accountClaim} missing`);
    return claim;
  };
}
