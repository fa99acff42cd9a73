/**
 * A scriptable provider for coordinator tests: a real WebSocket client speaking protocol v2, whose
 * answer to each inference is decided by a `behave` function (text chunks, tool-call fragments, raw
 * frames ...). Use `await using`.
 */
import { ChunkSealer } from "../../src/crypto/chunks.ts";
import { fromBase64url, toBase64url } from "../../src/crypto/encoding.ts";
import { generateX25519KeyPair, openRequest } from "../../src/crypto/seal.ts";
import { openRecipientSession, type SessionOpener } from "../../src/crypto/session.ts";
import { messageText } from "../../src/protocol/chat-messages.ts";
import {
  type CoordinatorFrame,
  type Delta,
  encode,
  type Inference,
  PROTOCOL_VERSION,
  type ToolCallDelta,
  type Usage,
} from "../../src/protocol/frames.ts";
import { parseCoordinatorFrame, parseEngineRequest } from "../../src/protocol/parse.ts";

/** What a `frames` step gets in a sealed session: the attempt's sealer and ids, to craft frames. */
export interface SealedContext {
  readonly sealer: ChunkSealer;
  readonly ids: { readonly request_id: string; readonly attempt: number };
  readonly seal: (payload: unknown, final: boolean) => { seq: number; sealed: string };
}

export type Step =
  | { readonly do: "accept" }
  | { readonly do: "chunk"; readonly delta: Delta }
  /** A tool-call fragment: `tool_call` (or `sealed_tool_call`), in the attempt's one seq with chunks. */
  | { readonly do: "tool_call"; readonly call: ToolCallDelta }
  | { readonly do: "complete"; readonly finishReason?: string; readonly usage?: Usage }
  | { readonly do: "error"; readonly code: string }
  | { readonly do: "raw"; readonly text: string }
  | { readonly do: "wait"; readonly ms: number }
  /** Waits until the promise settles (a gate the test opens). */
  | { readonly do: "until"; readonly ready: Promise<unknown> }
  | { readonly do: "hang" }
  /** Sealed sessions: arbitrary frames built with the attempt's sealer (tampering tests). */
  | { readonly do: "frames"; readonly make: (ctx: SealedContext) => readonly string[] }
  | { readonly do: "close" };

export type Behaviour = (inference: Inference) => readonly Step[];

/** Accept, then one chunk per word of the last message, then complete. */
export const echo: Behaviour = (inf) => {
  const message = inf.request.messages.at(-1);
  const last = message ? messageText(message) : "";
  const words = last.split(/\s+/).filter(Boolean).slice(0, inf.request.max_tokens);
  return [
    { do: "accept" },
    ...words.map((w, i): Step => ({ do: "chunk", delta: { content: i === words.length - 1 ? w : `${w} ` } })),
    { do: "complete", usage: { prompt_tokens: 5, completion_tokens: words.length } },
  ];
};

export interface FakeProviderOptions {
  readonly url: string;
  readonly token: string;
  readonly models: readonly string[];
  readonly maxConcurrency?: number;
  readonly behave?: Behaviour;
  /** Send heartbeats (default true, every heartbeat interval from welcome). */
  readonly heartbeat?: boolean;
  readonly hello?: Record<string, unknown>;
  /** Announce an X25519 key and speak the sealed protocol (the real agent always does). */
  readonly sealed?: boolean;
  /** With `sealed`: offer session keys and open `n` requests with them (the real agent does by default). */
  readonly sessionKeys?: boolean;
}

export interface FakeProvider extends AsyncDisposable {
  readonly received: CoordinatorFrame[];
  readonly providerId: string;
  readonly closed: Promise<{ code: number; reason: string }>;
  send(text: string): void;
  close(): void;
  /** Resolves when a frame matching `match` has been received. */
  waitFor(match: (f: CoordinatorFrame) => boolean): Promise<CoordinatorFrame>;
}

