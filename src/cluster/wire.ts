/**
 * The wire format of forwarded dispatch between replicas over NATS core (research: scale-out.md §4.3).
 * A message is a header (one line of JSON, never a raw newline) and, for request parts, "\n" then bytes.
 *
 * - Request, forwarder -> `<prefix>.prov.<providerId>`, reply subject = the forwarder's inbox: parts
 *   {v, k:"d", id, a, b, dl, i, n} + a slice of the UTF-8 JSON of the engine request body; i = 0..n-1,
 *   each message within the server's max_payload (chunkRequest), assembled by the owner in order.
 * - Owner -> inbox: {s, k:"ok", acct} (slot taken) | {s, k:"no", why} | {s, k:"ev", e:[events]} |
 *   {s, k:"ka"}; `s` counts every message from 0 with no gap; a terminal event is the end marker.
 * - Forwarder -> `<prefix>.ctl.<id>.<attempt>`: {k:"ack", s} every keepalive period, {k:"cancel", r}.
 * Every decoder validates and throws ProtocolError: a malformed message fails that forwarded request only.
 */
import type { AttemptEvent, VerifiedReceipt } from "../fleet/attempt.ts";
import { CANCEL_REASONS, type CancelReason, type EngineRequestBody, MAX_BUILD_ID, PROVIDER_ERROR_CODES } from "../protocol/frames.ts";
import { ProtocolError, parseDelta, parseEngineRequest, parseFinal, parseToolCall } from "../protocol/parse.ts";

export const WIRE_VERSION = 1;
/** Subject tokens the format accepts for ids (request, provider, replica): NATS-safe, bounded. */
const TOKEN = /^[A-Za-z0-9_-]{1,128}$/;
/** Room kept in each request part for its header. */
const HEADER_ROOM = 1024;
/** A request part's or control message's header (events in owner messages: max_payload alone). */
const MAX_HEADER = 64 * 1024;
/** Parts per forwarded request: 64 of the default 1 MB payload bound the assembled body. */
export const MAX_PARTS = 64;
/** Why an owner refuses a forwarded dispatch. */
export const REFUSALS = ["capacity", "draining", "gone", "model", "malformed"] as const;
export type Refusal = (typeof REFUSALS)[number];

export const subjects = {
  provider: (prefix: string, providerId: string) => `${prefix}.prov.${providerId}`,
  control: (prefix: string, requestId: string, attempt: number) => `${prefix}.ctl.${requestId}.${attempt}`,
  digest: (prefix: string, replicaId: string) => `${prefix}.fleet.${replicaId}`,
  allDigests: (prefix: string) => `${prefix}.fleet.*`,
  /** Balance leases on an account given back (money-leases.ts); the body is the account id. */
  recall: (prefix: string, replicaId: string) => `${prefix}.money.recall.${replicaId}`,
};

export function isToken(s: string): boolean {
  return TOKEN.test(s);
}

export interface RequestPart {
  readonly id: string;
  readonly attempt: number;
  readonly build: string;
  /** Milliseconds the provider has for its first content (relative: no clock is shared). */
  readonly deadlineMs: number;
  readonly index: number;
  readonly parts: number;
  readonly bytes: Uint8Array;
}

export type OwnerMessage =
  | { readonly s: number; readonly k: "ok"; readonly acct: string }
  | { readonly s: number; readonly k: "no"; readonly why: Refusal }
  | { readonly s: number; readonly k: "ev"; readonly e: readonly AttemptEvent[] }
  | { readonly s: number; readonly k: "ka" };

export type ControlMessage = { readonly k: "ack"; readonly s: number } | { readonly k: "cancel"; readonly r: CancelReason };

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

type Obj = Record<string, unknown>;
const fail = (reason: string): never => {
  throw new ProtocolError(reason);
};
const obj = (v: unknown, what: string): Obj =>
  typeof v === "object" && v !== null && !Array.isArray(v) ? (v as Obj) : fail(`${what} must be an object`);
const int = (o: Obj, k: string, min: number, max: number): number => {
  const v = o[k];
  return typeof v === "number" && Number.isInteger(v) && v >= min && v <= max
    ? v
    : fail(`field '${k}' must be an integer in ${min}..${max}`);
};
const str = (o: Obj, k: string, max = 256): string => {
  const v = o[k];
  return typeof v === "string" && v.length > 0 && v.length <= max ? v : fail(`field '${k}' must be a string of 1..${max} characters`);
};
const token = (o: Obj, k: string): string => {
  const v = str(o, k, 128);
  return isToken(v) ? v : fail(`field '${k}' is not a subject token`);
};
const oneOf = <T extends string>(values: readonly T[], v: unknown, k: string): T =>
  typeof v === "string" && (values as readonly string[]).includes(v) ? (v as T) : fail(`field '${k}' is not in its vocabulary`);

function frame(header: object, body?: Uint8Array): Uint8Array {
  const head = encoder.encode(JSON.stringify(header));
  if (body === undefined) return head;
  const out = new Uint8Array(head.length + 1 + body.length);
  out.set(head);
  out[head.length] = 0x0a;
  out.set(body, head.length + 1);
  return out;
}

