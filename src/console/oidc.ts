/**
 * Console sign-in with OpenID Connect (authorization code + PKCE S256) through oauth4webapi, against the
 * identity provider the coordinator already trusts for JWTs (its issuer; the client id and optional
 * secret of --oidc-client-id / --oidc-client-secret).
 *
 * Steps: discovery of the issuer (cached once it succeeds; its `issuer` must equal the configured one);
 * `start` makes state, nonce and code verifier, keeps them in a short-lived HttpOnly cookie bound to the
 * callback path, and sends the browser to the authorization endpoint; `finish` checks the callback's
 * state against that cookie, redeems the code with the verifier, checks the ID token (issuer, audience =
 * client id, nonce, expiry: oauth4webapi; its signature against the issuer's JWKS: jose), and maps the
 * account claim (--jwt-account-claim) to an account's jwt_subject as the JWT authentication does.
 * The redirect URI is built from the public URL, never from a request's Host. Plain http is allowed only
 * for an issuer on a loopback address (a local identity provider, tests).
 */
import { createRemoteJWKSet, jwtVerify } from "jose";
import * as oauth from "oauth4webapi";
import type { Store } from "../store/types.ts";
import { cookieValue, loopbackHttp } from "./sessions.ts";

export const OIDC_START_PATH = "/console/auth/oidc/start";
export const OIDC_CALLBACK_PATH = "/console/auth/oidc/callback";
const FLOW_COOKIE = "umbra_oidc";
const FLOW_MAX_AGE_SECONDS = 600;
const FLOW_VALUE = /^[A-Za-z0-9_-]{16,128}$/;

/** The sign-in did not complete; `reason` is a fixed word for logs, never a value from the request. */
export class OidcRefused extends Error {
  override readonly name = "OidcRefused";
  constructor(readonly reason: "flow" | "callback" | "token" | "id_token" | "account" | "provider") {
    super(`OpenID Connect sign-in refused: ${reason}`);
  }
}

export interface ConsoleOidcOptions {
  readonly issuer: string;
  readonly clientId: string;
  readonly clientSecret?: string;
  /** The claim that names the account (the JWT authentication's, default `sub`). */
  readonly accountClaim: string;
  /** The coordinator's public base URL; the redirect URI is `<publicUrl>/console/auth/oidc/callback`. */
  readonly publicUrl: string;
  readonly store: Pick<Store, "accounts">;
}

export class ConsoleOidc {
  private server: Promise<{ as: oauth.AuthorizationServer; jwks: ReturnType<typeof createRemoteJWKSet> }> | undefined;
  private readonly client: oauth.Client;
  private readonly auth: oauth.ClientAuth;
  private readonly http: { [oauth.allowInsecureRequests]?: boolean; signal: () => AbortSignal };
  private readonly redirectUri: string;
  private readonly secure: boolean;

  constructor(private readonly options: ConsoleOidcOptions) {
    this.client = { client_id: options.clientId };
    this.auth = options.clientSecret === undefined ? oauth.None() : oauth.ClientSecretPost(options.clientSecret);
    this.http = {
      signal: () => AbortSignal.timeout(10_000),
      ...(loopbackHttp(options.issuer) ? { [oauth.allowInsecureRequests]: true } : {}),
    };
    this.redirectUri = `${options.publicUrl}${OIDC_CALLBACK_PATH}`;
    this.secure = !loopbackHttp(options.publicUrl);
  }

  /** Where to send the browser, and the Set-Cookie that keeps this flow's state, nonce and verifier. */
  async start(): Promise<{ location: string; setCookie: string }> {
    const { as } = await this.discover();
    if (as.authorization_endpoint === undefined) throw new OidcRefused("provider");
    const state = oauth.generateRandomState();
    const nonce = oauth.generateRandomNonce();
    const verifier = oauth.generateRandomCodeVerifier();
    const url = new URL(as.authorization_endpoint);
    url.searchParams.set("client_id", this.options.clientId);
    url.searchParams.set("redirect_uri", this.redirectUri);
    url.searchParams.set("response_type", "code");
    url.searchParams.set("scope", "openid");
    url.searchParams.set("state", state);
    url.searchParams.set("nonce", nonce);
    url.searchParams.set("code_challenge", await oauth.calculatePKCECodeChallenge(verifier));
    url.searchParams.set("code_challenge_method", "S256");
    return { location: url.toString(), setCookie: this.flowCookie(`${state}.${nonce}.${verifier}`, FLOW_MAX_AGE_SECONDS) };
  }

  /** The account the callback signs in. Throws OidcRefused. `search` is the callback URL's query. */
  async finish(search: string, cookieHeader: string | null): Promise<string> {
    const [state, nonce, verifier, extra] = (cookieValue(cookieHeader, FLOW_COOKIE) ?? "").split(".");
    if (extra !== undefined || ![state, nonce, verifier].every((v) => v !== undefined && FLOW_VALUE.test(v))) {
      throw new OidcRefused("flow");
    }
    const { as, jwks } = await this.discover();
    let params: URLSearchParams;
    try {
      params = oauth.validateAuthResponse(as, this.client, new URL(`${this.redirectUri}${search}`), state as string);
    } catch {
      throw new OidcRefused("callback");
    }
    let claims: oauth.IDToken | undefined;
    let idToken: string | undefined;
    try {
      const response = await oauth.authorizationCodeGrantRequest(
        as,
        this.client,
        this.auth,
        params,
        this.redirectUri,
        verifier as string,
        this.http,
      );
      const result = await oauth.processAuthorizationCodeResponse(as, this.client, response, {
        expectedNonce: nonce as string,
        requireIdToken: true,
      });
      claims = oauth.getValidatedIdTokenClaims(result);
      idToken = result.id_token;
    } catch {
      throw new OidcRefused("token");
    }
    if (claims === undefined || idToken === undefined) throw new OidcRefused("id_token");
    try {
      await jwtVerify(idToken, jwks, { issuer: as.issuer, audience: this.options.clientId });
    } catch {
      throw new OidcRefused("id_token");
    }
    const subject = claims[this.options.accountClaim];
    if (typeof subject !== "string" || subject === "") throw new OidcRefused("account");
    const account = await this.options.store.accounts.findBySubject(subject);
    if (!account) throw new OidcRefused("account");
    return account.id;
  }

  /** The Set-Cookie that removes the flow cookie (after the callback, whatever its outcome). */
  clearFlowCookie(): string {
    return this.flowCookie("", 0);
  }

  private flowCookie(value: string, maxAge: number): string {
    return `${FLOW_COOKIE}=${value}; Path=${OIDC_CALLBACK_PATH}; Max-Age=${maxAge}; HttpOnly; SameSite=Lax${this.secure ? "; Secure" : ""}`;
  }

  private discover() {
    if (!this.server) {
      const issuer = new URL(this.options.issuer);
      const found = (async () => {
        const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { ...this.http, algorithm: "oidc" }));
        if (as.jwks_uri === undefined) throw new OidcRefused("provider");
        return { as, jwks: createRemoteJWKSet(new URL(as.jwks_uri), { timeoutDuration: 5000, cooldownDuration: 30_000 }) };
      })();
      this.server = found;
      // A failed discovery is tried again on the next sign-in.
      found.catch(() => {
        if (this.server === found) this.server = undefined;
      });
    }
    return this.server.catch(() => {
      throw new OidcRefused("provider");
    });
  }
}
