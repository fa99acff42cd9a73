/**
 * Turns an Authorization header into a Principal, or throws a 401 ApiError.
 *
 * Order: `sk-umbra-` keys are looked up by SHA-256 on every request (so revocation is immediate);
 * provider device tokens are refused as consumer credentials; anything shaped like a JWT goes to the
 * configured identity provider, whose account claim must name an account's `jwt_subject`.
 *
 * Linking machines (approving a provider device login) needs an account-holder credential: a JWT, or
 * an API key created with `link_machines`. Any other key (a CI job's) is refused with 403 `forbidden`.
 */
import { Errors } from "../errors/api-error.ts";
import type { ApiKeyRecord, ProviderTokenRecord, Store } from "../store/types.ts";
import type { JwtVerifier } from "./jwt.ts";
import { API_KEY_PREFIX, PROVIDER_TOKEN_PREFIX, sha256Hex } from "./secrets.ts";

export interface Principal {
  readonly kind: "api_key" | "jwt";
  readonly accountId: string;
  /** The API key's id; null for a JWT. */
  readonly keyId: string | null;
  /** Models the credential may use; null for every model. */
  readonly allowedModels: readonly string[] | null;
  readonly spendCap: number | null;
  readonly rpm: number | null;
  readonly tpm: number | null;
  readonly selfRouteOnly: boolean;
  /** May approve provider device logins: a JWT always, an API key when created with `link_machines`. */
  readonly linkMachines: boolean;
}

/**
 * The principal of an Authorization header, or an ApiError thrown or rejected (callers await it). An API
 * key the store knows from memory is answered synchronously: no promise on every request.
 */
export type Authenticator = (authorization: string | null | undefined) => Principal | Promise<Principal>;

const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

/** The credential of `Authorization: Bearer <credential>`, or undefined. */
export function bearer(authorization: string | null | undefined): string | undefined {
  if (!authorization) return undefined;
  const match = /^Bearer +(\S+) *$/i.exec(authorization);
  return match?.[1];
}

/** True once a device token's optional expiry (Unix ms) has come. */
export function providerTokenExpired(record: Pick<ProviderTokenRecord, "expiresAt">, now: number): boolean {
  return record.expiresAt !== null && record.expiresAt <= now;
}

/**
 * The live provider device token named by `Authorization: Bearer <token>`, or a 401 (consumer
 * credentials are refused; so are revoked and expired tokens, `now` in Unix ms). The one check behind
 * every provider-side route: the WebSocket connect, the development chain and `GET /v1/provider/me`.
 */
export async function authenticateProvider(
  store: Store,
  authorization: string | null | undefined,
  now: number,
): Promise<ProviderTokenRecord> {
  const token = bearer(authorization);
  if (token === undefined || !token.startsWith(PROVIDER_TOKEN_PREFIX)) throw Errors.invalidToken("a provider device token is required");
  const record = await store.providerTokens.findByHash(sha256Hex(token));
  if (!record || record.revokedAt !== null) throw Errors.invalidToken("invalid or revoked provider device token");
  if (providerTokenExpired(record, now)) throw Errors.invalidToken("this provider device token has expired");
  return record;
}

/**
 * Throws 403 `forbidden` unless the principal may link machines to its account (approve or preview a
 * provider device login): a JWT, or an API key created with `link_machines`.
 */
export function requireLinkMachines(principal: Principal): void {
  if (!principal.linkMachines) {
    throw Errors.forbidden(
      "this API key may not link machines to the account: approve with a JWT, or with an API key created with link_machines",
    );
  }
}

export function createAuthenticator(store: Store, jwt: JwtVerifier | undefined): Authenticator {
  return (authorization) => {
    const credential = bearer(authorization);
    if (credential === undefined) {
      throw Errors.invalidApiKey("missing bearer credential: send 'Authorization: Bearer <API key>'");
    }
    if (credential.startsWith(API_KEY_PREFIX)) {
      const key = store.keys.findByHash(sha256Hex(credential));
      return key instanceof Promise ? key.then(keyPrincipal) : keyPrincipal(key);
    }
    if (credential.startsWith(PROVIDER_TOKEN_PREFIX)) {
      throw Errors.invalidApiKey("a provider device token is not a consumer API key");
    }
    return jwtPrincipal(store, jwt, credential);
  };
}

/** The principal of an API key's record; throws when there is none or it is revoked. */
function keyPrincipal(key: ApiKeyRecord | undefined): Principal {
  if (!key) throw Errors.invalidApiKey("invalid API key");
  if (key.revokedAt !== null) throw Errors.invalidApiKey("this API key has been revoked");
  return {
    kind: "api_key",
    accountId: key.accountId,
    keyId: key.id,
    allowedModels: key.allowedModels,
    spendCap: key.spendCap,
    rpm: key.rpm,
    tpm: key.tpm,
    selfRouteOnly: key.selfRouteOnly,
    linkMachines: key.linkMachines,
  };
}

/** The principal of a JWT (an account linked to its subject); any other credential is refused. */
async function jwtPrincipal(store: Store, jwt: JwtVerifier | undefined, credential: string): Promise<Principal> {
  if (!jwt || !JWT_SHAPE.test(credential)) throw Errors.invalidApiKey("invalid API key");
  let subject: string;
  try {
    subject = await jwt(credential);
  } catch {
    throw Errors.invalidToken("invalid or expired token");
  }
  const account = await store.accounts.findBySubject(subject);
  if (!account) throw Errors.invalidToken("no account is linked to this identity");
  return {
    kind: "jwt",
    accountId: account.id,
    keyId: null,
    allowedModels: null,
    spendCap: null,
    rpm: null,
    tpm: null,
    selfRouteOnly: false,
    linkMachines: true,
  };
}

/**
 * A filter for the catalog: the principal's model allowlist, or undefined for every model. Naming a
 * build allows the aliases that point to it; naming an alias allows that alias only. `ownBuilds`, for a
 * self-route-only principal, keeps only the builds its own live machines serve.
 */
export function modelFilter(principal: Principal, ownBuilds?: ReadonlySet<string>): ((id: string, buildId: string) => boolean) | undefined {
  const allowed = principal.allowedModels === null ? undefined : new Set(principal.allowedModels);
  if (!allowed && !ownBuilds) return undefined;
  return (id, buildId) => (!allowed || allowed.has(id) || allowed.has(buildId)) && (!ownBuilds || ownBuilds.has(buildId));
}
