/**
 * The soak's clients (soak-run.ts): concurrent loops that each pick a kind of request by weight (a seeded
 * generator, so a run's mix reproduces), send it with a fresh connection, and record its outcome: status,
 * error code, how a stream ended, the x-request-id and usage of an answer, and whether the kind allows it.
 * Requests carry synthetic words only; nothing of an answer's text is kept.
 */

import { seededRandom } from "../support/random.ts";
import { sseReader } from "../support/server.ts";
import { type Answer, expectEnvelope } from "./fuzz-inputs.ts";

export interface SoakKey {
  readonly id: string;
  readonly key: string;
}

export interface SoakWorld {
  readonly url: string;
  /** The alias clients request (its build has a price and a 64-token output limit). */
  readonly model: string;
  readonly build: string;
  readonly providerToken: string;
  /** Every account (consumer, broke, host). */
  readonly accountIds: readonly string[];
  /** µUSD credited in total. */
  readonly credited: number;
  readonly keys: { readonly main: SoakKey; readonly limited: SoakKey; readonly capped: SoakKey; readonly broke: SoakKey };
}

export type Kind =
  | "json"
  | "stream"
  | "client leaves"
  | "unknown model"
  | "invalid body"
  | "rate-limited key"
  | "no funds"
  | "capped key"
  | "models";

export type Ending = "json" | "done" | "in-band error" | "client left" | "cut" | "no answer";

export interface Outcome {
  readonly kind: Kind;
  /** A POST /v1/chat/completions (every kind but "models"). */
  readonly chat: boolean;
  readonly status: number | "no answer";
  readonly code?: string;
  readonly ending?: Ending;
  readonly requestId?: string;
  readonly usage?: { readonly prompt_tokens: number; readonly completion_tokens: number };
  /** An error after the reservation (dispatch or provider failure): the coordinator records a usage row for it. */
  readonly reserved: boolean;
  /** The kind allows this outcome. */
  readonly allowed: boolean;
  /** What is wrong with an error answer's envelope (fuzz-inputs.ts expectEnvelope), if anything. */
  readonly envelopeProblem?: string;
}

const WEIGHTS: readonly [Kind, number][] = [
  ["json", 4],
  ["stream", 4],
  ["client leaves", 2],
  ["unknown model", 1],
  ["invalid body", 1],
  ["rate-limited key", 1],
  ["no funds", 1],
  ["capped key", 1],
  ["models", 1],
];

/** What each kind may end with: `status/ending` or `status code`. A provider killed mid-answer explains the 502s and in-band errors. */
const ALLOWED: Readonly<Record<Kind, readonly string[]>> = {
  json: ["200/json", "502 provider_error"],
  stream: ["200/done", "200/in-band error", "502 provider_error"],
  "client leaves": ["200/client left", "502 provider_error"],
  "unknown model": ["404 model_not_found"],
  "invalid body": ["400 invalid_json", "400 missing_field", "400 invalid_value", "400 unsupported_value"],
  "rate-limited key": ["200/json", "429 rate_limit_exceeded", "502 provider_error"],
  "no funds": ["402 insufficient_quota"],
  "capped key": ["200/json", "402 insufficient_quota", "502 provider_error"],
  models: ["200/json"],
};

const WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"];
const INVALID_BODIES = [
  "not json",
  "{}",
  '{"model":"org/soak"}',
  '{"model":"org/soak","messages":[]}',
  '{"model":"org/soak","messages":[{"role":"user","content":"alpha"}],"max_tokens":-1}',
  '{"model":"org/soak","messages":[{"role":"user","content":"alpha"}],"max_tokens":1.5}',
  '{"model":"org/soak","messages":[{"role":"user","content":"alpha"}],"n":2}',
  '{"model":"org/soak","messages":[{"role":"user","content":5}]}',
];
/** A safety net only: a request still without an answer after this long counts as "no answer". */
const REQUEST_DEADLINE_MS = 120_000;

export class Traffic {
  readonly outcomes: Outcome[] = [];
  private readonly random: () => number;

  constructor(
    private readonly world: SoakWorld,
    seed: number,
  ) {
    this.random = seededRandom(seed);
  }

  /** `workers` loops, each sending one request after another, until `ms` have passed. */
  async run(workers: number, ms: number): Promise<void> {
    const end = performance.now() + ms;
    await Promise.all(
      Array.from({ length: workers }, async () => {
        while (performance.now() < end) this.outcomes.push(await this.one(this.pick()));
      }),
    );
  }

  private pick(): Kind {
    const total = WEIGHTS.reduce((s, [, w]) => s + w, 0);
    let r = this.random() * total;
    for (const [kind, w] of WEIGHTS) {
      r -= w;
      if (r < 0) return kind;
    }
    return "json";
  }

