/**
 * The provider fleet: live sessions indexed by model build, liveness eviction, capacity figures for
 * /v1/models, and candidate ordering for the scheduler.
 *
 * Routable = said hello, not draining, trust at or above the routing floor. Candidates for a build are
 * routable sessions serving it with a free slot, ordered: warm first, then least loaded (active /
 * max concurrency), then fastest recent first content. A session silent for longer than the liveness
 * timeout is ended (its attempts fail over). The admission bounds (`refusal`) count every session from
 * its socket's open (before hello) to its end. `version` moves on every change the public list shows
 * (welcome, end of a welcomed session, trust withdrawn, raised or lapsed); the list (public-list.ts) is
 * rebuilt only then. With a device trust (MDM mode), each attested session's identity key is announced on
 * welcome and end, and re-vouched when a chain is stored for it (`revouch`), its chain lapses, or, for a
 * self_signed one, every `revouchMs` (a chain stored through another replica).
 */
import { randomBytes } from "node:crypto";
import { meetsTrustFloor, type ProviderAttestation, summarizeAttestation, type TrustLevel } from "../../attestation/provider/levels.ts";
import type { Logger } from "../observability/logger.ts";
import { CLOSE } from "../protocol/frames.ts";
import { FleetLoad } from "./fleet-load.ts";
import type { FleetView, ModelCapacity } from "./fleet-view.ts";
import {
  type PublicListQuery,
  type PublicListSource,
  type PublicProviderAttestation,
  PublicProviderList,
  publicEntry,
} from "./public-list.ts";
import { ProviderSession, type SessionIdentity, type SessionSettings, type SessionTransport } from "./session.ts";
import type { DeviceTrustSource } from "./session-trust.ts";

export interface FleetOptions extends SessionSettings {
  readonly deviceTrust?: DeviceTrustSource;
  readonly minTrust: TrustLevel;
  /** Sessions open at once per device token, counting those not yet welcomed. */
  readonly maxSessionsPerToken: number;
  readonly logger: Logger;
  readonly now: () => number;
}

/** Sessions not yet welcomed (before hello, or verifying evidence), over all device tokens. */
export const MAX_PENDING_SESSIONS = 1024;

interface Waiter {
  readonly wake: () => void;
}

export class Fleet implements FleetView {
  private readonly sessions = new Map<string, ProviderSession>();
  private readonly byBuild = new Map<string, Set<ProviderSession>>();
  /** Requests waiting for a free slot, per build, first come first served. */
  private readonly waiters = new Map<string, Waiter[]>();
  private sweeper: ReturnType<typeof setInterval> | undefined;
  /** Open sessions per device token id, welcomed or not. */
  private readonly perToken = new Map<string, number>();
  /** Ids of sessions not yet welcomed. */
  private readonly pending = new Set<string>();
  private changes = 0;
  private revouchedAt = 0;
  /** The other replicas' public entries (cluster mode), listed after this replica's own. */
  private remotePublic: PublicListSource | undefined;
  private readonly publicList = new PublicProviderList({
    version: () => this.changes + (this.remotePublic?.version() ?? 0),
    entries: () => {
      const own = this.publicAttestations();
      if (this.remotePublic === undefined) return own;
      const ids = new Set(own.map((e) => e.provider_id));
      return [...own, ...this.remotePublic.entries().filter((e) => !ids.has(e.provider_id))];
    },
  });

  /** The attempts running over every session (FleetLoad), given to each session with the options. */
  private readonly load = new FleetLoad();
  private readonly sessionSettings: SessionSettings;

  constructor(private readonly options: FleetOptions) {
    this.sessionSettings = { ...options, load: this.load };
  }

  /** Attempts assigned and not yet released over every session (FleetLoad). */
  get runningAttempts(): number {
    return this.load.running;
  }

  /** Starts liveness eviction; `stop()` ends it. */
  start(): this {
    this.sweeper ??= setInterval(() => this.sweep(), Math.max(50, Math.floor(this.options.heartbeatIntervalMs / 2)));
    this.sweeper.unref?.();
    return this;
  }

  stop(): void {
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = undefined;
    for (const s of [...this.sessions.values()]) s.terminate(CLOSE.goingAway, "coordinator shutting down");
  }

  /**
   * Why a new connection with this device token would be refused now (a fixed phrase), or undefined.
   * Checked before the upgrade (HTTP 429) and again by `connect` (close 4029), which alone counts.
   */
  refusal(tokenId: string): string | undefined {
    const open = this.perToken.get(tokenId) ?? 0;
    if (open >= this.options.maxSessionsPerToken) {
      return `this device token already has ${open} open sessions (the limit is ${this.options.maxSessionsPerToken})`;
    }
    if (this.pending.size >= MAX_PENDING_SESSIONS) return "too many provider connections are waiting for welcome";
    return undefined;
  }

