/**
 * GET /v1/attestation: the coordinator's attestation document, no authentication (anyone may audit).
 * 200 with the document (src/attestation/coordinator-attestation.ts, docs/api.md); 503 service_unavailable
 * when this host cannot attest (no configfs-tsm, or --attestation none).
 *
 * GET /v1/providers/attestation: the connected providers' public keys, verified trust levels and
 * posture (fleet.publicAttestations), no authentication.
 */
import { Elysia } from "elysia";
import type { CoordinatorAttestation } from "../attestation/coordinator-attestation.ts";
import type { Fleet } from "../fleet/fleet.ts";

export function attestationRoutes(deps: { attestation: CoordinatorAttestation; fleet: Fleet }) {
  return new Elysia({ name: "attestation" })
    .get("/v1/attestation", () => deps.attestation.document())
    .get("/v1/providers/attestation", () => ({ object: "list", data: deps.fleet.publicAttestations() }));
}