export async function connectFakeProvider(options: FakeProviderOptions): Promise<FakeProvider> {
  const url = `${options.url.replace(/^http/, "ws")}/v1/provider/connect`;
  const keys = options.sealed ? await generateX25519KeyPair() : undefined;
  let session: Promise<SessionOpener> | undefined;
  const ws = new WebSocket(url, { headers: { authorization: `Bearer ${options.token}` } } as unknown as string[]);
  const received: CoordinatorFrame[] = [];
  const watchers: { match: (f: CoordinatorFrame) => boolean; resolve: (f: CoordinatorFrame) => void }[] = [];
  const cancelled = new Set<string>();
  const behave = options.behave ?? echo;
  let heartbeatTimer: ReturnType<typeof setInterval> | undefined;
  let providerId = "";

  const closed = new Promise<{ code: number; reason: string }>((resolve) => {
    ws.addEventListener("close", (e) => {
      clearInterval(heartbeatTimer);
      resolve({ code: e.code, reason: e.reason });
    });
  });
  const send = (text: string) => {
    if (ws.readyState === WebSocket.OPEN) ws.send(text);
  };

  async function run(inf: Inference, sealer?: ChunkSealer): Promise<void> {
    const key = `${inf.request_id}#${inf.attempt}`;
    let seq = 0;
    const sealPayload = (payload: unknown, final: boolean) => {
      const frame = (sealer as ChunkSealer).seal(new TextEncoder().encode(JSON.stringify(payload)), final);
      return { seq: frame.seq, sealed: toBase64url(frame.ciphertext) };
    };
    for (const step of behave(inf)) {
      if (cancelled.has(key)) return;
      const ids = { request_id: inf.request_id, attempt: inf.attempt };
      switch (step.do) {
        case "accept":
          send(encode({ type: "accepted", ...ids }));
          break;
        case "chunk":
          if (sealer) {
            seq++;
            send(encode({ type: "sealed_chunk", ...ids, ...sealPayload(step.delta, false) }));
          } else {
            send(encode({ type: "chunk", ...ids, seq: seq++, delta: step.delta }));
          }
          break;
        case "tool_call":
          if (sealer) {
            seq++;
            send(encode({ type: "sealed_tool_call", ...ids, ...sealPayload(step.call, false) }));
          } else {
            send(encode({ type: "tool_call", ...ids, seq: seq++, tool_call: step.call }));
          }
          break;
        case "complete": {
          const end = { finish_reason: step.finishReason ?? "stop", usage: step.usage ?? { prompt_tokens: 1, completion_tokens: seq } };
          if (sealer) send(encode({ type: "sealed_complete", ...ids, ...sealPayload(end, true) }));
          else send(encode({ type: "complete", ...ids, seq, ...end }));
          break;
        }
        case "frames":
          if (!sealer) throw new Error("a frames step needs a sealed session");
          for (const text of step.make({ sealer, ids, seal: sealPayload })) send(text);
          break;
        case "error":
          send(JSON.stringify({ type: "error", ...ids, code: step.code }));
          break;
        case "raw":
          send(step.text);
          break;
        case "wait":
          await Bun.sleep(step.ms);
          break;
        case "until":
          await step.ready;
          break;
        case "hang":
          return;
        case "close":
          ws.close();
          return;
      }
    }
  }

  ws.addEventListener("message", (e) => {
    const frame = parseCoordinatorFrame(String(e.data));
    received.push(frame);
    for (const w of [...watchers]) {
      if (w.match(frame)) {
        watchers.splice(watchers.indexOf(w), 1);
        w.resolve(frame);
      }
    }
    if (frame.type === "welcome" && frame.session_enc !== undefined && keys && options.sessionKeys) {
      session = openRecipientSession(keys.privateKey, fromBase64url(frame.session_enc), {
        protocolVersion: PROTOCOL_VERSION,
        providerId: frame.provider_id,
      });
    }
    if (frame.type === "inference") void run(frame);
    if (frame.type === "sealed_inference" && keys) {
      const sealedFrame = frame;
      const pair = keys;
      void (async () => {
        const binding = { protocolVersion: PROTOCOL_VERSION, requestId: sealedFrame.request_id, attempt: sealedFrame.attempt };
        const ciphertext = fromBase64url(sealedFrame.ciphertext);
        const opened =
          sealedFrame.n !== undefined && session
            ? (await session).open(sealedFrame.n, ciphertext, binding)
            : await openRequest(pair.privateKey, fromBase64url(sealedFrame.enc ?? ""), ciphertext, binding);
        const request = parseEngineRequest(JSON.parse(new TextDecoder().decode(opened.plaintext)));
        const { enc: _e, n: _n, ciphertext: _c, ...head } = sealedFrame;
        const sealer = new ChunkSealer({
          responseKey: opened.responseKey,
          requestId: sealedFrame.request_id,
          attempt: sealedFrame.attempt,
        });
        await run({ ...head, type: "inference", request }, sealer);
      })();
    }
    if (frame.type === "cancel") cancelled.add(`${frame.request_id}#${frame.attempt}`);
  });

  const waitFor = (match: (f: CoordinatorFrame) => boolean) => {
    const found = received.find(match);
    if (found) return Promise.resolve(found);
    return new Promise<CoordinatorFrame>((resolve) => watchers.push({ match, resolve }));
  };

  await new Promise<void>((resolve, reject) => {
    ws.addEventListener("open", () => resolve(), { once: true });
    ws.addEventListener("error", () => reject(new Error("fake provider could not connect")), { once: true });
  });
  ws.send(
    JSON.stringify({
      type: "hello",
      ...(keys ? { encryption_key: toBase64url(keys.publicKey) } : {}),
      ...(keys && options.sessionKeys ? { session_keys: true } : {}),
      protocol_versions: [PROTOCOL_VERSION],
      provider_version: "test",
      engine: "fake",
      models: options.models.map((build_id) => ({ build_id })),
      max_concurrency: options.maxConcurrency ?? 8,
      ...options.hello,
    }),
  );
  const welcome = await Promise.race([waitFor((f) => f.type === "welcome"), closed.then(() => undefined)]);
  if (welcome?.type === "welcome") {
    providerId = welcome.provider_id;
    if (options.heartbeat !== false) {
      const beat = () => send(JSON.stringify({ type: "heartbeat", status: "serving", warm_models: options.models, active: 0, queued: 0 }));
      heartbeatTimer = setInterval(beat, welcome.heartbeat_interval_ms);
    }
  }

  return {
    received,
    get providerId() {
      return providerId;
    },
    closed,
    send,
    close: () => ws.close(),
    waitFor,
    async [Symbol.asyncDispose]() {
      clearInterval(heartbeatTimer);
      if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close();
      await closed;
    },
  };
}
