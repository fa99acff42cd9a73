/**
 * A fake OpenID Connect identity provider on a real HTTP server (127.0.0.1, port 0): discovery, JWKS,
 * an authorization endpoint that redirects at once with a code (the user "signed in" as `subject`), and
 * a token endpoint that checks the code, client, redirect URI and PKCE verifier and issues an ID token
 * signed with jose (ES256). `idToken` overrides claims of the next tokens (wrong audience, issuer, nonce);
 * `signWithOtherKey` signs with a key the JWKS does not hold. Use with `await using`.
 */
import { createHash } from "node:crypto";
import { exportJWK, generateKeyPair, type JWTPayload, SignJWT } from "jose";

export interface FakeOidc extends AsyncDisposable {
  readonly issuer: string;
  /** The subject the next authorization signs in. */
  subject: string;
  /** Claims merged into the next ID tokens (undefined values remove a claim). */
  idToken: Record<string, unknown>;
  signWithOtherKey: boolean;
  /** What the authorization endpoint was last asked (its query). */
  readonly lastAuthorize: URLSearchParams | undefined;
  /** Token requests refused (bad code, client, redirect URI or verifier). */
  readonly refusals: string[];
}

interface Grant {
  readonly clientId: string;
  readonly redirectUri: string;
  readonly challenge: string;
  readonly nonce: string | null;
  readonly subject: string;
}

export async function startFakeOidc(options: { clientId: string; clientSecret?: string }): Promise<FakeOidc> {
  const { privateKey, publicKey } = await generateKeyPair("ES256", { extractable: true });
  const other = await generateKeyPair("ES256");
  const jwk = { ...(await exportJWK(publicKey)), kid: "k1", alg: "ES256", use: "sig" };
  const grants = new Map<string, Grant>();
  let counter = 0;
  const state = {
    subject: "user-1",
    idToken: {} as Record<string, unknown>,
    signWithOtherKey: false,
    lastAuthorize: undefined as URLSearchParams | undefined,
    refusals: [] as string[],
  };
  const server: Bun.Server<undefined> = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    async fetch(request): Promise<Response> {
      const url = new URL(request.url);
      const issuer: string = `http://127.0.0.1:${server.port}`;
      if (url.pathname === "/.well-known/openid-configuration") {
        return Response.json({
          issuer,
          authorization_endpoint: `${issuer}/authorize`,
          token_endpoint: `${issuer}/token`,
          jwks_uri: `${issuer}/jwks`,
          response_types_supported: ["code"],
          subject_types_supported: ["public"],
          id_token_signing_alg_values_supported: ["ES256"],
          code_challenge_methods_supported: ["S256"],
          token_endpoint_auth_methods_supported: ["none", "client_secret_post"],
        });
      }
      if (url.pathname === "/jwks") return Response.json({ keys: [jwk] });
      if (url.pathname === "/authorize") {
        const q = url.searchParams;
        state.lastAuthorize = q;
        const code = `code-${++counter}`;
        grants.set(code, {
          clientId: q.get("client_id") ?? "",
          redirectUri: q.get("redirect_uri") ?? "",
          challenge: q.get("code_challenge") ?? "",
          nonce: q.get("nonce"),
          subject: state.subject,
        });
        const back = new URL(q.get("redirect_uri") ?? "");
        back.searchParams.set("code", code);
        back.searchParams.set("state", q.get("state") ?? "");
        return new Response(null, { status: 302, headers: { location: back.toString() } });
      }
      if (url.pathname === "/token" && request.method === "POST") {
        const form = new URLSearchParams(await request.text());
        const grant = grants.get(form.get("code") ?? "");
        grants.delete(form.get("code") ?? "");
        const verifier = form.get("code_verifier") ?? "";
        const refuse = (why: string) => {
          state.refusals.push(why);
          return Response.json({ error: "invalid_grant" }, { status: 400 });
        };
        if (!grant) return refuse("code");
        if (form.get("client_id") !== options.clientId || grant.clientId !== options.clientId) return refuse("client");
        if (options.clientSecret !== undefined && form.get("client_secret") !== options.clientSecret) return refuse("secret");
        if (form.get("redirect_uri") !== grant.redirectUri) return refuse("redirect_uri");
        if (createHash("sha256").update(verifier).digest("base64url") !== grant.challenge) return refuse("pkce");
        const now = Math.floor(Date.now() / 1000);
        const claims: Record<string, unknown> = { iss: issuer, aud: options.clientId, sub: grant.subject, iat: now, exp: now + 300 };
        if (grant.nonce !== null) claims.nonce = grant.nonce;
        for (const [k, v] of Object.entries(state.idToken)) {
          if (v === undefined) delete claims[k];
          else claims[k] = v;
        }
        const idToken = await new SignJWT(claims as JWTPayload)
          .setProtectedHeader({ alg: "ES256", kid: "k1" })
          .sign(state.signWithOtherKey ? other.privateKey : privateKey);
        return Response.json({ access_token: `at-${counter}`, token_type: "Bearer", expires_in: 300, id_token: idToken });
      }
      return new Response("not found", { status: 404 });
    },
  });
  return Object.assign(state, {
    issuer: `http://127.0.0.1:${server.port}`,
    async [Symbol.asyncDispose]() {
      await server.stop(true);
    },
  });
}
