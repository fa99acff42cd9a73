/**
 * The optional sealed consumer transport (src/crypto/consumer-seal.ts), as a wrapper around a route's
 * body handler: a body that is not application/vnd.umbra.sealed+json passes through untouched.
 *
 * A sealed body is opened in memory with the coordinator's sealing key, bound to the bearer that
 * authenticated (the auth guard runs first), the path and the envelope's timestamp. Before opening, a stale
 * or future timestamp or an `enc` already accepted is refused (src/crypto/consumer-replay.ts; a full replay
 * cache is a 429); after, the `enc` is recorded. Every refusal up to there, and an envelope that is
 * malformed or does not open, is a plain error (there is no key to seal it with); once accepted, every
 * answer (errors included) is sealed back under a key of its own (x-umbra-response-nonce).
 */
import type { CoordinatorAttestation } from "../attestation/coordinator-attestation.ts";
import { bearer } from "../auth/authenticator.ts";
import type { Admission, SealedReplayCache } from "../crypto/consumer-replay.ts";
import {
  type ConsumerResponseSealer,
  type EnvelopeRead,
  openConsumerRequest,
  RESPONSE_NONCE_HEADER,
  readSealedEnvelope,
  SEALED_CONTENT_TYPE,
} from "../crypto/consumer-seal.ts";
import { type ApiError, Errors } from "../errors/api-error.ts";
import type { Logger } from "../observability/logger.ts";
import { parseJson } from "./body.ts";
import { errorResponse, toLoggedApiError } from "./errors.ts";

export interface SealedTransportDeps {
  readonly attestation: Pick<CoordinatorAttestation, "sealingKey">;
  /** Freshness and single use of sealed envelopes. */
  readonly sealedReplay: SealedReplayCache;
  /** Where an unexpected failure inside a sealed request is logged (as the error boundary does for plain ones). */
  readonly logger: Pick<Logger, "error" | "warn">;
}

/** A route's handling of its whole request body; `request` carries the headers the transport reads. */
export type BodyHandler<C extends { readonly request: Request }> = (body: Uint8Array, context: C) => Promise<Response>;

/** `handler` behind the sealed transport for `path`: plain bodies pass through, sealed ones are opened and answered sealed. */
export function sealedTransport<C extends { readonly request: Request }>(
  deps: SealedTransportDeps,
  path: string,
  handler: BodyHandler<C>,
): BodyHandler<C> {
  // A plain body goes straight to the handler (no async wrapper of its own on the hot path).
  return (body, context) => (isSealed(context.request) ? answerSealed(deps, path, handler, body, context) : handler(body, context));
}

/** A sealed body: opened, handled, and its answer (errors included) sealed back. */
async function answerSealed<C extends { readonly request: Request }>(
  deps: SealedTransportDeps,
  path: string,
  handler: BodyHandler<C>,
  body: Uint8Array,
  context: C,
): Promise<Response> {
  const credential = bearer(context.request.headers.get("authorization")) ?? "";
  const { plaintext, sealer } = await openSealed(deps, path, body, credential);
  let response: Response;
  try {
    response = await handler(plaintext, context);
  } catch (error) {
    response = errorResponse(toLoggedApiError(deps.logger, error, path));
  }
  return sealResponse(response, sealer);
}

function isSealed(request: Request): boolean {
  const type = request.headers.get("content-type");
  return type !== null && type.split(";")[0]?.trim().toLowerCase() === SEALED_CONTENT_TYPE;
}

/**
 * Reads, admits and opens a sealed envelope, then records its `enc`; every failure is a plain error (there
 * is no key to seal it with). `credential` is the bearer that authenticated (the guard ran first).
 */
async function openSealed(deps: SealedTransportDeps, path: string, bytes: Uint8Array, credential: string) {
  const read = readSealedEnvelope(parseJson(bytes));
  if (!read.ok) throw envelopeError(read);
  const admission = deps.sealedReplay.check(read.encText, read.timestamp);
  if (!admission.ok) throw refusal(admission, deps.sealedReplay.windowSeconds);
  const key = await deps.attestation.sealingKey();
  let opened: Awaited<ReturnType<typeof openConsumerRequest>>;
  try {
    opened = await openConsumerRequest(key.privateKey, read.enc, read.ciphertext, { path, credential, timestamp: read.timestamp });
  } catch {
    throw Errors.invalidValue(
      "the sealed body does not open: it was sealed to another key (fetch GET /v1/attestation again: the key changes on restart) or for another credential, path or timestamp",
      "ciphertext",
    );
  }
  const recorded = deps.sealedReplay.record(read.encText, read.timestamp);
  if (!recorded.ok) throw refusal(recorded, deps.sealedReplay.windowSeconds);
  return opened;
}

function envelopeError(read: Extract<EnvelopeRead, { ok: false }>): ApiError {
  if (read.problem === "missing") return Errors.missingField(read.param);
  if (read.problem === "retired") return Errors.unsupportedValue(read.message, read.param);
  return Errors.invalidValue(read.message, read.param);
}

function refusal(admission: Exclude<Admission, { ok: true }>, window: number): ApiError {
  switch (admission.reason) {
    case "stale":
    case "future":
      return Errors.invalidValue(
        `'timestamp' is more than ${window} s ${admission.reason === "stale" ? "behind" : "ahead of"} the coordinator's clock (${admission.nowSeconds}): seal each request just before sending it`,
        "timestamp",
      );
    case "replayed":
      return Errors.invalidValue(
        "this sealed request was already received: seal every request afresh (each 'enc' is accepted once)",
        "enc",
      );
    case "full":
      return Errors.rateLimited("too many sealed requests in the replay window; retry later", admission.retryAfterSeconds);
  }
}

/** The same status and headers, the body sealed: JSON as one sealed body, a stream frame by frame. */
async function sealResponse(response: Response, sealer: ConsumerResponseSealer): Promise<Response> {
  if (response.body === null) return response;
  const headers = new Headers(response.headers);
  headers.set(RESPONSE_NONCE_HEADER, sealer.responseNonce);
  if (headers.get("content-type") !== "text/event-stream") {
    const plaintext = new Uint8Array(await response.arrayBuffer());
    headers.set("content-type", SEALED_CONTENT_TYPE);
    return new Response(JSON.stringify(sealer.body(plaintext)), { status: response.status, headers });
  }
  const reader = response.body.getReader();
  const encoder = new TextEncoder();
  const sealed = new ReadableStream<Uint8Array>({
    async pull(controller) {
      const { done, value } = await reader.read();
      if (done) {
        controller.enqueue(encoder.encode(sealer.end()));
        controller.close();
        return;
      }
      if (value.byteLength > 0) controller.enqueue(encoder.encode(sealer.stream(value)));
    },
    cancel: (reason) => reader.cancel(reason),
  });
  return new Response(sealed, { status: response.status, headers });
}
