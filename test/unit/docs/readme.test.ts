/**
 * The README's commands as a newcomer copies them: every curl is silent (`-s`, no progress meter in the
 * stream), here and in the `make dev` banner; every model a provider is told to serve (`--model`, the
 * config file's "model") is a build of the demo catalog, never an alias (an alias gets no requests).
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { DEMO_CATALOG, devBanner } from "../../../src/coordinator/dev.ts";

const readme = readFileSync(join(import.meta.dir, "..", "..", "..", "README.md"), "utf8");
/** The text of every fenced code block, line continuations joined. */
const code = [...readme.matchAll(/```[a-z]*\n([\s\S]*?)```/g)].map((m) => (m[1] ?? "").replace(/\\\n\s*/g, " ")).join("\n");

/** curl invocations without -s among their short flags. */
const noisyCurls = (text: string) =>
  [...text.matchAll(/\bcurl((?:\s+-[A-Za-z]+)*)\s/g)].filter((m) => !/-[A-Za-z]*s/.test(m[1] ?? "")).map((m) => m[0].trim());

describe("README commands", () => {
  test("every curl is silent (-s), in the README and in the make dev banner", () => {
    const banner = devBanner("http://127.0.0.1:8080", { accountId: "acct_1", apiKey: "sk-umbra-x", providerToken: "pt" }, "adm");
    expect({ readme: noisyCurls(code), banner: noisyCurls(banner.replace(/\\\n\s*/g, " ")) }).toEqual({ readme: [], banner: [] });
  });

  test("providers are told to serve builds, not aliases", () => {
    const builds = new Set<string>(DEMO_CATALOG.map((m) => m.id));
    const served = [
      ...[...code.replace(/#.*$/gm, "").matchAll(/--model\s+([^\s=]+)/g)].map((m) => m[1] ?? ""),
      ...[...readme.matchAll(/"model":\s*\[([^\]]*)\]/g)].flatMap((m) => [...(m[1] ?? "").matchAll(/"([^"=]+)/g)].map((x) => x[1] ?? "")),
    ];
    expect(served.length).toBeGreaterThan(3);
    expect(served.filter((id) => !builds.has(id))).toEqual([]);
  });
});
