/**
 * RedisScripts over Bun's built-in Bun.RedisClient. No offline queue and no automatic reconnection (they
 * hang or drop commands while Redis is away): each call connects first when the client is not connected
 * (one dial at a time), and a call that times out closes the connection so that the next one dials again.
 */
import { RedisClient } from "bun";
import { REDIS_TIMEOUT_MS, type RedisScripts, withTimeout } from "./redis-client.ts";

export function bunRedisScripts(url: string, options: { readonly timeoutMs?: number } = {}): RedisScripts {
  const timeoutMs = options.timeoutMs ?? REDIS_TIMEOUT_MS;
  const client = new RedisClient(url, { autoReconnect: false, enableOfflineQueue: false, connectionTimeout: timeoutMs });
  let dialing: Promise<void> | undefined;
  let closed = false;
  const connected = (): Promise<void> => {
    if (closed) return Promise.reject(new Error("client closed"));
    if (client.connected) return Promise.resolve();
    dialing ??= client.connect().finally(() => {
      dialing = undefined;
    });
    return dialing;
  };
  const drop = () => {
    if (client.connected) client.close();
  };
  const call = <T>(op: () => Promise<T>): Promise<T> => withTimeout(connected().then(op), timeoutMs, drop);
  return {
    load: (script) => call(async () => String(await client.script("LOAD", script))),
    evalsha: (sha, keys, args) => call(() => client.evalsha(sha, keys.length, ...keys, ...args)),
    close: () => {
      closed = true;
      client.close();
    },
  };
}