  /**
   * A new connection: the session waits for hello. Beyond the admission bounds (`refusal`) the
   * connection is closed with 4029 and no session is made (undefined).
   */
  connect(transport: SessionTransport, identity: SessionIdentity): ProviderSession | undefined {
    const refused = this.refusal(identity.tokenId);
    if (refused !== undefined) {
      this.options.logger.debug("provider connection refused", { account_id: identity.accountId, reason: refused });
      try {
        transport.close(CLOSE.tooManySessions, refused);
      } catch {
        // already gone
      }
      return undefined;
    }
    const id = `prov_${randomBytes(9).toString("base64url")}`;
    const session = new ProviderSession(
      id,
      identity,
      transport,
      {
        onReady: (s) => {
          this.pending.delete(s.id);
          this.changes++;
          const key = s.attestation?.identityKey?.point;
          if (key !== undefined && s.trust !== "none") this.options.deviceTrust?.connected(key);
          for (const build of s.models.keys()) {
            let set = this.byBuild.get(build);
            if (!set) {
              set = new Set();
              this.byBuild.set(build, set);
            }
            set.add(s);
            this.wakeOne(build);
          }
        },
        onSlotFreed: (s) => {
          for (const build of s.models.keys()) this.wakeOne(build);
        },
        onClosed: (s) => {
          this.sessions.delete(s.id);
          const key = s.attestation?.identityKey?.point;
          if (key !== undefined && this.pending.has(s.id) === false) this.options.deviceTrust?.disconnected(key);
          if (!this.pending.delete(s.id)) this.changes++;
          const open = (this.perToken.get(s.identity.tokenId) ?? 1) - 1;
          if (open > 0) this.perToken.set(s.identity.tokenId, open);
          else this.perToken.delete(s.identity.tokenId);
          for (const build of s.models.keys()) {
            const set = this.byBuild.get(build);
            set?.delete(s);
            if (set?.size === 0) this.byBuild.delete(build);
          }
        },
        onTrustChanged: () => {
          this.changes++;
        },
        onVouchLapsed: (s) => this.refreshVouch(s),
      },
      this.sessionSettings,
      this.options.logger,
      this.options.now,
    );
    this.sessions.set(id, session);
    this.pending.add(id);
    this.perToken.set(identity.tokenId, (this.perToken.get(identity.tokenId) ?? 0) + 1);
    return session;
  }

  /** Open sessions with this device token, welcomed or not. */
  sessionsOfToken(tokenId: string): number {
    return this.perToken.get(tokenId) ?? 0;
  }

  /** Sessions not yet welcomed. */
  get pendingCount(): number {
    return this.pending.size;
  }

  /** Ends, at once, every session opened with this device token (it was revoked). */
  disconnectToken(tokenId: string): void {
    for (const s of [...this.sessions.values()]) {
      if (s.identity.tokenId === tokenId) s.terminate(CLOSE.unauthorized, "device token revoked");
    }
  }

  /** Ends the sessions whose device token `isLive` no longer accepts (revoked by another process, or expired). */
  async revalidateTokens(isLive: (tokenId: string) => Promise<boolean>): Promise<void> {
    const ids = new Set([...this.sessions.values()].map((s) => s.identity.tokenId));
    for (const id of ids) if (!(await isLive(id))) this.disconnectToken(id);
  }

  /** A chain was stored for this identity key (65-byte point): its live sessions are re-vouched. */
  revouch(identityKey: Uint8Array): void {
    const id = Buffer.from(identityKey);
    for (const s of this.sessions.values()) {
      const point = s.attestation?.identityKey?.point;
      if (s.ready && point !== undefined && id.equals(point)) this.refreshVouch(s);
    }
  }

  private refreshVouch(s: ProviderSession): void {
    const point = s.attestation?.identityKey?.point;
    const source = this.options.deviceTrust;
    if (point === undefined || source === undefined) return;
    source.vouch(point).then(
      (vouch) => s.vouch(vouch),
      () => undefined,
    );
  }

  /** Requests waiting for a slot on this build. */
  waiting(buildId: string): number {
    return this.waiters.get(buildId)?.length ?? 0;
  }

