/**
 * The NATS connection options of cluster mode (src/coordinator/cluster-link.ts): the servers' addresses
 * without credentials, the user the URLs name with the password setting (else the setting as a token),
 * TLS on request, the replica id in the connection name.
 */
import { expect, test } from "bun:test";
import type { ClusterConfig } from "../../../src/config/config.ts";
import { natsOptions } from "../../../src/coordinator/cluster-link.ts";

function cluster(natsServers: string[], extra: Partial<ClusterConfig> = {}): ClusterConfig {
  return {
    redisUrl: "redis://127.0.0.1:6379",
    redisClient: "bun",
    redisTimeoutMs: 100,
    holdTtlMs: 30_000,
    natsServers,
    natsTls: false,
    prefix: "p",
    replicaId: "r1",
    ...extra,
  };
}

test.each([
  [cluster(["nats://127.0.0.1:4222/"]), { servers: ["127.0.0.1:4222"], name: "umbra-r1" }],
  [
    cluster(["nats://a:4222/", "nats://[::1]:4223/"], { natsPassword: "t0k" }),
    { servers: ["a:4222", "[::1]:4223"], name: "umbra-r1", token: "t0k" },
  ],
  [
    cluster(["tls://umbra@nats.internal:4222/"], { natsPassword: "p@ss", natsTls: true }),
    { servers: ["nats.internal:4222"], name: "umbra-r1", tls: {}, user: "umbra", pass: "p@ss" },
  ],
  [cluster(["nats://dev:s%40cret@127.0.0.1:4222/"]), { servers: ["127.0.0.1:4222"], name: "umbra-r1", user: "dev", pass: "s@cret" }],
])("servers %#", (config, expected) => {
  expect(natsOptions(config)).toEqual(expected);
});
