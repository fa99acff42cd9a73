import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigError } from "../../../src/config/config.ts";
import { loadProviderConfig, parseProviderFlags, readConfigFile } from "../../../src/provider/config.ts";
import { tempDir } from "../../support/harness.ts";

const BASE = ["--coordinator", "https://coord.example", "--token", "tok_123", "--engine", "echo", "--model", "org/echo"];
const load = (argv: readonly string[], env: Record<string, string> = {}) => loadProviderConfig(parseProviderFlags(argv), env);

describe("loadProviderConfig", () => {
  test("defaults", () => {
    expect(load(BASE)).toEqual({
      connectUrl: "wss://coord.example/v1/provider/connect",
      token: "tok_123",
      engine: "echo",
      models: [{ buildId: "org/echo", upstreamName: "org/echo" }],
      maxConcurrency: 8,
      echoTokensPerSecond: 0,
      echoFirstTokenDelayMs: 0,
      drainTimeoutMs: 120_000,
      logLevel: "info",
      devAttestation: false,
      schedule: [],
    });
  });

  test("the result and its model list are frozen", () => {
    const c = load(BASE);
    expect([Object.isFrozen(c), Object.isFrozen(c.models), Object.isFrozen(c.models[0])]).toEqual([true, true, true]);
  });

  test("openai engine: upstream, repeated models with upstream names, every numeric flag", () => {
    const c = load([
      "--coordinator",
      "https://coord.example/base/",
      "--token",
      "t",
      "--engine",
      "openai",
      "--upstream",
      "http://127.0.0.1:11434/v1/",
      "--model",
      "org/llama-3-8b-q4=llama3:8b",
      "--model",
      "org/qwen",
      "--max-concurrency",
      "2",
      "--drain-timeout-ms",
      "0",
      "--log-level",
      "debug",
    ]);
    expect(c).toEqual({
      connectUrl: "wss://coord.example/base/v1/provider/connect",
      token: "t",
      engine: "openai",
      upstream: "http://127.0.0.1:11434/v1",
      models: [
        { buildId: "org/llama-3-8b-q4", upstreamName: "llama3:8b" },
        { buildId: "org/qwen", upstreamName: "org/qwen" },
      ],
      maxConcurrency: 2,
      echoTokensPerSecond: 0,
      echoFirstTokenDelayMs: 0,
      drainTimeoutMs: 0,
      logLevel: "debug",
      devAttestation: false,
      schedule: [],
    });
  });

  test("every flag has an environment twin; the model list is comma-separated", () => {
    const c = loadProviderConfig(
      {},
      {
        UMBRA_PROVIDER_COORDINATOR: "http://localhost:8080",
        UMBRA_PROVIDER_TOKEN: "env-token",
        UMBRA_PROVIDER_ENGINE: "echo",
        UMBRA_PROVIDER_MODEL: "a/b, c/d",
        UMBRA_PROVIDER_MAX_CONCURRENCY: "3",
        UMBRA_PROVIDER_ECHO_TOKENS_PER_SECOND: "40",
        UMBRA_PROVIDER_ECHO_FIRST_TOKEN_DELAY_MS: "250",
        UMBRA_PROVIDER_DRAIN_TIMEOUT_MS: "5000",
        UMBRA_PROVIDER_LOG_LEVEL: "warn",
      },
    );
    expect(c).toEqual({
      connectUrl: "ws://localhost:8080/v1/provider/connect",
      token: "env-token",
      engine: "echo",
      models: [
        { buildId: "a/b", upstreamName: "a/b" },
        { buildId: "c/d", upstreamName: "c/d" },
      ],
      maxConcurrency: 3,
      echoTokensPerSecond: 40,
      echoFirstTokenDelayMs: 250,
      drainTimeoutMs: 5000,
      logLevel: "warn",
      devAttestation: false,
      schedule: [],
    });
  });

  test("a flag beats its environment twin", () => {
    const c = load([...BASE, "--max-concurrency", "5"], { UMBRA_PROVIDER_MAX_CONCURRENCY: "9", UMBRA_PROVIDER_MODEL: "x/y" });
    expect([c.maxConcurrency, c.models.map((m) => m.buildId)]).toEqual([5, ["org/echo"]]);
  });

  test("the token comes from UMBRA_PROVIDER_TOKEN_FILE", () => {
    using dir = tempDir();
    const file = join(dir.path, "token");
    writeFileSync(file, "file-token\n");
    const argv = BASE.filter((_, i) => i !== 2 && i !== 3);
    expect(load(argv, { UMBRA_PROVIDER_TOKEN_FILE: file }).token).toBe("file-token");
    expect(() => load(argv, { UMBRA_PROVIDER_TOKEN_FILE: join(dir.path, "missing") })).toThrow("UMBRA_PROVIDER_TOKEN_FILE");
  });

  test.each([
    ["https://c.example", "wss://c.example/v1/provider/connect"],
    ["wss://c.example:8443", "wss://c.example:8443/v1/provider/connect"],
    ["http://127.0.0.1:9000/", "ws://127.0.0.1:9000/v1/provider/connect"],
    ["ws://[::1]:9000", "ws://[::1]:9000/v1/provider/connect"],
    ["https://c.example/v1/provider/connect", "wss://c.example/v1/provider/connect"],
  ])("coordinator %s -> %s", (coordinator, url) => {
    expect(load(["--coordinator", coordinator, ...BASE.slice(2)]).connectUrl).toBe(url);
  });

  describe("invalid values name their flag", () => {
    const without = (flag: string) => {
      const i = BASE.indexOf(flag);
      return [...BASE.slice(0, i), ...BASE.slice(i + 2)];
    };
    test.each([
      ["missing coordinator", without("--coordinator"), "--coordinator is required"],
      ["missing token", without("--token"), "--token is required"],
      ["missing engine", without("--engine"), "--engine is required"],
      ["missing model", without("--model"), "--model is required"],
      ["unknown engine", [...BASE, "--engine", "llama"], "--engine: 'llama'"],
      ["openai without upstream", [...BASE, "--engine", "openai"], "--upstream is required"],
      ["upstream with echo", [...BASE, "--upstream", "http://127.0.0.1:1/v1"], "--upstream does not apply"],
      ["upstream not http", [...BASE, "--engine", "openai", "--upstream", "ftp://x/v1"], "--upstream"],
      ["coordinator not a URL", [...BASE, "--coordinator", "coord"], "--coordinator: 'coord' is not a URL"],
      ["coordinator scheme", [...BASE, "--coordinator", "ftp://c.example"], "--coordinator"],
      ["plaintext to a remote host", [...BASE, "--coordinator", "http://c.example"], "--coordinator: plaintext"],
      ["credentials in the URL", [...BASE, "--coordinator", "https://u:p@c.example"], "--coordinator: credentials"],
      ["token with a space", [...BASE, "--token", "a b"], "--token"],
      ["zero concurrency", [...BASE, "--max-concurrency", "0"], "--max-concurrency"],
      ["huge concurrency", [...BASE, "--max-concurrency", "5000"], "--max-concurrency"],
      ["fractional rate", [...BASE, "--echo-tokens-per-second", "1.5"], "--echo-tokens-per-second"],
      ["negative delay", [...BASE, "--echo-first-token-delay-ms", "-1"], "--echo-first-token-delay-ms"],
      ["drain timeout text", [...BASE, "--drain-timeout-ms", "soon"], "--drain-timeout-ms"],
      ["log level", [...BASE, "--log-level", "verbose"], "--log-level"],
      ["duplicate model", [...BASE, "--model", "org/echo"], "--model: build 'org/echo' is given twice"],
      ["empty upstream name", [...BASE, "--model", "org/x="], "--model"],
      ["model with a space", [...BASE, "--model", "org x"], "--model"],
    ])("%s", (_, argv, message) => {
      expect(() => load(argv)).toThrow(message);
      expect(() => load(argv)).toThrow(ConfigError);
    });
  });
});

