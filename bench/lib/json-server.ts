/** A helper process that prints one JSON line `{"url": ...}` once listening (bench/mock-upstream.ts). */
import { join } from "node:path";
import type { Subprocess } from "bun";
import { BUN, ROOT } from "../../test/support/processes.ts";

/** Spawns `path` (from the repository's root) with `env` added; resolves with its URL once it printed it. */
export async function startJsonServer(
  path: string,
  env: Record<string, string> = {},
): Promise<{ url: string; proc: Subprocess<"ignore", "pipe", "inherit"> } & AsyncDisposable> {
  const proc = Bun.spawn([BUN, join(ROOT, path)], { stdout: "pipe", stderr: "inherit", env: { ...process.env, ...env } });
  const { value } = await proc.stdout.getReader().read();
  const { url } = JSON.parse(new TextDecoder().decode(value)) as { url: string };
  return {
    url,
    proc,
    async [Symbol.asyncDispose]() {
      proc.kill("SIGKILL");
      await proc.exited;
    },
  };
}
