/**
 * GET /v1/attestation: the coordinator's attestation document, no authentication (anyone may audit).
 * 200 with the document (src/attestation/coordinator-attestation.ts, docs/api.md); 503 service_unavailable
 * when this host cannot attest (no configfs-tsm, or --attestation none).
 */
import { Elysia } from "elysia";
import type { CoordinatorAttestation } from "../attestation/coordinator-attestation.ts";

export function attestationRoutes(deps: { attestation: CoordinatorAttestation }) {
  return new Elysia({ name: "attestation" }).get("/v1/attestation", () => deps.attestation.document());
}