  /**
   * Waits until a slot may be free for the build (a provider released one or joined), at most `ms`.
   * Resolves true when woken, false on timeout or abort. The caller re-checks the candidates: a woken
   * request that finds no slot (another took it) waits again.
   */
  waitForSlot(buildId: string, ms: number, signal: AbortSignal): Promise<boolean> {
    if (ms <= 0 || signal.aborted) return Promise.resolve(false);
    return new Promise((resolve) => {
      let list = this.waiters.get(buildId);
      if (!list) {
        list = [];
        this.waiters.set(buildId, list);
      }
      const finish = (woken: boolean) => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        const current = this.waiters.get(buildId);
        const i = current ? current.indexOf(waiter) : -1;
        if (current && i >= 0) {
          current.splice(i, 1);
          if (current.length === 0) this.waiters.delete(buildId);
        }
        resolve(woken);
      };
      const waiter: Waiter = { wake: () => finish(true) };
      const onAbort = () => finish(false);
      const timer = setTimeout(() => finish(false), ms);
      signal.addEventListener("abort", onAbort, { once: true });
      list.push(waiter);
    });
  }

  private wakeOne(buildId: string): void {
    this.waiters.get(buildId)?.[0]?.wake();
  }

  /** Builds that the account's own live, routable providers serve (self-route catalog). */
  buildsOf(accountId: string): Set<string> {
    const out = new Set<string>();
    for (const s of this.sessions.values()) {
      if (s.identity.accountId === accountId && this.routable(s)) for (const b of s.models.keys()) out.add(b);
    }
    return out;
  }

  /**
   * Ends sessions that were silent past the liveness timeout (and those that never said hello), and
   * those whose device token expired (as a revoked token's: close 4001), and runs the others'
   * challenge schedules.
   */
  sweep(): void {
    const now = this.options.now();
    const cutoff = now - this.options.livenessTimeoutMs;
    for (const s of [...this.sessions.values()]) {
      if (s.lastSeen < cutoff) s.terminate(CLOSE.timeout, "no heartbeat within the liveness timeout");
      else if (s.identity.tokenExpiresAt !== null && s.identity.tokenExpiresAt <= now)
        s.terminate(CLOSE.unauthorized, "device token expired");
      else s.pollChallenges();
    }
    const source = this.options.deviceTrust;
    if (source === undefined || now - this.revouchedAt < source.revouchMs) return;
    this.revouchedAt = now;
    for (const s of this.sessions.values()) if (s.ready && s.trust === "self_signed") this.refreshVouch(s);
  }

  private routable(s: ProviderSession): boolean {
    return s.ready && !s.draining && meetsTrustFloor(s.trust, this.options.minTrust);
  }

  /** True when at least one live session (routable or not) serves the build. */
  serves(buildId: string): boolean {
    return (this.byBuild.get(buildId)?.size ?? 0) > 0;
  }

  /** True when a routable session serves the build, free slot or not. */
  hasRoutable(buildId: string, accept?: (s: ProviderSession) => boolean): boolean {
    for (const s of this.byBuild.get(buildId) ?? []) if (this.routable(s) && (!accept || accept(s))) return true;
    return false;
  }

  /** Routable sessions for the build with a free slot, best first; `accept` filters further. */
  candidates(buildId: string, accept?: (s: ProviderSession) => boolean): ProviderSession[] {
    const out: ProviderSession[] = [];
    for (const s of this.byBuild.get(buildId) ?? []) {
      if (this.routable(s) && s.freeSlots > 0 && (!accept || accept(s))) out.push(s);
    }
    if (out.length > 1) {
      out.sort((a, b) => {
        const warm = Number(b.warm.has(buildId)) - Number(a.warm.has(buildId));
        if (warm !== 0) return warm;
        const load = a.active / a.maxConcurrency - b.active / b.maxConcurrency;
        if (load !== 0) return load;
        return (a.firstContentMs ?? 0) - (b.firstContentMs ?? 0);
      });
    }
    return out;
  }

  capacity(buildId: string): ModelCapacity {
    let providerCount = 0;
    let routable = 0;
    let warm = 0;
    let canAccept = false;
    const verified: ProviderAttestation[] = [];
    for (const s of this.byBuild.get(buildId) ?? []) {
      if (!s.ready) continue;
      providerCount++;
      if (s.attestation) verified.push(s.attestation);
      if (s.warm.has(buildId)) warm++;
      if (this.routable(s)) {
        routable++;
        if (s.freeSlots > 0) canAccept = true;
      }
    }
    // Attestation figures come from verified evidence only (attestation/: summarizeAttestation).
    const summary = summarizeAttestation(verified);
    return {
      providerCount,
      attestedProviders: summary.attestedProviders,
      routableProviders: routable,
      warmProviders: warm,
      canAccept,
      trustLevel: summary.trustLevel,
      ...(summary.attestation ? { attestation: summary.attestation } : {}),
    };
  }

  /**
   * What anyone may know about the connected providers' attestation (GET /v1/providers/attestation):
   * welcomed sessions at or above the routing floor, with public keys, verified trust level and posture,
   * models. Never accounts, tokens or serial numbers. Unsorted; the public list sorts and caches.
   */
  publicAttestations(): PublicProviderAttestation[] {
    const out: PublicProviderAttestation[] = [];
    for (const s of this.sessions.values()) {
      if (s.ready && meetsTrustFloor(s.trust, this.options.minTrust)) out.push(publicEntry(s));
    }
    return out;
  }

  /**
   * Cluster mode: GET /v1/providers/attestation lists the other replicas' providers too (`source`, whose
   * version moves when they change); a provider id this replica holds itself is listed once, as its own.
   */
  showRemote(source: PublicListSource): void {
    this.remotePublic = source;
    this.changes++;
  }

  /** One page of the public list as JSON, from the list built at the current version. */
  publicPage(query: PublicListQuery): string {
    return this.publicList.page(query);
  }

  /** Moves on every change the public list shows. */
  get version(): number {
    return this.changes;
  }

  /** How many times the public list was built (tests: once per change that was read). */
  get publicListBuilds(): number {
    return this.publicList.builds;
  }

  get size(): number {
    return this.sessions.size;
  }

  /** Sessions for tests and status pages. */
  list(): ProviderSession[] {
    return [...this.sessions.values()];
  }
}