/** The header object of a message and its body bytes (empty without one). @throws ProtocolError */
function split(data: Uint8Array, maxHeader = MAX_HEADER): { header: Obj; body: Uint8Array } {
  const nl = data.indexOf(0x0a);
  const end = nl < 0 ? data.length : nl;
  if (end > maxHeader) fail("header too long");
  let header: unknown;
  try {
    header = JSON.parse(decoder.decode(data.subarray(0, end)));
  } catch {
    fail("header is not JSON");
  }
  return { header: obj(header, "header"), body: nl < 0 ? new Uint8Array(0) : data.subarray(nl + 1) };
}

/**
 * The messages of one forwarded request, each within `maxPayload` bytes.
 * @throws RangeError when the body needs more than MAX_PARTS parts (the caller's own bound failed).
 */
export function chunkRequest(
  r: Omit<RequestPart, "index" | "parts" | "bytes"> & { readonly body: EngineRequestBody },
  maxPayload: number,
): Uint8Array[] {
  const body = encoder.encode(JSON.stringify(r.body));
  const size = Math.max(1, maxPayload - HEADER_ROOM);
  const parts = Math.max(1, Math.ceil(body.length / size));
  if (parts > MAX_PARTS) throw new RangeError(`a forwarded request of ${body.length} bytes needs more than ${MAX_PARTS} parts`);
  const out: Uint8Array[] = [];
  for (let i = 0; i < parts; i++) {
    const header = { v: WIRE_VERSION, k: "d", id: r.id, a: r.attempt, b: r.build, dl: r.deadlineMs, i, n: parts };
    out.push(frame(header, body.subarray(i * size, (i + 1) * size)));
  }
  return out;
}

/** One request part. @throws ProtocolError */
export function decodeRequestPart(data: Uint8Array): RequestPart {
  const { header: h, body } = split(data);
  if (h.v !== WIRE_VERSION || h.k !== "d") fail("not a forwarded request of this version");
  const parts = int(h, "n", 1, MAX_PARTS);
  return {
    id: token(h, "id"),
    attempt: int(h, "a", 0, 64),
    build: str(h, "b", MAX_BUILD_ID),
    deadlineMs: int(h, "dl", 1, 86_400_000),
    index: int(h, "i", 0, parts - 1),
    parts,
    bytes: body,
  };
}

/** The engine request body from its assembled parts. @throws ProtocolError */
export function decodeRequestBody(bytes: Uint8Array): EngineRequestBody {
  let value: unknown;
  try {
    value = JSON.parse(decoder.decode(bytes));
  } catch {
    fail("request body is not JSON");
  }
  return parseEngineRequest(value);
}

export function encodeOwner(m: OwnerMessage): Uint8Array {
  return frame(m);
}

export function encodeControl(m: ControlMessage): Uint8Array {
  return frame(m);
}

/** One message from an owner. @throws ProtocolError */
export function decodeOwner(data: Uint8Array): OwnerMessage {
  // Events travel in the header: the server's max_payload bounds it.
  const { header: h } = split(data, data.length);
  const s = int(h, "s", 0, Number.MAX_SAFE_INTEGER);
  switch (h.k) {
    case "ok":
      return { s, k: "ok", acct: str(h, "acct") };
    case "no":
      return { s, k: "no", why: oneOf(REFUSALS, h.why, "why") };
    case "ka":
      return { s, k: "ka" };
    case "ev": {
      const e = h.e;
      if (!Array.isArray(e) || e.length === 0 || e.length > 4096) fail("field 'e' must hold 1..4096 events");
      return { s, k: "ev", e: (e as unknown[]).map(decodeEvent) };
    }
    default:
      return fail("unknown owner message");
  }
}

/** One message from a forwarder. @throws ProtocolError */
export function decodeControl(data: Uint8Array): ControlMessage {
  const { header: h } = split(data);
  if (h.k === "ack") return { k: "ack", s: int(h, "s", -1, Number.MAX_SAFE_INTEGER) };
  if (h.k === "cancel") return { k: "cancel", r: oneOf(CANCEL_REASONS, h.r, "r") };
  return fail("unknown control message");
}

function decodeReceipt(v: unknown): VerifiedReceipt {
  const o = obj(v, "receipt");
  return {
    signature: str(o, "signature", 512),
    responseHash: str(o, "responseHash", 64),
    requestHash: str(o, "requestHash", 64),
    modelBuild: str(o, "modelBuild", MAX_BUILD_ID),
    providerKeyId: str(o, "providerKeyId", 64),
    trustLevel: str(o, "trustLevel", 32),
  };
}

/** An Attempt event as the owner's session produced it (the same shape, validated again). */
function decodeEvent(v: unknown): AttemptEvent {
  const o = obj(v, "event");
  switch (o.type) {
    case "accepted":
      return { type: "accepted" };
    case "chunk":
      return { type: "chunk", delta: parseDelta(o.delta) };
    case "tool_call":
      return { type: "tool_call", call: parseToolCall(o.call) };
    case "complete": {
      const { finish_reason, usage } = parseFinal({ finish_reason: o.finishReason, usage: o.usage });
      const receipt = o.receipt === undefined ? undefined : decodeReceipt(o.receipt);
      return { type: "complete", finishReason: finish_reason, usage, ...(receipt ? { receipt } : {}) };
    }
    case "error":
      return { type: "error", code: oneOf(PROVIDER_ERROR_CODES, o.code, "code") };
    case "lost":
      return { type: "lost", reason: str(o, "reason", 200) };
    case "invalid":
      return { type: "invalid", reason: str(o, "reason", 200) };
    default:
      return fail("unknown event type");
  }
}
