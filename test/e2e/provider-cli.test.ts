/**
 * `umbra-provider start` as a real process against the fake coordinator: it connects and serves; SIGTERM
 * drains (the running attempt completes, then exit 0); bad flags exit 2 naming the flag; a refused
 * device token exits 1 with a clear message.
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CLOSE } from "../../src/protocol/frames.ts";
import { FakeCoordinator } from "../support/fake-coordinator.ts";
import { waitFor } from "../support/wait.ts";

const ROOT = join(import.meta.dir, "../..");
const BUN = join(ROOT, "node_modules/.bin/bun");
const MAIN = join(ROOT, "src/provider/main.ts");
/** A clean environment: no UMBRA_PROVIDER_* from the machine running the tests, a folder of its own. */
const env = () => ({
  PATH: process.env.PATH ?? "/usr/bin:/bin",
  HOME: process.env.HOME ?? "/tmp",
  UMBRA_PROVIDER_HOME: mkdtempSync(join(tmpdir(), "umbra-provider-home-")),
});

function spawnProvider(args: readonly string[]) {
  const proc = Bun.spawn([BUN, MAIN, "start", ...args], { cwd: ROOT, env: env(), stdout: "pipe", stderr: "pipe" });
  const stderr = new Response(proc.stderr).text();
  return { proc, stderr };
}

const startArgs = (fake: FakeCoordinator, token = "device-token") => [
  "--coordinator",
  fake.url,
  "--token",
  token,
  "--engine",
  "echo",
  "--model",
  "org/echo",
  "--echo-tokens-per-second",
  "10",
];

describe("umbra-provider start", () => {
  test("connects, serves, and on SIGTERM finishes the running attempt, closes with 1000 and exits 0", async () => {
    await using fake = new FakeCoordinator();
    const { proc, stderr } = spawnProvider(startArgs(fake));
    try {
      await waitFor(() => fake.ofType("heartbeat").length > 0, "the provider to connect");
      expect(fake.ofType("hello")[0]).toMatchObject({ engine: "echo", models: [{ build_id: "org/echo" }], max_concurrency: 8 });
      const words = "one two three four five six seven eight";
      fake.send({
        type: "inference",
        request_id: "req_cli",
        attempt: 0,
        model: "org/echo",
        first_content_deadline_ms: 30_000,
        request: { messages: [{ role: "user", content: words }], max_tokens: 100 },
      });
      await waitFor(() => fake.framesFor("req_cli").some((f) => f.type === "chunk"), "first chunk");
      proc.kill("SIGTERM");
      const draining = await waitFor(() => fake.ofType("heartbeat").find((h) => h.status === "draining"), "draining heartbeat");
      expect(draining.active).toBe(1);
      expect(await proc.exited).toBe(0);
      const frames = fake.framesFor("req_cli");
      expect(frames.at(-1)).toEqual({
        type: "complete",
        request_id: "req_cli",
        attempt: 0,
        seq: 8,
        finish_reason: "stop",
        usage: { prompt_tokens: 12, completion_tokens: 8 },
      });
      expect(frames.flatMap((f) => (f.type === "chunk" ? [f.delta.content] : [])).join("")).toBe(words);
      await waitFor(() => fake.closes[0], "close");
      expect(fake.closes[0]?.code).toBe(CLOSE.normal);
      const logs = (await stderr).trim().split("\n");
      expect(logs.map((l) => (JSON.parse(l) as { msg: string }).msg)).toContain("connected to coordinator");
    } finally {
      proc.kill("SIGKILL");
    }
  });

  test("a refused device token exits 1 with a clear message", async () => {
    await using fake = new FakeCoordinator({ token: "the-right-token" });
    const { proc, stderr } = spawnProvider(startArgs(fake, "a-wrong-token"));
    expect(await proc.exited).toBe(1);
    expect(await stderr).toContain("umbra-provider: the coordinator refused the device token");
    expect(fake.connections).toBe(1);
  });

  test.each([
    ["an unknown flag", ["--bogus", "1"], "--bogus"],
    [
      "a bad number",
      ["--coordinator", "http://127.0.0.1:1", "--token", "t", "--engine", "echo", "--model", "m", "--max-concurrency", "many"],
      "--max-concurrency",
    ],
    ["a missing required flag", ["--token", "t", "--engine", "echo", "--model", "m"], "--coordinator is required"],
    [
      "openai without upstream",
      ["--coordinator", "http://127.0.0.1:1", "--token", "t", "--engine", "openai", "--model", "m"],
      "--upstream",
    ],
  ])("%s exits 2 with a message naming the flag", async (_, args, flag) => {
    const { proc, stderr } = spawnProvider(args);
    expect(await proc.exited).toBe(2);
    expect(await stderr).toContain(flag);
  });
});
