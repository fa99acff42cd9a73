/**
 * Provisioning of the coordinator's secrets (src/attestation/provisioning.ts, docs/api.md "Provisioning"):
 *
 *   GET  /v1/provision   no auth: 200 {state: "awaiting", nonce, expires_in_seconds} while awaiting;
 *                        404 not_found when provisioning is off; 409 conflict once provisioned
 *   POST /v1/provision   no auth (the message is sealed to the attested key): 200 {state: "provisioned",
 *                        secrets: [names]}; 400 invalid_value (shape, nonce, does not open, secrets);
 *                        404 / 409 as above
 */
import { Elysia } from "elysia";
import type { Provisioning } from "../attestation/provisioning.ts";
import { readJsonBody } from "./body.ts";

/** A provisioning message holds a few secrets. */
const PROVISION_BODY_LIMIT = 64 * 1024;

export function provisioningRoutes(deps: { provisioning: Provisioning; bodyTimeoutMs: number }) {
  const limits = { maxBytes: PROVISION_BODY_LIMIT, timeoutMs: deps.bodyTimeoutMs };
  return new Elysia({ name: "provisioning" })
    .get("/v1/provision", () => deps.provisioning.issueNonce())
    .post("/v1/provision", async ({ request }) => deps.provisioning.provision(await readJsonBody(request, limits)), { parse: "none" });
}
