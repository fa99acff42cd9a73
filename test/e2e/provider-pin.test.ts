/**
 * The provider tool against a coordinator that terminates TLS with a self-signed certificate (the image's
 * default: `serve --tls self-signed`), as real processes: without --coordinator-image it cannot connect
 * and says what to give; with the image's measurements.json it verifies the attestation, pins the TLS
 * key the report binds and serves; a measurements.json of another image, or development evidence without
 * --coordinator-evidence development, is refused before anything (the device token included) is sent.
 * `login --token` and `doctor` pin the same way.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { writeMeasurements } from "../support/measurements.ts";
import { BUN, type CoordinatorProcess, ROOT, startCoordinator } from "../support/processes.ts";

const MEASUREMENT = "ab".repeat(48);
const BUILD = "org/pin-build";

/** `umbra-provider ARGS` with its stderr collected; `waitFor` resolves with the first line matching. */
function provider(args: readonly string[], home: string) {
  const proc: Subprocess<"ignore", "pipe", "pipe"> = Bun.spawn([BUN, join(ROOT, "src/provider/main.ts"), ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", HOME: home, UMBRA_PROVIDER_HOME: home },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  let log = "";
  const waiters: { pattern: RegExp; resolve: (line: string) => void }[] = [];
  void (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of proc.stderr) {
      log += decoder.decode(chunk, { stream: true });
      for (const w of [...waiters]) {
        const line = log.split("\n").find((l) => w.pattern.test(l));
        if (line !== undefined) {
          waiters.splice(waiters.indexOf(w), 1);
          w.resolve(line);
        }
      }
    }
  })();
  return {
    proc,
    log: () => log,
    waitFor(pattern: RegExp, ms = 20_000): Promise<string> {
      return new Promise((resolve, reject) => {
        const line = log.split("\n").find((l) => pattern.test(l));
        if (line !== undefined) return resolve(line);
        const timer = setTimeout(() => reject(new Error(`no line matching ${pattern} within ${ms} ms:\n${log.slice(-3000)}`)), ms);
        waiters.push({
          pattern,
          resolve: (l) => {
            clearTimeout(timer);
            resolve(l);
          },
        });
      });
    },
    async [Symbol.asyncDispose]() {
      proc.kill("SIGKILL");
      await proc.exited;
    },
  };
}

let coordinator: CoordinatorProcess;
let token: string;
let apiKey: string;
let dir: string;
let published: string;
let otherImage: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "umbra-pin-"));
  coordinator = await startCoordinator({
    UMBRA_TLS: "self-signed",
    UMBRA_TLS_NAMES: "localhost",
    UMBRA_ATTESTATION: "dev",
    UMBRA_EXPECTED_MEASUREMENT: MEASUREMENT,
  });
  const seeded = await coordinator.seed([BUILD]);
  token = seeded.providerToken;
  apiKey = seeded.apiKey;
  published = writeMeasurements(
    dir,
    [
      { name: "other", measurement: "cd".repeat(48) },
      { name: "published", measurement: MEASUREMENT },
    ],
    "published.json",
  );
  otherImage = writeMeasurements(dir, [{ name: "other", measurement: "cd".repeat(48) }], "other.json");
});

afterAll(async () => {
  await coordinator?.[Symbol.asyncDispose]();
  rmSync(dir, { recursive: true, force: true });
});

const start = (extra: string[]) => [
  "start",
  "--coordinator",
  coordinator.url,
  "--token",
  token,
  "--engine",
  "echo",
  "--model",
  BUILD,
  "--log-level",
  "debug",
  ...extra,
];

const home = () => mkdtempSync(join(dir, "home-"));

