/**
 * The machine's NATS for the cluster tests: UMBRA_TEST_NATS_URL (default nats://127.0.0.1:4222).
 * `testNats(file)` says once, in one line, when no server answers (the suites then skip); `natsPrefix()`
 * is a subject prefix of the test's own; `replicas(n)` makes in-process replicas, each with its own
 * connection, Fleet and ClusterNode, and plaintext fake provider sessions driven by hand.
 */
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { NO_EVIDENCE } from "../../attestation/provider/levels.ts";
import { ClusterNode } from "../../src/cluster/node.ts";
import { Fleet } from "../../src/fleet/fleet.ts";
import type { ProviderSession, SessionTransport } from "../../src/fleet/session.ts";
import type { CoordinatorFrame } from "../../src/protocol/frames.ts";
import { parseCoordinatorFrame } from "../../src/protocol/parse.ts";
import { recordingLogger } from "./logs.ts";
import { waitFor } from "./wait.ts";

export const NATS_URL = process.env.UMBRA_TEST_NATS_URL ?? "nats://127.0.0.1:4222";

let answer: Promise<boolean> | undefined;

/** Whether NATS accepts a connection within 2 s; when it does not, prints why the suite in `file` skips. */
export function testNats(file: string): Promise<boolean> {
  answer ??= connect({ servers: NATS_URL, timeout: 2000, reconnect: false }).then(
    async (nc) => {
      await nc.close();
      return true;
    },
    () => false,
  );
  return answer.then((ok) => {
    if (!ok) console.warn(`SKIPPED ${file}: no NATS server answers at ${NATS_URL} (set UMBRA_TEST_NATS_URL)`);
    return ok;
  });
}

export function natsPrefix(): string {
  return `umbra-test-${crypto.randomUUID().replaceAll("-", "")}`;
}

export function natsConnect(servers = NATS_URL, reconnect = false): Promise<NatsConnection> {
  return connect({ servers, timeout: 2000, reconnect, ...(reconnect ? { reconnectTimeWait: 100, maxReconnectAttempts: -1 } : {}) });
}

/** A provider session whose frames the test reads (`frames`) and answers (`session.onFrame`). */
export interface FakeProvider {
  readonly session: ProviderSession;
  readonly frames: CoordinatorFrame[];
}

export interface Replica {
  readonly id: string;
  readonly nc: NatsConnection;
  readonly fleet: Fleet;
  readonly node: ClusterNode;
  provider(build: string, maxConcurrency?: number): Promise<FakeProvider>;
}

export interface Timing {
  readonly keepaliveMs: number;
  readonly digestMs: number;
}

/** A replica on its own NATS connection (stop it with `close`); `via` another address (a proxy), reconnecting. */
export async function replica(
  id: string,
  prefix: string,
  timing: Timing = { keepaliveMs: 100, digestMs: 100 },
  via?: string,
): Promise<Replica> {
  const logger = recordingLogger([]);
  const fleet = new Fleet({
    minTrust: "none",
    maxSessionsPerToken: 100,
    heartbeatIntervalMs: 60_000,
    livenessTimeoutMs: 120_000,
    requireSealed: false,
    refuseUntrusted: false,
    modelWarnings: async () => [],
    assess: async () => NO_EVIDENCE,
    challenge: async () => undefined,
    logger,
    now: Date.now,
  });
  const nc = await natsConnect(via ?? NATS_URL, via !== undefined);
  const node = new ClusterNode({
    nc,
    prefix,
    replicaId: id,
    fleet,
    minTrust: "none",
    logger,
    now: Date.now,
    ...timing,
    syncMs: 10,
  }).start();
  const provider = async (build: string, maxConcurrency = 4): Promise<FakeProvider> => {
    const frames: CoordinatorFrame[] = [];
    const transport: SessionTransport = {
      send: (text) => {
        const f = parseCoordinatorFrame(text);
        if (f.type !== "welcome") frames.push(f);
      },
      close: () => {},
    };
    const session = fleet.connect(transport, { accountId: `acct_${id}`, tokenId: `tok_${id}`, tokenExpiresAt: null });
    if (!session) throw new Error("refused");
    const hello = { type: "hello", protocol_versions: [2], provider_version: "t", engine: "fake", models: [{ build_id: build }] };
    session.onFrame(JSON.stringify({ ...hello, max_concurrency: maxConcurrency }));
    await waitFor(() => session.ready && node.present.includes(session.id), "provider welcomed and present");
    // The server has the subscription once a flush returns (a digest, sent after it, gives the same order).
    await nc.flush();
    return { session, frames };
  };
  return { id, nc, fleet, node, provider };
}

/** Stops a replica and closes its connection. */
export async function close(r: Replica): Promise<void> {
  r.node.stop();
  r.fleet.stop();
  if (!r.nc.isClosed()) await r.nc.close();
}
