import { afterAll, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { NoScriptError, type RedisScripts, RedisUnavailableError } from "../../../src/limits/redis-client.ts";
import { adapters, REDIS_URL, testPrefix, testRedis } from "../../support/redis.ts";
import { startTcpProxy } from "../../support/tcp-proxy.ts";
import { waitFor } from "../../support/wait.ts";

const suite = (await testRedis("test/unit/limits/redis-client.test.ts")) ? describe : describe.skip;
const ECHO = "return {KEYS[1], ARGV[1], tonumber(ARGV[2]) * 2}";

suite.each(adapters)("RedisScripts over $name", ({ open }) => {
  const clients: RedisScripts[] = [];
  afterAll(() => {
    for (const c of clients) c.close();
  });
  const client = (url: string, timeoutMs?: number) => {
    const c = open(url, timeoutMs);
    clients.push(c);
    return c;
  };

  test("load gives the script's SHA-1; evalsha passes keys and arguments and returns the reply", async () => {
    const c = client(REDIS_URL);
    const sha = await c.load(ECHO);
    expect(sha).toBe(createHash("sha1").update(ECHO).digest("hex"));
    const key = `{${testPrefix()}:k}:req`;
    expect(await c.evalsha(sha, [key], ["x", "21"])).toEqual([key, "x", 42]);
  });

  test("a script the server does not hold is NoScriptError", async () => {
    const c = client(REDIS_URL);
    expect(await c.evalsha("0".repeat(40), [], []).catch((e: unknown) => e)).toBeInstanceOf(NoScriptError);
  });

  test("a port nobody listens on is RedisUnavailableError, every time", async () => {
    const server = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
    const port = server.port;
    server.stop(true);
    const c = client(`redis://127.0.0.1:${port}`);
    for (let i = 0; i < 2; i++) {
      const e = await c.load(ECHO).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(RedisUnavailableError);
      expect((e as RedisUnavailableError).reason).toBe("error");
    }
  });

  test("a server that stops answering times out; the client works again once it answers", async () => {
    const url = new URL(REDIS_URL);
    await using proxy = startTcpProxy({ hostname: url.hostname, port: Number(url.port || 6379) });
    const c = client(`redis://127.0.0.1:${proxy.port}`, 1000);
    const sha = await c.load(ECHO);
    proxy.freeze();
    const e = await c.evalsha(sha, ["k"], ["a", "1"]).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(RedisUnavailableError);
    expect((e as RedisUnavailableError).reason).toBe("timeout");
    proxy.thaw();
    const reply = await waitFor(() => c.evalsha(sha, ["k"], ["a", "1"]).catch(() => undefined), "an answer after thaw");
    expect(reply).toEqual(["k", "a", 2]);
  });

  test("a closed client refuses calls", async () => {
    const c = client(REDIS_URL);
    await c.load(ECHO);
    c.close();
    expect(await c.load(ECHO).catch((x: unknown) => x)).toBeInstanceOf(RedisUnavailableError);
  });
});