describe("umbra-provider and a self-signed coordinator", () => {
  test("the coordinator serves https with a self-signed certificate", () => {
    expect(coordinator.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
  });

  test("without --coordinator-image: no connection, and the log says to pin from the attestation", async () => {
    await using p = provider(start([]), home());
    const line = await p.waitFor(/TLS with the coordinator failed/);
    expect(line).toContain("--coordinator-image");
    expect(p.log()).not.toContain('"msg":"connected to coordinator"');
  });

  test("with the image's measurements.json: verified, pinned, connected, and it serves a chat completion", async () => {
    await using p = provider(
      start(["--coordinator-image", published, "--coordinator-shape", "published", "--coordinator-evidence", "development"]),
      home(),
    );
    const verified = JSON.parse(await p.waitFor(/coordinator attestation verified/)) as Record<string, unknown>;
    expect(verified.shape).toBe("published");
    expect(verified.tls_spki_sha256).toMatch(/^[0-9a-f]{64}$/);
    await p.waitFor(/"msg":"connected to coordinator"/);

    const response = await fetch(`${coordinator.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ model: BUILD, messages: [{ role: "user", content: "pinned hello" }], max_tokens: 16 }),
      tls: { rejectUnauthorized: false },
    });
    const body = (await response.json()) as { choices: { message: { content: string } }[] };
    expect([response.status, (body.choices[0]?.message.content ?? "").includes("pinned hello")]).toEqual([200, true]);
  });

  test("another image's measurements.json: refused naming the measurement check, never connected", async () => {
    await using p = provider(start(["--coordinator-image", otherImage, "--coordinator-evidence", "development"]), home());
    const line = JSON.parse(await p.waitFor(/refusing the coordinator/)) as Record<string, unknown>;
    expect([line.level, line.check]).toEqual(["error", "measurement"]);
    await Bun.sleep(500);
    expect(p.log()).not.toContain('"msg":"connected to coordinator"');
    expect(p.log()).not.toContain("TLS with the coordinator failed");
  });

  test("development evidence without --coordinator-evidence development: refused at the signature chain", async () => {
    await using p = provider(start(["--coordinator-image", published]), home());
    const line = JSON.parse(await p.waitFor(/refusing the coordinator/)) as Record<string, unknown>;
    expect(line.check).toBe("signature_chain");
  });

  test("login --token pins the same way; without the image it cannot reach the coordinator", async () => {
    const pinned = home();
    await using ok = provider(
      [
        "login",
        "--coordinator",
        coordinator.url,
        "--token",
        token,
        "--coordinator-image",
        published,
        "--coordinator-evidence",
        "development",
      ],
      pinned,
    );
    const [code, stdout] = await Promise.all([ok.proc.exited, new Response(ok.proc.stdout).text()]);
    expect([code, stdout.includes("Coordinator attestation verified: shape published (DEVELOPMENT evidence); TLS key pinned.")]).toEqual([
      0,
      true,
    ]);

    await using refused = provider(
      [
        "login",
        "--coordinator",
        coordinator.url,
        "--token",
        token,
        "--coordinator-image",
        otherImage,
        "--coordinator-evidence",
        "development",
      ],
      home(),
    );
    expect(await refused.proc.exited).toBe(1);
    expect(refused.log()).toContain("refusing");

    await using bare = provider(["login", "--coordinator", coordinator.url, "--token", token], home());
    expect(await bare.proc.exited).toBe(1);
    expect(bare.log()).toContain("cannot reach the coordinator");
  });

  test("doctor: the coordinator check verifies the attestation and the token check goes over the pinned key", async () => {
    const args = [
      "doctor",
      "--trust",
      "none",
      "--json",
      "--coordinator",
      coordinator.url,
      "--token",
      token,
      "--engine",
      "echo",
      "--model",
      BUILD,
    ];
    await using ok = provider([...args, "--coordinator-image", published, "--coordinator-evidence", "development"], home());
    const report = JSON.parse(await new Response(ok.proc.stdout).text()) as {
      ready: boolean;
      checks: { id: string; status: string; detail: string }[];
    };
    const byId = new Map(report.checks.map((c) => [c.id, c]));
    expect([byId.get("coordinator")?.status, byId.get("device_token")?.status, byId.get("catalog")?.status]).toEqual([
      "pass",
      "pass",
      "pass",
    ]);
    expect(byId.get("coordinator")?.detail).toContain("attestation verified (shape published, DEVELOPMENT evidence), TLS key pinned");

    await using refused = provider([...args, "--coordinator-image", otherImage, "--coordinator-evidence", "development"], home());
    const bad = JSON.parse(await new Response(refused.proc.stdout).text()) as typeof report;
    const badById = new Map(bad.checks.map((c) => [c.id, c]));
    expect([bad.ready, badById.get("coordinator")?.status, badById.get("device_token")?.detail]).toEqual([
      false,
      "fail",
      `present (from --token); not verified: the coordinator's attestation did not pass`,
    ]);
    expect(badById.get("coordinator")?.detail).toContain("attestation check measurement failed");
  });
});
