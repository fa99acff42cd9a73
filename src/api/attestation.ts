/**
 * GET /v1/attestation: the coordinator's attestation document, no authentication (anyone may audit).
 * 200 with the document (src/attestation/coordinator-attestation.ts, docs/api.md); 503 service_unavailable
 * when this host cannot attest (no configfs-tsm, or --attestation none).
 *
 * GET /v1/providers/attestation: the connected providers' public keys, verified trust levels and
 * posture (fleet.publicAttestations), no authentication.
 *
 * POST /v1/provider/dev-chain (development trust only; 404 otherwise): a provider device token asks the
 * coordinator's development root for a device chain for its identity key, so a separately started
 * provider (`umbra-provider start --dev-attestation`) earns `hardware` through the same checks as a Mac.
 */
import { Elysia } from "elysia";
import { parseIdentityKey } from "../../attestation/src/identity-key.ts";
import { type Posture, parsePosture } from "../../attestation/src/posture.ts";
import type { CoordinatorAttestation } from "../attestation/coordinator-attestation.ts";
import { Errors } from "../errors/api-error.ts";
import type { Fleet } from "../fleet/fleet.ts";
import { objectBody, requiredString } from "../validation/fields.ts";
import { readJsonBody } from "./errors.ts";

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
    .get("/v1/providers/attestation", () => ({ object: "list", data: deps.fleet.publicAttestations() }))
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
