/**
 * MDM enrolment routes (docs/api.md "MDM enrolment"; src/mdm/enrolment.ts does the work). Mounted only
 * when the coordinator is configured for MDM (http.ts); otherwise these paths are 404 like any unknown path.
 * Auth: a live provider device token, as every /v1/provider/* route (401 invalid_token otherwise).
 *   POST /v1/provider/enroll/challenge  -> {"challenge": base64 (32 bytes), "expires_at": Unix ms}
 *   POST /v1/provider/enroll            {"challenge", "identity_key", "signature"} (base64 each)
 *                                       -> 200 application/x-apple-aspen-config, the profile
 *   GET  /v1/provider/enroll/status[?identity_key=base64] -> {"state": "none" | "issued" | "enrolled" | "attested", ...}
 * Every answer is `Cache-Control: no-store`. The profile's URLs come from the configuration, never from
 * this request (its Host header is not read).
 */
import { Elysia } from "elysia";
import { Errors } from "../errors/api-error.ts";
import { type EnrolCaller, type EnrolmentService, PROFILE_CONTENT_TYPE } from "../mdm/enrolment.ts";
import { type JsonObject, objectBody, optionalString, requiredString } from "../validation/fields.ts";
import { readJsonBody } from "./body.ts";

export interface MdmEnrolDeps {
  readonly enrolment: EnrolmentService;
  /** The provider device token's check: throws a 401 unless it is live. */
  readonly authenticateProvider: (authorization: string | null) => Promise<EnrolCaller>;
  readonly bodyTimeoutMs: number;
}

const NO_STORE = { "cache-control": "no-store" } as const;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** A base64 field of at most `maxBytes` bytes (padded standard alphabet; base64url accepted too). */
function base64Field(value: string | undefined, param: string, maxBytes: number): Uint8Array | undefined {
  if (value === undefined) return undefined;
  const standard = value.replaceAll("-", "+").replaceAll("_", "/");
  const padded = standard + "=".repeat((4 - (standard.length % 4)) % 4);
  const bytes = BASE64.test(padded) ? new Uint8Array(Buffer.from(padded, "base64")) : undefined;
  if (bytes === undefined || bytes.length === 0 || bytes.length > maxBytes) {
    throw Errors.invalidValue(`'${param}' must be base64 of at most ${maxBytes} bytes`, param);
  }
  return bytes;
}

const required = (body: JsonObject, param: string, maxBytes: number): Uint8Array =>
  base64Field(requiredString(body, param, { max: Math.ceil(maxBytes / 3) * 4 + 4 }), param, maxBytes) ?? new Uint8Array();

export function mdmEnrolRoutes(deps: MdmEnrolDeps) {
  const limits = { maxBytes: 8 * 1024, timeoutMs: deps.bodyTimeoutMs };
  const caller = (request: Request) => deps.authenticateProvider(request.headers.get("authorization"));
  return new Elysia({ name: "mdm-enrol" })
    .post(
      "/v1/provider/enroll/challenge",
      async ({ request }) => Response.json(deps.enrolment.challenge(await caller(request)), { headers: NO_STORE }),
      { parse: "none" },
    )
    .post(
      "/v1/provider/enroll",
      async ({ request }) => {
        const who = await caller(request);
        const body = objectBody(await readJsonBody(request, limits), ["challenge", "identity_key", "signature"]);
        const challenge = required(body, "challenge", 32);
        if (challenge.length !== 32) throw Errors.invalidValue("'challenge' must be the 32 bytes the challenge route gave", "challenge");
        const profile = await deps.enrolment.enrol(who, {
          challenge,
          identityKey: required(body, "identity_key", 65),
          signature: required(body, "signature", 80),
        });
        return new Response(profile, {
          headers: {
            ...NO_STORE,
            "content-type": PROFILE_CONTENT_TYPE,
            "content-disposition": 'attachment; filename="Umbra-Enrolment.mobileconfig"',
          },
        });
      },
      { parse: "none" },
    )
    .get("/v1/provider/enroll/status", async ({ request, query }) => {
      const who = await caller(request);
      const identityKey = base64Field(optionalString(query, "identity_key", { max: 128 }), "identity_key", 65);
      return Response.json(await deps.enrolment.status(who, identityKey), { headers: NO_STORE });
    });
}
