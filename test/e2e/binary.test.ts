/**
 * The compiled binaries: two builds from the same sources are byte-identical, and the coordinator
 * binary serves the real routes (minified Elysia breaks some hooks; only a binary test catches that),
 * compiles tool schemas with Ajv (imported on first use, generating code at run time) and refuses, through its own SQLite, a database another coordinator holds, and a busy port.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../support/harness.ts";
import { startCoordinator } from "../support/processes.ts";

const ROOT = join(import.meta.dir, "../..");
const BUN = join(ROOT, "node_modules/.bin/bun");
// The same flags as the Makefile's BUILD_FLAGS.
const FLAGS = [
  "build",
  "--compile",
  "--minify",
  "--bytecode",
  "--format=esm",
  "--sourcemap=none",
  "--no-compile-autoload-dotenv",
  "--no-compile-autoload-bunfig",
];
const ADMIN = "binary-test-admin-token-0123456789abcdef";

const dirs = [tempDir("umbra-build-a-"), tempDir("umbra-build-b-")];
const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

async function build(entries: readonly string[], out: string): Promise<void> {
  const entry = entries.join(" ");
  const proc = Bun.spawn([BUN, ...FLAGS, ...entries.map((e) => join(ROOT, e)), "--outfile", out], {
    cwd: ROOT,
    stdout: "pipe",
    stderr: "pipe",
  });
  const code = await proc.exited;
  if (code !== 0) throw new Error(`build of ${entry} failed: ${await new Response(proc.stderr).text()}`);
}

// The four builds (two binaries, twice each) run at the same time: reproducible means the same bytes
// however the builds interleave.
beforeAll(async () => {
  await Promise.all(
    dirs.flatMap((dir) => [
      // As the Makefile: the WAL checkpoint worker is a second entry point of the coordinator.
      build(["src/coordinator/main.ts", "src/store/sqlite/checkpoint-worker.ts"], join(dir.path, "umbra-coordinator")),
      build(["src/provider/main.ts"], join(dir.path, "umbra-provider")),
    ]),
  );
}, 240_000);

afterAll(() => {
  for (const d of dirs) d[Symbol.dispose]();
});

describe("reproducible builds", () => {
  test.each(["umbra-coordinator", "umbra-provider"])("%s has the same SHA-256 twice", (name) => {
    const [a, b] = dirs.map((d) => sha256(join(d.path, name)));
    expect(a).toBe(b as string);
  });
});

describe("compiled coordinator", () => {
  test("serve: admin, consumer and public routes through the binary", async () => {
    const dir = dirs[0]!.path;
    const proc = Bun.spawn([join(dir, "umbra-coordinator"), "serve", "--listen", "127.0.0.1:0", "--db", join(dir, "umbra.db")], {
      env: { ...process.env, UMBRA_ADMIN_TOKEN: ADMIN, UMBRA_LOG_LEVEL: "info" },
      stdout: "pipe",
      stderr: "pipe",
    });
    try {
      // Wait for the "listening" log line, which carries the URL of the port the kernel picked.
      const reader = proc.stderr.getReader();
      let text = "";
      let url: string | undefined;
      while (url === undefined) {
        const { done, value } = await reader.read();
        if (done) throw new Error(`coordinator exited before listening: ${text}`);
        text += new TextDecoder().decode(value);
        url = /"url":"(http:\/\/[^"]+)"/.exec(text)?.[1];
      }
      const admin = (method: string, path: string, body?: unknown) =>
        fetch(`${url}/admin/v1${path}`, {
          method,
          headers: { authorization: `Bearer ${ADMIN}`, "content-type": "application/json" },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        }).then(async (r) => ({ status: r.status, body: (await r.json()) as Record<string, unknown> }));

      const account = await admin("POST", "/accounts", { name: "bin" });
      expect(account.status).toBe(200);
      expect((await admin("PUT", "/models/org/built", { quantization: "4bit" })).status).toBe(200);
      expect((await admin("PUT", "/aliases/org/alias", { build_id: "org/built" })).status).toBe(200);
      const key = await admin("POST", "/keys", { account_id: account.body.id });
      const apiKey = String(key.body.key);

      const models = await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${apiKey}` } });
      expect(models.status).toBe(200);
      expect(((await models.json()) as { data: { id: string }[] }).data.map((m) => m.id)).toEqual(["org/alias"]);

      const one = await fetch(`${url}/v1/models/org%2Falias`, { headers: { authorization: `Bearer ${apiKey}` } });
      expect(((await one.json()) as { id: string }).id).toBe("org/alias");

      // Tool schemas go through Ajv inside the binary: compiled (2020-12 and draft-07) or refused with 422.
      expect((await admin("POST", `/accounts/${account.body.id}/credit`, { amount_micro_usd: 1_000_000_000 })).status).toBe(200);
      const chat = async (parameters: unknown) => {
        const r = await fetch(`${url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
          body: JSON.stringify({
            model: "org/alias",
            messages: [
              { role: "user", content: [{ type: "text", text: "hi" }] },
              { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] },
              { role: "tool", tool_call_id: "c1", content: "done" },
            ],
            tools: [{ type: "function", function: { name: "f", parameters } }],
          }),
        });
        const error = ((await r.json()) as { error: { code: string; message: string } }).error;
        return [r.status, error.code, error.message];
      };
      expect(await chat({ $defs: { n: { type: "object", properties: { k: { $ref: "#/$defs/n" } } } }, $ref: "#/$defs/n" })).toEqual([
        503,
        "model_unavailable",
        expect.any(String),
      ]);
      expect(
        await chat({ $schema: "http://json-schema.org/draft-07/schema#", type: "object", properties: { a: { pattern: "^a+$" } } }),
      ).toEqual([503, "model_unavailable", expect.any(String)]);
      expect(await chat({ type: "string", pattern: "([" })).toEqual([
        422,
        "tool_schema_invalid",
        "'tools[0].function.parameters' holds a pattern that is not a valid regular expression",
      ]);
      expect(await chat({ $ref: "https://schemas.example/x.json" })).toEqual([
        422,
        "tool_schema_invalid",
        "'tools[0].function.parameters' has a $ref that does not resolve within the schema (remote references are never fetched)",
      ]);

      const unauth = await fetch(`${url}/v1/models`);
      expect([unauth.status, ((await unauth.json()) as { error: { type: string } }).error.type]).toEqual([401, "authentication_error"]);

      const badBody = await fetch(`${url}/admin/v1/accounts`, {
        method: "POST",
        headers: { authorization: `Bearer ${ADMIN}` },
        body: "{nope",
      });
      expect([badBody.status, ((await badBody.json()) as { error: { code: string } }).error.code]).toEqual([400, "invalid_json"]);

      const pricing = await fetch(`${url}/v1/pricing`);
      expect(((await pricing.json()) as { fallback_input_usd: string }).fallback_input_usd).toBe("$0.50");

      // Production on a machine without a TEE still serves, and says attestation is not available here.
      const attestation = await fetch(`${url}/v1/attestation`);
      expect([attestation.status, ((await attestation.json()) as { error: { code: string } }).error.code]).toEqual([
        503,
        "service_unavailable",
      ]);

      expect((await fetch(`${url}/healthz`)).status).toBe(200);
      expect(await (await fetch(`${url}/metrics`)).text()).toContain('route="/v1/models/*"');

      // The console's shell and hashed assets come from inside the binary (files embedded by the build).
      const shell = await fetch(`${url}/console/`);
      const script = /src="(\/console\/assets\/main\.[a-z0-9]+\.js)"/.exec(await shell.text())?.[1];
      const asset = await fetch(`${url}${script}`);
      expect({
        shell: shell.status,
        csp: shell.headers.get("content-security-policy")?.includes("frame-ancestors 'none'"),
        asset: asset.status,
        cache: asset.headers.get("cache-control"),
        bytes: (await asset.arrayBuffer()).byteLength > 10_000,
      }).toEqual({ shell: 200, csp: true, asset: 200, cache: "public, max-age=31536000, immutable", bytes: true });
      // The WAL checkpoint worker runs inside the binary (a missing entry point fails at once, logged).
      await Bun.sleep(1_200);
      proc.kill("SIGTERM");
      for (let r = await reader.read(); !r.done; r = await reader.read()) text += new TextDecoder().decode(r.value);
      expect(text).not.toContain("WAL checkpoint worker");
    } finally {
      proc.kill("SIGTERM");
      expect(await proc.exited).toBe(0);
    }
  }, 60_000);

  test("serve refuses production without an admin token, and never reads .env from its working directory", async () => {
    const dir = dirs[1]!.path;
    // A .env here would supply the token if the binary auto-loaded it (Bun's default): it must not.
    writeFileSync(join(dir, ".env"), `UMBRA_ADMIN_TOKEN=${"x".repeat(40)}\n`);
    const proc = Bun.spawn([join(dir, "umbra-coordinator"), "serve", "--listen", "127.0.0.1:0", "--db", join(dir, "x.db")], {
      cwd: dir,
      env: { PATH: process.env.PATH ?? "" },
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(await proc.exited).toBe(2);
    expect(await new Response(proc.stderr).text()).toContain("admin token");
  });

  test("a second serve on a database in use, and serve on a busy port, exit 1 with one line naming what is taken", async () => {
    const dir = dirs[1]!.path;
    const spawn = (db: string, listen: string, logLevel = "warn") =>
      Bun.spawn([join(dir, "umbra-coordinator"), "serve", "--listen", listen, "--db", join(dir, db)], {
        env: { PATH: process.env.PATH ?? "", UMBRA_ADMIN_TOKEN: ADMIN, UMBRA_LOG_LEVEL: logLevel },
        stdout: "pipe",
        stderr: "pipe",
      });
    const exited = async (proc: ReturnType<typeof spawn>) => {
      const [stdout, stderr, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
      return { code, stdout, stderr };
    };
    const first = spawn("held.db", "127.0.0.1:0", "info");
    try {
      // Its "listening" log line carries the port the kernel picked.
      const reader = first.stderr.getReader();
      let text = "";
      let port: string | undefined;
      while (port === undefined) {
        const { done, value } = await reader.read();
        if (done) throw new Error(`coordinator exited before listening: ${text}`);
        text += new TextDecoder().decode(value);
        port = /"url":"http:\/\/127\.0\.0\.1:(\d+)"/.exec(text)?.[1];
      }
      expect(await exited(spawn("held.db", "127.0.0.1:0"))).toEqual({
        code: 1,
        stdout: "",
        stderr: expect.stringMatching(
          new RegExp(
            `^umbra-coordinator: database ${join(dir, "held.db").replaceAll(".", "\\.")} is in use by another process \\(pid ${first.pid}: umbra-coordinator serve, started [^)]+\\); stop it first, or give this one another --db\\n$`,
          ),
        ),
      });
      expect(await exited(spawn("other.db", `127.0.0.1:${port}`))).toEqual({
        code: 1,
        stdout: "",
        stderr: `umbra-coordinator: cannot listen on 127.0.0.1:${port}: address already in use\n`,
      });
    } finally {
      first.kill("SIGTERM");
      expect(await first.exited).toBe(0);
    }
  }, 60_000);

  test("the compiled provider tool detaches itself, reports status and stops", async () => {
    await using coordinator = await startCoordinator();
    const { providerToken } = await coordinator.seed(["org/bin-model"]);
    using home = tempDir("umbra-provider-home-");
    const run = async (...args: string[]) => {
      const proc = Bun.spawn([join(dirs[0]!.path, "umbra-provider"), ...args], {
        env: { PATH: process.env.PATH ?? "", HOME: home.path, UMBRA_PROVIDER_HOME: home.path },
        stdout: "pipe",
        stderr: "pipe",
      });
      const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
      return { code, out, err };
    };
    const started = await run(
      "start",
      "--detach",
      "--coordinator",
      coordinator.url,
      "--token",
      providerToken,
      "--engine",
      "echo",
      "--model",
      "org/bin-model",
    );
    expect({ code: started.code, err: started.err }).toEqual({ code: 0, err: "" });
    expect(started.out).toContain("connected");
    const status = JSON.parse((await run("status", "--json")).out) as { running: boolean; state: { connected: boolean } };
    expect({ running: status.running, connected: status.state.connected }).toEqual({ running: true, connected: true });
    expect((await run("stop")).code).toBe(0);
    expect((await run("status")).code).toBe(3);
  }, 60_000);

  test("the provider tool compiles for macOS on Apple Silicon (make build): a Mach-O arm64 executable", async () => {
    using out = tempDir("umbra-build-darwin-");
    const file = join(out.path, "umbra-provider-darwin-arm64");
    const proc = Bun.spawn([BUN, ...FLAGS, "--target=bun-darwin-arm64", join(ROOT, "src/provider/main.ts"), "--outfile", file], {
      cwd: ROOT,
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(await proc.exited).toBe(0);
    const head = readFileSync(file).subarray(0, 8);
    // MH_MAGIC_64 (0xfeedfacf) and CPU_TYPE_ARM64 (0x0100000c), little-endian.
    expect([head.readUInt32LE(0), head.readUInt32LE(4)]).toEqual([0xfeedfacf, 0x0100000c]);
  }, 120_000);

  test("the provider binary answers --version", async () => {
    const proc = Bun.spawn([join(dirs[0]!.path, "umbra-provider"), "--version"], { stdout: "pipe" });
    expect(await proc.exited).toBe(0);
    expect((await new Response(proc.stdout).text()).trim()).toMatch(/^\d+\.\d+\.\d+$/);
  });
});