describe("parseProviderFlags", () => {
  test("an unknown flag is a ConfigError naming it", () => {
    expect(() => parseProviderFlags(["--no-such-flag"])).toThrow("--no-such-flag");
    expect(() => parseProviderFlags(["--no-such-flag"])).toThrow(ConfigError);
  });

  test("a positional argument is refused", () => {
    expect(() => parseProviderFlags(["extra"])).toThrow("unexpected argument 'extra'");
  });

  test("--model repeats", () => {
    expect(parseProviderFlags(["--model", "a", "--model", "b=c"])).toEqual({ model: ["a", "b=c"] });
  });
});

describe("the config file and the stored login", () => {
  const withFile = (
    text: string,
    argv: readonly string[],
    env: Record<string, string> = {},
    login?: { coordinator: string; token: string },
  ) => {
    using dir = tempDir();
    const path = join(dir.path, "config.json");
    writeFileSync(path, text);
    const file = readConfigFile(path, true);
    return loadProviderConfig(parseProviderFlags(argv), env, { ...(file ? { file } : {}), ...(login ? { login } : {}) });
  };
  const LOGIN = { coordinator: "https://coord.example", token: "tok_stored" };

  test("settings by flag name; lists as arrays; numbers as numbers; login supplies coordinator and token", () => {
    const c = withFile(
      JSON.stringify({
        engine: "openai",
        upstream: "http://127.0.0.1:11434/v1",
        model: ["org/a=a:latest", "org/b"],
        "max-concurrency": 3,
        schedule: ["mon-fri 22:00-07:00"],
      }),
      [],
      {},
      LOGIN,
    );
    expect({
      url: c.connectUrl,
      token: c.token,
      engine: c.engine,
      models: c.models.length,
      max: c.maxConcurrency,
      schedule: c.schedule,
    }).toEqual({
      url: "wss://coord.example/v1/provider/connect",
      token: "tok_stored",
      engine: "openai",
      models: 2,
      max: 3,
      schedule: ["mon-fri 22:00-07:00"],
    });
  });

  test("precedence: flag > environment > file > login", () => {
    const file = JSON.stringify({ engine: "echo", model: "org/file", "max-concurrency": 3, coordinator: "https://file.example" });
    expect(withFile(file, ["--max-concurrency", "5", "--token", "t"], { UMBRA_PROVIDER_MAX_CONCURRENCY: "4" }, LOGIN).maxConcurrency).toBe(
      5,
    );
    // The file names another coordinator than the login's: the stored token is not sent there.
    expect(() => withFile(file, [], {}, LOGIN)).toThrow("--token is required");
    expect(withFile(file, [], { UMBRA_PROVIDER_MAX_CONCURRENCY: "4", UMBRA_PROVIDER_TOKEN: "t" }, LOGIN).maxConcurrency).toBe(4);
    expect(withFile(file, ["--model", "org/flag", "--token", "t"]).models.map((m) => m.buildId)).toEqual(["org/flag"]);
    expect(withFile(file, ["--token", "t"]).connectUrl).toBe("wss://file.example/v1/provider/connect");
  });

  test("the stored token is never sent to another coordinator", () => {
    const file = JSON.stringify({ engine: "echo", model: "org/m" });
    expect(withFile(file, ["--coordinator", "https://coord.example:443/"], {}, LOGIN).token).toBe("tok_stored");
    expect(() => withFile(file, ["--coordinator", "https://other.example"], {}, LOGIN)).toThrow("--token is required");
  });

  test("a login for another coordinator: the message names both and both ways out", () => {
    const file = JSON.stringify({ engine: "echo", model: "org/m" });
    const login = { coordinator: "http://127.0.0.1:8080", token: "tok_stored" };
    expect(() => withFile(file, ["--coordinator", "http://localhost:8080"], {}, login)).toThrow(
      new ConfigError(
        "--token is required: the stored login is for http://127.0.0.1:8080, not http://localhost:8080; run 'umbra-provider login --coordinator http://localhost:8080' or use --coordinator http://127.0.0.1:8080",
      ),
    );
  });

  test("without a login, --coordinator and --token say how to get them", () => {
    expect(() => withFile(JSON.stringify({ engine: "echo", model: "org/m" }), [])).toThrow("run 'umbra-provider login' first");
  });

  test("a missing file is fine unless named; a named one must exist", () => {
    using dir = tempDir();
    expect(readConfigFile(join(dir.path, "none.json"), false)).toBeUndefined();
    expect(() => readConfigFile(join(dir.path, "none.json"), true)).toThrow("--config: cannot read");
  });

  test.each([
    ["not JSON", "{", "is not valid JSON"],
    ["an array", "[]", "must hold a JSON object"],
    ["an unknown key", '{"modell": "x"}', "unknown setting 'modell'"],
    ["the token", '{"token": "x"}', "does not belong in the config file"],
    ["a list where one value goes", '{"engine": ["echo"]}', "'engine' must be a string"],
    ["a bad list", '{"model": [1]}', "'model' must be a string or an array of strings"],
    ["a bad window", '{"engine": "echo", "model": "m", "schedule": "weekdays 9-5"}', "--schedule"],
  ])("refuses %s", (_name, text, message) => {
    expect(() => withFile(text, ["--token", "t", "--coordinator", "https://c.example"])).toThrow(message);
  });
});
