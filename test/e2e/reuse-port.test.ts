/**
 * --reuse-port: two coordinator processes on one machine share one port (SO_REUSEPORT), each answering
 * some of the new connections (told apart by their sealing keys, made per process); a coordinator
 * without it is refused on a port another holds, even one bound with it.
 */
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { tempDir } from "../support/harness.ts";
import { runCoordinator, startCoordinator } from "../support/processes.ts";

/** The sealing key of the process that answered a new connection. */
async function sealingKey(url: string): Promise<string> {
  const response = await fetch(`${url}/v1/attestation`, { headers: { connection: "close" } });
  return ((await response.json()) as { sealing_public_key: string }).sealing_public_key;
}

describe("--reuse-port", () => {
  test("two coordinators with it share one port; the kernel spreads connections over both", async () => {
    await using first = await startCoordinator({ UMBRA_REUSE_PORT: "on" });
    const port = new URL(first.url).port;
    await using second = await startCoordinator({ UMBRA_REUSE_PORT: "on" }, { listen: `127.0.0.1:${port}` });
    expect(second.url).toBe(first.url);
    // Each new connection lands on either (a hash of its source port): 64 tries miss one with odds 2^-63.
    const seen = new Set<string>();
    for (let i = 0; i < 64 && seen.size < 2; i++) seen.add(await sealingKey(first.url));
    expect(seen.size).toBe(2);
  }, 60_000);

  test("without it, a port another coordinator holds refuses the start", async () => {
    await using first = await startCoordinator({ UMBRA_REUSE_PORT: "on" });
    using dir = tempDir();
    const port = new URL(first.url).port;
    const run = await runCoordinator(["serve", "--listen", `127.0.0.1:${port}`, "--db", join(dir.path, "umbra.db")], {
      env: { UMBRA_MODE: "development", UMBRA_ADMIN_TOKEN: "x".repeat(40) },
    });
    expect(run).toEqual({ code: 1, stdout: "", stderr: `umbra-coordinator: cannot listen on 127.0.0.1:${port}: address already in use\n` });
  }, 60_000);
});
