/**
 * The provider tool's folder (src/provider/home.ts): where it is on each platform, credentials written
 * with mode 0600 (whatever the umask) and read back, clear errors for a damaged file; the live state
 * written off the event loop (StateWriter: the newest state wins).
 */
import { describe, expect, test } from "bun:test";
import { mkdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ConfigError } from "../../../src/config/settings.ts";
import { ensureHome, providerHome, readCredentials, writeCredentials } from "../../../src/provider/home.ts";
import { type RuntimeState, readState, StateWriter } from "../../../src/provider/runtime.ts";
import { tempDir } from "../../support/harness.ts";

describe("providerHome", () => {
  test("UMBRA_PROVIDER_HOME wins everywhere", () => {
    expect(providerHome({ UMBRA_PROVIDER_HOME: "/x/y", HOME: "/home/a" }, "darwin").dir).toBe("/x/y");
  });

  test("macOS: Application Support", () => {
    expect(providerHome({ HOME: "/Users/a" }, "darwin").credentialsFile).toBe(
      "/Users/a/Library/Application Support/umbra-provider/credentials.json",
    );
  });

  test("Linux: XDG_CONFIG_HOME, else ~/.config", () => {
    expect(providerHome({ HOME: "/home/a", XDG_CONFIG_HOME: "/cfg" }, "linux").dir).toBe("/cfg/umbra-provider");
    expect(providerHome({ HOME: "/home/a" }, "linux").dir).toBe("/home/a/.config/umbra-provider");
  });
});

describe("credentials", () => {
  test("written with mode 0600 in a 0700 folder, whatever the umask, and read back", () => {
    using dir = tempDir();
    const home = providerHome({ UMBRA_PROVIDER_HOME: join(dir.path, "home") });
    const old = process.umask(0o000);
    try {
      writeCredentials(home, { coordinator: "https://u.example", token: "prov_secret", accountId: "acct_1", createdAt: 5 });
    } finally {
      process.umask(old);
    }
    expect((statSync(home.credentialsFile).mode & 0o777).toString(8)).toBe("600");
    expect((statSync(home.dir).mode & 0o777).toString(8)).toBe("700");
    expect(readCredentials(home)).toEqual({
      credentials: { coordinator: "https://u.example", token: "prov_secret", accountId: "acct_1", createdAt: 5 },
      mode: 0o600,
    });
  });

  test("a second login replaces the first atomically", () => {
    using dir = tempDir();
    const home = providerHome({ UMBRA_PROVIDER_HOME: dir.path });
    writeCredentials(home, { coordinator: "https://a.example", token: "t1", accountId: "acct_1", createdAt: 1 });
    writeCredentials(home, { coordinator: "https://b.example", token: "t2", accountId: "acct_2", createdAt: 2 });
    expect(readCredentials(home)?.credentials.token).toBe("t2");
  });

  test("none stored: undefined", () => {
    using dir = tempDir();
    expect(readCredentials(providerHome({ UMBRA_PROVIDER_HOME: join(dir.path, "nothing") }))).toBeUndefined();
  });

  test.each([
    ["not JSON", "{", "is not valid JSON"],
    ["incomplete", '{"coordinator":"https://x"}', "is incomplete"],
  ])("%s: a ConfigError that says to log in again", (_name, text, message) => {
    using dir = tempDir();
    const home = providerHome({ UMBRA_PROVIDER_HOME: dir.path });
    mkdirSync(home.dir, { recursive: true });
    writeFileSync(home.credentialsFile, text);
    expect(() => readCredentials(home)).toThrow(ConfigError);
    expect(() => readCredentials(home)).toThrow(message);
  });
});

describe("the state file written off the event loop (StateWriter)", () => {
  const state = (active: number) => ({ ...sample, active, updated_at: active }) as RuntimeState;
  const sample = {
    version: "0.1.0",
    pid: 1,
    started_at: 0,
    updated_at: 0,
    coordinator: "http://127.0.0.1:1",
    phase: "connected",
    connected: true,
    provider_id: "prov_1",
    trust_level: "none",
    models: ["org/echo"],
    warm_models: ["org/echo"],
    engine: "echo",
    active: 0,
    max_concurrency: 4,
    requests_served: 0,
    tokens_served: 0,
    tokens_per_second: 0,
    last_challenge: null,
    schedule: { windows: [], open: true, next_change_at: null },
    detached: false,
    log_file: null,
  };

  test("the newest state is the one left in the file, mode 0644; writes that pile up are skipped, not queued", async () => {
    using dir = tempDir();
    const home = providerHome({ UMBRA_PROVIDER_HOME: join(dir.path, "home") });
    ensureHome(home);
    let failures = 0;
    const writer = new StateWriter(home, () => failures++);
    for (let i = 1; i <= 50; i++) writer.write(state(i));
    await writer.settled();
    expect(readState(home)?.active).toBe(50);
    expect(statSync(home.stateFile).mode & 0o777).toBe(0o644);
    expect(failures).toBe(0);
    // Settled with nothing in flight resolves at once; a later write lands too.
    await writer.settled();
    writer.write(state(51));
    await writer.settled();
    expect(readState(home)?.active).toBe(51);
    // Closed: the write in flight lands, a later one is not taken (the final state is written after).
    writer.write(state(52));
    await writer.close();
    expect(readState(home)?.active).toBe(52);
    writer.write(state(53));
    await writer.settled();
    expect(readState(home)?.active).toBe(52);
  });

  test("a write that fails is reported and the next one still lands", async () => {
    using dir = tempDir();
    const home = providerHome({ UMBRA_PROVIDER_HOME: join(dir.path, "missing") });
    let failures = 0;
    const writer = new StateWriter(home, () => failures++);
    writer.write(state(1)); // the folder does not exist yet
    await writer.settled();
    expect(failures).toBe(1);
    ensureHome(home);
    writer.write(state(2));
    await writer.settled();
    expect(readState(home)?.active).toBe(2);
  });
});
