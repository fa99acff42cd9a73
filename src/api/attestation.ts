/**
 * The attestation routes (docs/api.md has each contract):
 * - GET /v1/attestation, no auth: the coordinator's attestation document (src/attestation/
 *   coordinator-attestation.ts); 503 service_unavailable when this host cannot attest (no configfs-tsm,
 *   or --attestation none).
 * - GET /v1/providers/attestation, no auth: the providers at or above the routing floor, their public
 *   keys, verified trust levels and posture, one page at a time, from the list the fleet built at its last
 *   change (src/fleet/public-list.ts).
 * - POST /v1/provider/dev-chain, provider device token, development trust only (404 otherwise): a device
 *   chain from the coordinator's development root for the provider's identity key, so a separately
 *   started provider (`umbra-provider start --dev-attestation`) earns `hardware` through a Mac's checks.
 */
import { Elysia } from "elysia";
import { parseIdentityKey } from "../../attestation/provider/identity-key.ts";
import { type Posture, parsePosture } from "../../attestation/provider/posture.ts";
import type { CoordinatorAttestation } from "../attestation/coordinator-attestation.ts";
import { Errors } from "../errors/api-error.ts";
import type { Fleet } from "../fleet/fleet.ts";
import { PAGE_LIMIT } from "../fleet/public-list.ts";
import { objectBody, optionalString, queryInt, requiredString } from "../validation/fields.ts";
import { readJsonBody } from "./body.ts";

export interface DevChainDeps {
  /** Issues a development device chain; undefined outside development trust. */
  readonly issueDevChain: (identityKey: Uint8Array, posture: Posture) => Promise<Uint8Array[]> | undefined;
  /** The provider device token's check (authenticateProvider): throws a 401 unless it is live. */
  readonly authenticateProvider: (authorization: string | null) => Promise<unknown>;
}

export function attestationRoutes(deps: { attestation: CoordinatorAttestation; fleet: Fleet; bodyTimeoutMs: number } & DevChainDeps) {
  const limits = { maxBytes: 16 * 1024, timeoutMs: deps.bodyTimeoutMs };
  return new Elysia({ name: "attestation" })
    .get("/v1/attestation", () => deps.attestation.document())
    .get("/v1/providers/attestation", ({ query }) => {
      const limit = queryInt(query.limit, "limit", PAGE_LIMIT);
      const after = optionalString(query, "after", { max: 256 });
      const identityKeySha256 = optionalString(query, "identity_key_sha256", {
        max: 64,
        pattern: /^[0-9a-f]{64}$/,
        patternHint: "must be 64 lowercase hex digits",
      });
      const body = deps.fleet.publicPage({
        limit,
        ...(after !== undefined ? { after } : {}),
        ...(identityKeySha256 !== undefined ? { identityKeySha256 } : {}),
      });
      return new Response(body, { headers: { "content-type": "application/json" } });
    })
    .post(
      "/v1/provider/dev-chain",
      async ({ request }) => {
        await deps.authenticateProvider(request.headers.get("authorization"));
        const body = objectBody(await readJsonBody(request, limits), ["identity_key", "posture"]);
        let identityKey: Uint8Array;
        let posture: Posture;
        try {
          identityKey = parseIdentityKey(Buffer.from(requiredString(body, "identity_key", { max: 200 }), "base64url")).point;
        } catch {
          throw Errors.invalidValue("'identity_key' must be a P-256 public key (65 or 64 bytes, base64url)", "identity_key");
        }
        try {
          posture = parsePosture(body.posture, "posture");
        } catch {
          throw Errors.invalidValue("'posture' must be {sip_enabled, secure_boot, third_party_kexts, os_version}", "posture");
        }
        const chain = deps.issueDevChain(identityKey, posture);
        if (!chain) throw Errors.notFound("development attestation is not offered by this coordinator");
        return { chain: (await chain).map((der) => Buffer.from(der).toString("base64url")) };
      },
      { parse: "none" },
    );
}
