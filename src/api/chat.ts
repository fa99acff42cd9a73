/**
 * POST /v1/chat/completions: JSON or an event stream (status 200 only once first content arrived).
 * A client that left before the answer gets nothing (nobody reads it); the status recorded for it in
 * metrics is 499, the customary "client closed request", not an error of ours.
 *
 * Sealed transport (optional, src/crypto/consumer-seal.ts): a body sent as application/vnd.umbra.sealed+json
 * is opened in memory with the coordinator's sealing key; a bad envelope or one that does not open is a
 * plain 400, and once it opened every answer (errors included) is sealed back to the consumer.
 */
import { Elysia } from "elysia";
import type { CoordinatorAttestation } from "../attestation/coordinator-attestation.ts";
import type { Authenticator } from "../auth/authenticator.ts";
import { type ConsumerResponseSealer, openConsumerRequest, readSealedEnvelope, SEALED_CONTENT_TYPE } from "../crypto/consumer-seal.ts";
import { Errors, toApiError } from "../errors/api-error.ts";
import { BUDGET_FIELDS } from "../inference/chat-request.ts";
import type { ChatService } from "../inference/chat-service.ts";
import { ClientGone } from "../inference/dispatch.ts";
import { consumerAuth } from "./auth.ts";
import { errorResponse, parseJson, readBody } from "./errors.ts";
import type { Connection } from "./http.ts";

const CLIENT_CLOSED = 499;
const PATH = "/v1/chat/completions";
const SSE_HEADERS = { "content-type": "text/event-stream", "cache-control": "no-cache", "x-accel-buffering": "no" };

interface ChatDeps {
  readonly chat: ChatService;
  readonly authenticate: Authenticator;
  readonly attestation: Pick<CoordinatorAttestation, "sealingKey">;
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
        const { plaintext, sealer } = await openSealed(deps, bytes);
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

/** Reads and opens a sealed envelope; every failure is a plain 400 (there is no key to seal it with). */
async function openSealed(deps: ChatDeps, bytes: Uint8Array) {
  const read = readSealedEnvelope(parseJson(bytes));
  if (!read.ok) throw read.missing ? Errors.missingField(read.param) : Errors.invalidValue(read.message, read.param);
  const key = await deps.attestation.sealingKey();
  try {
    return await openConsumerRequest(key.privateKey, read.enc, read.ciphertext, PATH);
  } catch {
    throw Errors.invalidValue(
      "the sealed body does not open with the coordinator's sealing key (fetch GET /v1/attestation again: the key changes on restart)",
      "ciphertext",
    );
  }
}

/** The same status and headers, the body sealed: JSON as one sealed body, a stream frame by frame. */
async function sealResponse(response: Response, sealer: ConsumerResponseSealer): Promise<Response> {
  if (response.body === null) return response;
  const headers = new Headers(response.headers);
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
