/**
 * One replica's place in the cluster over one NATS connection: presence, digests, both sides of
 * forwarded dispatch. Presence is a subscription to `<prefix>.prov.<id>` per welcomed local session
 * (kept in step with the fleet's version every `syncMs`; a session that ends is unsubscribed, so a
 * forwarder gets "no responders" at once); the fleet digest leaves every `digestMs`, after a sync on
 * the same connection, so a replica learns of a provider only once the server routes to its owner; the
 * others' digests feed `remote` (RemoteFleet). `forward` sends an attempt to another replica's provider
 * (forwarder.ts); requests for local providers are served by `owner` (owner.ts). In production the
 * connection uses TLS and credentials: plaintext requests cross it (docs/security.md).
 */
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import type { TrustLevel } from "../../attestation/provider/levels.ts";
import type { Attempt } from "../fleet/attempt.ts";
import type { Fleet } from "../fleet/fleet.ts";
import type { Logger } from "../observability/logger.ts";
import type { Inference } from "../protocol/frames.ts";
import { describeFleet, encodeDigest } from "./digest.ts";
import { type ClusterLink, forward, type RemoteTarget } from "./forwarder.ts";
import { Owner } from "./owner.ts";
import { RemoteFleet } from "./remote-fleet.ts";
import { isToken, subjects } from "./wire.ts";

export interface ClusterNodeOptions {
  readonly nc: NatsConnection;
  readonly prefix: string;
  /** This replica's id (a subject token), unique in the cluster. */
  readonly replicaId: string;
  readonly fleet: Fleet;
  readonly minTrust: TrustLevel;
  readonly logger: Logger;
  readonly now: () => number;
  readonly keepaliveMs?: number;
  readonly missedKeepalives?: number;
  readonly digestMs?: number;
  readonly missedDigests?: number;
  readonly syncMs?: number;
}

export class ClusterNode {
  readonly remote: RemoteFleet;
  readonly owner: Owner;
  private readonly link: ClusterLink;
  private readonly presence = new Map<string, Subscription>();
  private readonly timers: ReturnType<typeof setInterval>[] = [];
  private digests: Subscription | undefined;
  private synced = -1;
  private seq = 0;
  private stopped = false;

  constructor(private readonly o: ClusterNodeOptions) {
    if (!isToken(o.replicaId) || !/^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(o.prefix)) {
      throw new RangeError("the replica id and subject prefix must be NATS subject tokens");
    }
    this.link = {
      nc: o.nc,
      prefix: o.prefix,
      keepaliveMs: o.keepaliveMs ?? 2000,
      missedKeepalives: o.missedKeepalives ?? 3,
      now: o.now,
      open: new Set(),
    };
    const digestMs = o.digestMs ?? 1000;
    this.remote = new RemoteFleet(o.replicaId, { digestMs, missedDigests: o.missedDigests ?? 3, minTrust: o.minTrust, now: o.now });
    this.owner = new Owner(this.link, o.fleet, o.logger);
  }

  /** Subscribes to the others' digests, then keeps presence and publishes digests until `stop()`. */
  start(): this {
    this.digests = this.o.nc.subscribe(subjects.allDigests(this.o.prefix), {
      callback: (err, msg) => {
        if (!err) this.remote.onDigest(msg.data);
      },
    });
    this.sync();
    this.publishDigest();
    const every = (ms: number, f: () => void) => {
      const t = setInterval(f, ms);
      t.unref?.();
      this.timers.push(t);
    };
    every(this.o.syncMs ?? 100, () => this.sync());
    every(this.o.digestMs ?? 1000, () => this.publishDigest());
    void this.watchConnection();
    return this;
  }

  /**
   * A dropped connection ends, at once, what crossed it: the other replicas are forgotten (no candidates
   * until their digests arrive again), forwarded attempts sent from here end `lost` (failover before
   * first content), and attempts served here for other replicas are cancelled (their forwarders fail
   * over too). The client reconnects by itself; presence subscriptions are restored with it.
   */
  private async watchConnection(): Promise<void> {
    try {
      for await (const status of this.o.nc.status()) {
        if (status.type !== "disconnect" || this.stopped) continue;
        this.o.logger.warn("cluster connection dropped: forwarded requests end, local providers only until it is back", {
          replica_id: this.o.replicaId,
        });
        this.remote.clear();
        for (const stream of [...(this.link.open ?? [])]) stream.disconnected();
        this.owner.stop();
      }
    } catch {
      // the connection closed for good
    }
  }

  get prefix(): string {
    return this.o.prefix;
  }

  /** Local provider ids this replica answers for now. */
  get present(): string[] {
    return [...this.presence.keys()];
  }

  /** Other replicas' providers of the build with a free slot at their last digest, best first; of `accountId` when given. */
  candidates(buildId: string, accountId?: string): RemoteTarget[] {
    return this.remote.candidates(buildId, accountId === undefined ? undefined : (c) => c.accountId === accountId);
  }

  /** True when a routable provider on another replica (of `accountId` when given) serves the build. */
  serves(buildId: string, accountId?: string): boolean {
    return accountId === undefined ? this.remote.capacity(buildId).routableProviders > 0 : this.remote.routableOf(buildId, accountId);
  }

  /** Sends one attempt to the replica that owns `target` (never throws: failures are its events). */
  forward(target: RemoteTarget, frame: Inference): Attempt {
    return forward(this.link, target, frame);
  }

  /** Brings the presence subscriptions in step with the fleet's welcomed sessions (now, and every `syncMs`). */
  sync(): void {
    const { fleet, nc, prefix } = this.o;
    if (fleet.version === this.synced) return;
    this.synced = fleet.version;
    const live = new Map(
      fleet
        .list()
        .filter((s) => s.ready && isToken(s.id))
        .map((s) => [s.id, s]),
    );
    for (const [id, sub] of this.presence) {
      if (live.has(id)) continue;
      try {
        sub.unsubscribe();
      } catch {
        // connection closed
      }
      this.presence.delete(id);
    }
    for (const [id, session] of live) {
      if (this.presence.has(id)) continue;
      const sub = nc.subscribe(subjects.provider(prefix, id), {
        callback: (err, msg) => {
          if (!err) this.owner.onRequest(session, msg.data, msg.reply || undefined);
        },
      });
      this.presence.set(id, sub);
    }
  }

  /** Publishes this replica's digest (all its pages). */
  publishDigest(): void {
    const { nc, prefix, replicaId, fleet, minTrust } = this.o;
    this.sync();
    this.remote.expire();
    try {
      const pages = encodeDigest(replicaId, this.seq++, describeFleet(fleet, minTrust), nc.info?.max_payload ?? 1024 * 1024);
      for (const page of pages) nc.publish(subjects.digest(prefix, replicaId), page);
    } catch {
      // connection closing
    }
  }

  /** Stops presence and digests and cancels the forwarded streams served here; the connection stays open. */
  stop(): void {
    this.stopped = true;
    for (const t of this.timers) clearInterval(t);
    this.timers.length = 0;
    for (const sub of this.presence.values()) sub.unsubscribe();
    this.presence.clear();
    this.digests?.unsubscribe();
    this.owner.stop();
  }
}
