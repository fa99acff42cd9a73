/**
 * A benchmark-only provider for the stream relay benchmark (stream-relay.ts): the test suite's
 * protocol-v2 fake provider (test/support/fake-provider.ts) with two behaviours, chosen by the build
 * a request is for:
 *
 *   <prefix>/burst  accepted, then `max_tokens` chunks of one short token each, sent as fast as the
 *                   socket takes them (no engine, no pacing), then complete;
 *   <prefix>/paced  the same at `pacedTps` tokens per second per stream, one frame per token (how a
 *                   model streams, and how the real provider's echo engine sends when paced);
 *   <prefix>/hold   accepted, one chunk, then nothing until a line `release` arrives on stdin; then
 *                   complete. Holds streams open (memory per open stream).
 *
 * Plaintext frames by default (development coordinators accept them), so the coordinator's relay is
 * measured without crypto; `sealed: true` speaks the sealed protocol through the same fake provider, as
 * the real agent does by default: requests sealed under session keys (one HPKE setup per connection),
 * AES-256-GCM chunks (JSON frames: the fake provider sends no binary batches).
 * One process may open several connections: one session announces at most 4,096 concurrent attempts.
 * Prints one JSON line once every connection is welcomed, then serves until killed.
 *
 * Usage: bun bench/stream-provider.ts '{"url":..., "token":..., "prefix":"bench", "pacedTps":1000,
 *        "connections":1, "maxConcurrency":1024, "sealed":false}'
 */
import { type Behaviour, connectFakeProvider, type Step } from "../test/support/fake-provider.ts";

interface Options {
  readonly url: string;
  readonly token: string;
  readonly prefix: string;
  /** Tokens per second per stream of the paced build (default 1000). */
  readonly pacedTps?: number;
  readonly connections?: number;
  readonly maxConcurrency?: number;
  readonly sealed?: boolean;
}

const options = JSON.parse(process.argv[2] ?? "{}") as Options;
if (!options.url || !options.token || !options.prefix) throw new Error("usage: stream-provider.ts '<json options>'");
const BURST = `${options.prefix}/burst`;
const HOLD = `${options.prefix}/hold`;
const PACED = `${options.prefix}/paced`;
/** One token as a model would stream it (about 4 characters). */
const TOKEN: Step = { do: "chunk", delta: { content: "tok " } };
/** The burst path yields to the event loop this often, so cancels and new requests get through. */
const YIELD_EVERY = 256;
const YIELD: Step = { do: "wait", ms: 0 };

let release = Promise.withResolvers<void>();

const behave: Behaviour = (inference) => {
  if (inference.model === HOLD) {
    return [{ do: "accept" }, TOKEN, { do: "until", ready: release.promise }, { do: "complete" }];
  }
  const n = inference.request.max_tokens;
  const steps: Step[] = [{ do: "accept" }];
  const pace: Step = { do: "wait", ms: 1000 / (options.pacedTps ?? 1000) };
  for (let i = 0; i < n; i++) {
    if (inference.model === PACED && i > 0) steps.push(pace);
    steps.push(TOKEN);
    if (i % YIELD_EVERY === YIELD_EVERY - 1) steps.push(YIELD);
  }
  steps.push({ do: "complete", usage: { prompt_tokens: 1, completion_tokens: n } });
  return steps;
};

const providers = await Promise.all(
  Array.from({ length: options.connections ?? 1 }, () =>
    connectFakeProvider({
      url: options.url,
      token: options.token,
      models: [BURST, PACED, HOLD],
      maxConcurrency: options.maxConcurrency ?? 1024,
      sealed: options.sealed ?? false,
      // As the real agent: a sealed session offers session keys (one HPKE setup per connection).
      sessionKeys: options.sealed ?? false,
      behave,
    }),
  ),
);
if (providers.some((p) => p.providerId === "")) throw new Error("a connection was not welcomed");
console.log(JSON.stringify({ connected: providers.map((p) => p.providerId) }));

// `release` lets every held attempt complete; later holds wait for the next release.
let buffered = "";
for await (const data of Bun.stdin.stream()) {
  buffered += new TextDecoder().decode(data);
  let newline = buffered.indexOf("\n");
  while (newline >= 0) {
    const line = buffered.slice(0, newline).trim();
    buffered = buffered.slice(newline + 1);
    if (line === "release") {
      const current = release;
      release = Promise.withResolvers<void>();
      current.resolve();
    }
    newline = buffered.indexOf("\n");
  }
}
await Promise.all(providers.map((p) => p.closed));
