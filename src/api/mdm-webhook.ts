/**
 * NanoMDM's webhook (src/mdm/webhook.ts; docs/security.md "MDM"):
 *
 *   POST /v1/mdm/webhook   X-Hmac-Signature = base64(HMAC-SHA256(webhook key, raw body)); 200
 *                          {"topic","result"}; 401 invalid_token (signature); 400 (not JSON, not an event);
 *                          413 over 256 KiB
 * Wired only in MDM mode (UMBRA_MDM_URL); otherwise the path is 404 like any unknown one. The body is read
 * raw and checked before it is parsed.
 */
import { Elysia } from "elysia";
import type { MdmWebhook } from "../mdm/webhook.ts";
import { readBody } from "./body.ts";

/** A command report with a two-certificate chain is a few KiB; NanoMDM sends one event per POST. */
const WEBHOOK_BODY_LIMIT = 256 * 1024;

export function mdmWebhookRoutes(deps: { webhook: MdmWebhook; bodyTimeoutMs: number }) {
  const limits = { maxBytes: WEBHOOK_BODY_LIMIT, timeoutMs: deps.bodyTimeoutMs };
  return new Elysia({ name: "mdm-webhook" }).post(
    "/v1/mdm/webhook",
    async ({ request }) => deps.webhook.handle(await readBody(request, limits), request.headers.get("x-hmac-signature")),
    { parse: "none" },
  );
}
