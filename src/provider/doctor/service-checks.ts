/**
 * The checks of what the provider talks to: its engine, the coordinator (pinned from its attestation
 * with --coordinator-image) and the clock against the coordinator's. Every level needs them (ok).
 */
import { CoordinatorRefused, type PinnedCoordinator } from "../coordinator-pin.ts";
import { type Context, defineCheck, type Health, outcome, SERVICE_NEEDS, type Settings } from "./check.ts";
import { messageOf, within } from "./probe.ts";

/** echo passes (development engine); openai: GET {upstream}/models must list every model's upstream name. */
export const engine = defineCheck({
  id: "engine",
  title: "Engine",
  needs: SERVICE_NEEDS,
  async run({ probe, timeouts, engine, upstream, models }) {
    if (engine === undefined)
      return outcome("skip", "no engine given", "give --engine echo (development) or --engine openai --upstream URL");
    if (models.length === 0) return outcome("fail", "no --model given", "name the models to serve: --model BUILD[=UPSTREAM_NAME]");
    if (engine === "echo") return outcome("pass", "echo: development engine (echoes the prompt; not for production)");
    const example = "e.g. --upstream http://127.0.0.1:11434/v1";
    if (upstream === undefined) return outcome("fail", "--upstream is required with --engine openai", example);
    let base: string;
    try {
      const url = new URL(upstream);
      if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error("not http");
      base = `${url.protocol}//${url.host}${url.pathname.replace(/\/+$/, "")}`;
    } catch {
      return outcome("fail", `--upstream '${upstream.slice(0, 200)}' is not an http(s) URL`, example);
    }
    const url = `${base}/models`;
    let listed: Set<string>;
    try {
      listed = await within(timeouts.networkMs, async (signal) => {
        const response = await probe.fetch(url, { signal });
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        const body = (await response.json()) as { data?: { id?: unknown }[] };
        return new Set((body.data ?? []).flatMap((m) => (typeof m?.id === "string" ? [m.id] : [])));
      });
    } catch (error) {
      return outcome("fail", `${url}: ${messageOf(error)}`, "start the runtime (e.g. ollama serve, mlx_lm.server) and check --upstream");
    }
    const missing = models.filter((m) => !listed.has(m.upstreamName)).map((m) => m.upstreamName);
    if (missing.length > 0) {
      return outcome(
        "fail",
        `${url} does not list ${missing.join(", ")}`,
        "load the models in the runtime, or map --model BUILD=UPSTREAM_NAME to a name it lists",
      );
    }
    return outcome("pass", `openai at ${base} serves ${models.map((m) => m.upstreamName).join(", ")}`);
  },
});

/** Starts verifying the coordinator's attestation (--coordinator-image): undefined without an image or URL. */
export function pinOf({ expectation, coordinator, probe, timeouts }: Settings): Promise<PinnedCoordinator> | undefined {
  if (expectation === undefined || coordinator.base === undefined) return undefined;
  const base = coordinator.base;
  const pinned = within(timeouts.networkMs * 3, () => probe.pinCoordinator(base, expectation));
  pinned.catch(() => undefined);
  return pinned;
}

/**
 * GET {coordinator}/healthz over the pinned TLS key when there is one (a refused attestation fails,
 * naming the check, and nothing more is sent); plain http only for loopback hosts.
 */
export async function reachCoordinator({ probe, timeouts, coordinator, pinned }: Omit<Context, "health">): Promise<Health> {
  if (coordinator.base === undefined) {
    const problem = coordinator.problem ?? { detail: "no coordinator", fix: "" };
    return { outcome: outcome("fail", problem.detail, problem.fix) };
  }
  let pin: PinnedCoordinator | undefined;
  if (pinned !== undefined) {
    try {
      pin = await pinned;
    } catch (error) {
      const refused = error instanceof CoordinatorRefused;
      return {
        outcome: outcome(
          "fail",
          refused ? `refused: ${messageOf(error)}` : `cannot verify its attestation: ${messageOf(error)}`,
          !refused
            ? "check the URL and this machine's network"
            : error.check === "document"
              ? "the coordinator shows no attestation: it must run in its SEV-SNP VM (ask its operator)"
              : "the coordinator does not run the published image: check --coordinator-image (and --coordinator-shape) against the operator's release",
        ),
      };
    }
  }
  const url = `${coordinator.base}/healthz`;
  const sentAt = probe.now();
  try {
    const response = await within(timeouts.networkMs, (signal) =>
      probe.fetch(url, { signal, redirect: "manual", ...(pin ? { tls: pin.tls } : {}) }),
    );
    const receivedAt = probe.now();
    await response.body?.cancel();
    if (response.status !== 200) {
      return {
        outcome: outcome("fail", `${url} answered HTTP ${response.status}`, "check --coordinator: the base URL of an Umbra coordinator"),
      };
    }
    const attested = pin
      ? `; attestation verified (shape ${pin.shape ?? "?"}${pin.development ? ", DEVELOPMENT evidence" : ""}), TLS key pinned`
      : "";
    return {
      outcome: outcome("pass", `${coordinator.base} is up (${Math.round(receivedAt - sentAt)} ms)${attested}`),
      reached: { sentAt, receivedAt, date: response.headers.get("date") },
    };
  } catch (error) {
    const message = messageOf(error);
    const untrusted = !pin && /certificate|TLS|self[- ]signed/i.test(message);
    return {
      outcome: outcome(
        "fail",
        `cannot reach ${url}: ${message}`,
        untrusted
          ? "a coordinator with a self-signed certificate is trusted through its attestation: give --coordinator-image with the image's measurements.json"
          : "check the URL and this machine's network",
      ),
    };
  }
}

/** The coordinator answers /healthz (reachCoordinator, started once for this check and the clock's). */
export const coordinator = defineCheck({
  id: "coordinator",
  title: "Coordinator",
  needs: SERVICE_NEEDS,
  run: async ({ health }) => (await health).outcome,
});

/** The /healthz Date header (whole seconds) against the round trip's midpoint: <= 5 s pass, <= 60 s warn. */
export const clock = defineCheck({
  id: "clock",
  title: "Clock",
  needs: SERVICE_NEEDS,
  async run({ health }) {
    const { reached } = await health;
    const fix =
      "attestation evidence must be within two minutes of the coordinator's clock; enable automatic time (macOS: System Settings > General > Date & Time; Linux: timedatectl set-ntp true)";
    if (!reached) return outcome("skip", "needs an answer from the coordinator");
    const date = reached.date === null ? Number.NaN : Date.parse(reached.date);
    if (Number.isNaN(date)) return outcome("warn", "the coordinator sent no usable Date header; skew not measured", fix);
    // The header has whole seconds: the coordinator's clock read somewhere in [date, date + 1 s).
    const skewMs = (reached.sentAt + reached.receivedAt) / 2 - (date + 500);
    const seconds = Math.abs(skewMs) / 1000;
    const detail = `${seconds.toFixed(1)} s ${skewMs >= 0 ? "ahead of" : "behind"} the coordinator`;
    if (seconds <= 5) return outcome("pass", detail);
    return outcome(seconds <= 60 ? "warn" : "fail", detail, fix);
  },
});
