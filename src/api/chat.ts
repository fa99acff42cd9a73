/**
 * POST /v1/chat/completions: JSON or an event stream (status 200 only once first content arrived).
 * A client that left before the answer gets nothing (nobody reads it); the status recorded for it in
 * metrics is 499, the customary "client closed request", not an error of ours.
 *
 * Sealed transport (optional, src/crypto/consumer-seal.ts): a body sent as application/vnd.umbra.sealed+json
 * is opened in memory with the coordinator's sealing key, bound to the bearer that authenticated, the path
 * and the envelope's timestamp. Before opening, a stale or future timestamp or an `enc` already accepted is
 * refused (src/crypto/consumer-replay.ts; a full replay cache is a 429); after, the `enc` is recorded. Every
 * refusal up to there, and an envelope that is malformed or does not open, is a plain 400; once accepted,
 * every answer (errors included) is sealed back under a key of its own (x-umbra-response-nonce).
 */
import { Elysia } from "elysia";
import type { CoordinatorAttestation } from "../attestation/coordinator-attestation.ts";
import { type Authenticator, bearer } from "../auth/authenticator.ts";
import type { Admission, SealedReplayCache } from "../crypto/consumer-replay.ts";
import {
  type ConsumerResponseSealer,
  type EnvelopeRead,
  openConsumerRequest,
  RESPONSE_NONCE_HEADER,
  readSealedEnvelope,
  SEALED_CONTENT_TYPE,
} from "../crypto/consumer-seal.ts";
import { type ApiError, Errors, toApiError } from "../errors/api-error.ts";
import { BUDGET_FIELDS } from "../inference/chat-request.ts";
import type { ChatService } from "../inference/chat-service.ts";
import { ClientGone } from "../inference/dispatch.ts";
import { consumerAuth } from "./auth.ts";
import { parseJson, readBody } from "./body.ts";
import type { Connection } from "./connection.ts";
import { errorResponse } from "./errors.ts";

const CLIENT_CLOSED = 499;
const PATH = "/v1/chat/completions";
const SSE_HEADERS = { "content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no" };

interface ChatDeps {
  readonly chat: ChatService;
  readonly authenticate: Authenticator;
  readonly attestation: Pick<CoordinatorAttestation, "sealingKey">;
  /** Freshness and single use of sealed envelopes. */
  readonly sealedReplay: SealedReplayCache;
  readonly maxBodyBytes: number;
  readonly bodyTimeoutMs: number;
  /** The request's connection: told when the body was read and when the answer ended (idle timeout). */
  readonly connection?: (request: Request) => Pick<Connection, "bodyRead" | "answered"> | undefined;
}

export function chatRoutes(deps: ChatDeps) {
  const limits = { maxBytes: deps.maxBodyBytes, timeoutMs: deps.bodyTimeoutMs };
  return new Elysia({ name: "chat" }).use(consumerAuth(deps.authenticate)).post(
    PATH,
    async ({ request, principal }) => {
      const bytes = await readBody(request, limits);
      const connection = deps.connection?.(request);
      connection?.bodyRead?.();
      // The idle timeout is lifted from here until the answer has ended: a stream tells the connection
      // itself when it ends; any other answer, errors included, has ended on return.
      let streaming = false;
      try {
        if (!isSealed(request)) {
          const response = await answer(deps, parseJson(bytes, BUDGET_FIELDS), principal, request, connection?.answered);
          streaming = isEventStream(response);
          return response;
        }
        const { plaintext, sealer } = await openSealed(deps, bytes, bearer(request.headers.get("authorization")) ?? "");
        let response: Response;
        try {
          response = await answer(deps, parseJson(plaintext, BUDGET_FIELDS), principal, request, connection?.answered);
        } catch (error) {
          response = errorResponse(toApiError(error));
        }
        streaming = isEventStream(response);
        return sealResponse(response, sealer);
      } finally {
        if (!streaming) connection?.answered?.();
      }
    },
    { parse: "none" },
  );
}

async function answer(
  deps: ChatDeps,
  body: unknown,
  principal: Parameters<ChatService["complete"]>[1],
  request: Request,
  streamEnded: (() => void) | undefined,
) {
  let result: Awaited<ReturnType<ChatService["complete"]>>;
  try {
    result = await deps.chat.complete(body, principal, request.signal, streamEnded);
  } catch (e) {
    if (e instanceof ClientGone) return new Response(null, { status: CLIENT_CLOSED });
    throw e;
  }
  if (result.kind === "stream") return new Response(result.stream, { status: 200, headers: { ...SSE_HEADERS, ...result.headers } });
  return new Response(JSON.stringify(result.body), { status: 200, headers: { "content-type": "application/json", ...result.headers } });
}

const isEventStream = (response: Response) => response.headers.get("content-type") === SSE_HEADERS["content-type"];

function isSealed(request: Request): boolean {
  const type = request.headers.get("content-type");
  return type !== null && type.split(";")[0]?.trim().toLowerCase() === SEALED_CONTENT_TYPE;
}

/**
 * Reads, admits and opens a sealed envelope, then records its `enc`; every failure is a plain error (there
 * is no key to seal it with). `credential` is the bearer that authenticated (the guard ran first).
 */
async function openSealed(deps: ChatDeps, bytes: Uint8Array, credential: string) {
  const read = readSealedEnvelope(parseJson(bytes));
  if (!read.ok) throw envelopeError(read);
  const admission = deps.sealedReplay.check(read.encText, read.timestamp);
  if (!admission.ok) throw refusal(admission, deps.sealedReplay.windowSeconds);
  const key = await deps.attestation.sealingKey();
  let opened: Awaited<ReturnType<typeof openConsumerRequest>>;
  try {
    opened = await openConsumerRequest(key.privateKey, read.enc, read.ciphertext, { path: PATH, credential, timestamp: read.timestamp });
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