  private body(extra: Record<string, unknown> = {}): string {
    const sentence = () =>
      Array.from({ length: 3 + Math.floor(this.random() * 14) }, () => WORDS[Math.floor(this.random() * WORDS.length)]).join(" ");
    const messages = [{ role: "user", content: sentence() }];
    if (this.random() < 0.3) messages.unshift({ role: "system", content: sentence() });
    const budget = this.random() < 0.5 ? {} : { max_tokens: 1 + Math.floor(this.random() * 24) };
    return JSON.stringify({ model: this.world.model, messages, ...budget, ...extra });
  }

  private one(kind: Kind): Promise<Outcome> {
    const { keys } = this.world;
    switch (kind) {
      case "json":
        return this.chat(kind, keys.main.key, this.body(), "json");
      case "stream":
        return this.chat(kind, keys.main.key, this.body({ stream: true }), "stream");
      case "client leaves":
        return this.chat(kind, keys.main.key, this.body({ stream: true }), "leave");
      case "unknown model":
        return this.chat(kind, keys.main.key, this.body({ model: `org/missing-${Math.floor(this.random() * 1000)}` }), "json");
      case "invalid body":
        return this.chat(kind, keys.main.key, INVALID_BODIES[Math.floor(this.random() * INVALID_BODIES.length)] as string, "json");
      case "rate-limited key":
        return this.chat(kind, keys.limited.key, this.body(), "json");
      case "no funds":
        return this.chat(kind, keys.broke.key, this.body(), "json");
      case "capped key":
        return this.chat(kind, keys.capped.key, this.body(), "json");
      case "models":
        return this.models();
    }
  }

  private async models(): Promise<Outcome> {
    const response = await fetch(`${this.world.url}/v1/models`, {
      headers: { authorization: `Bearer ${this.world.keys.main.key}` },
      keepalive: false,
    });
    const body = (await response.json()) as unknown;
    return this.outcome("models", false, { status: response.status, headers: response.headers, body }, "json");
  }

  private async chat(kind: Kind, key: string, body: string, mode: "json" | "stream" | "leave"): Promise<Outcome> {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), REQUEST_DEADLINE_MS);
    try {
      const response = await fetch(`${this.world.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body,
        signal: controller.signal,
        keepalive: false,
      });
      const head = { status: response.status, headers: response.headers };
      const requestId = response.headers.get("x-request-id") ?? undefined;
      if (response.status !== 200 || mode === "json") {
        const text = await response.text();
        let parsed: unknown = text;
        try {
          parsed = JSON.parse(text);
        } catch {}
        const usage = (parsed as { usage?: Outcome["usage"] }).usage;
        return this.outcome(kind, true, { ...head, body: parsed }, "json", requestId, usage);
      }
      const events = sseReader(response);
      if (mode === "leave") {
        await events.next();
        controller.abort();
        return this.outcome(kind, true, { ...head, body: null }, "client left", requestId);
      }
      const data = await events.rest();
      let usage: Outcome["usage"];
      for (const d of data) {
        if (d === "[DONE]") continue;
        const chunk = JSON.parse(d) as { usage?: Outcome["usage"] };
        if (chunk.usage) usage = chunk.usage;
      }
      const last = data.at(-1);
      const ending: Ending = last === "[DONE]" ? "done" : last?.startsWith('{"error"') ? "in-band error" : "cut";
      return this.outcome(kind, true, { ...head, body: null }, ending, requestId, usage);
    } catch {
      return this.outcome(kind, true, { status: 0, headers: new Headers(), body: null }, "no answer");
    } finally {
      clearTimeout(timer);
    }
  }

  private outcome(kind: Kind, chat: boolean, answer: Answer, ending: Ending, requestId?: string, usage?: Outcome["usage"]): Outcome {
    const code = answer.status === 200 ? undefined : (answer.body as { error?: { code?: string } } | null)?.error?.code;
    const status = ending === "no answer" ? "no answer" : answer.status;
    const label = status === 200 ? `200/${ending}` : `${status} ${code}`;
    const reserved = typeof status === "number" && (status >= 500 || (status === 429 && code !== "rate_limit_exceeded"));
    let envelopeProblem: string | undefined;
    if (typeof status === "number" && status !== 200) {
      try {
        expectEnvelope(answer);
      } catch (e) {
        envelopeProblem = e instanceof Error ? e.message : String(e);
      }
    }
    return {
      kind,
      chat,
      status,
      ending: status === 200 ? ending : undefined,
      ...(code === undefined ? {} : { code }),
      ...(requestId === undefined ? {} : { requestId }),
      ...(usage === undefined ? {} : { usage }),
      reserved,
      allowed: ALLOWED[kind].includes(label),
      ...(envelopeProblem === undefined ? {} : { envelopeProblem }),
    };
  }
}
