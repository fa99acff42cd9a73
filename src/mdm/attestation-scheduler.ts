/**
 * When to ask an enrolled Mac for a fresh attestation, and the DeviceInformation requests themselves.
 * - `onProviderConnected(identityKey)` (the fleet calls it, part D) and each epoch boundary (for the keys
 *   connected then) schedule a request for the key's enrolment after a random delay (jitter), unless its
 *   stored chain is already of the current epoch or a request is already scheduled.
 * - A request: the enrolment's outstanding command (30 min) is re-pushed, never re-enqueued (NanoMDM's
 *   queue is FIFO with no clearing: a stale command would drain first); otherwise a new command (our own
 *   CommandUUID, DeviceAttestationNonce = the epoch nonce for this identity key) is recorded, then enqueued.
 *   An enqueue NanoMDM refuses (an enrolment it has no row for yet answers 500) is withdrawn and retried
 *   with exponential backoff and jitter.
 * - At most `maxInFlight` requests talk to NanoMDM at once, whatever the number of connections.
 * Trust never waits on this: the stored chain is re-checked at every connection (part D).
 */
import { randomUUID } from "node:crypto";
import type { Logger } from "../observability/logger.ts";
import type { MdmEnrolment, MdmStore } from "../store/mdm-types.ts";
import { deviceInformationCommand } from "./device-information.ts";
import { type NanoMdmClient, NanoMdmError } from "./nanomdm-client.ts";
import type { MdaNonces } from "./types.ts";

export type TimerHandle = number | ReturnType<typeof setTimeout>;
export interface SchedulerTimers {
  setTimeout(callback: () => void, ms: number): TimerHandle;
  clearTimeout(handle: TimerHandle): void;
}

const realTimers: SchedulerTimers = {
  setTimeout: (callback, ms) => {
    const t = setTimeout(callback, ms);
    t.unref?.();
    return t;
  },
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

export const COMMAND_LIFETIME_MS = 30 * 60_000;
/** The contract's epoch length (part A's MDA_EPOCH_MS, which `nonces.epoch` divides by): 7 days. */
export const MDA_EPOCH_MS = 7 * 86_400_000;

export interface AttestationSchedulerOptions {
  readonly store: MdmStore;
  readonly client: Pick<NanoMdmClient, "enqueue" | "push">;
  readonly nonces: MdaNonces;
  /** Unix ms (the epoch clock). */
  readonly now: () => number;
  readonly logger: Logger;
  readonly maxInFlight: number;
  /** Delay of a request after a connection: uniform in [0, connectJitterMs) (default 2 min). */
  readonly connectJitterMs?: number;
  /** Spread of the epoch boundary's requests (default 6 h). */
  readonly epochJitterMs?: number;
  /** Backoff of a refused enqueue: base, cap and attempts (default 30 s, 15 min, 8). */
  readonly retry?: { readonly baseMs: number; readonly maxMs: number; readonly attempts: number };
  readonly timers?: SchedulerTimers;
  readonly random?: () => number;
  readonly newUuid?: () => string;
}

/** What a connection led to. */
export type ConnectOutcome = "not_enrolled" | "current" | "scheduled" | "already_scheduled";
/** What one request did. */
export type RequestOutcome = "not_enrolled" | "current" | "enqueued" | "repushed" | "retry";

const b64 = (key: Uint8Array | string) => (typeof key === "string" ? key : Buffer.from(key).toString("base64"));

export class AttestationScheduler {
  private readonly timers: SchedulerTimers;
  private readonly random: () => number;
  private readonly newUuid: () => string;
  private readonly connectJitterMs: number;
  private readonly epochJitterMs: number;
  private readonly retry: { readonly baseMs: number; readonly maxMs: number; readonly attempts: number };
  /** Enrolment id -> its timer while a request waits (jitter or backoff); `running` while it runs. */
  private readonly scheduled = new Map<string, TimerHandle | "running">();
  private readonly attempts = new Map<string, number>();
  /** Identity keys (base64) connected now: the epoch boundary's requests. */
  private readonly connected = new Set<string>();
  private inFlight = 0;
  private readonly waiting: (() => void)[] = [];
  private epochTimer: TimerHandle | undefined;
  private settledWaiters: (() => void)[] = [];
  private stopped = false;

  constructor(private readonly options: AttestationSchedulerOptions) {
    this.timers = options.timers ?? realTimers;
    this.random = options.random ?? Math.random;
    this.newUuid = options.newUuid ?? randomUUID;
    this.connectJitterMs = options.connectJitterMs ?? 2 * 60_000;
    this.epochJitterMs = options.epochJitterMs ?? 6 * 3_600_000;
    this.retry = options.retry ?? { baseMs: 30_000, maxMs: 15 * 60_000, attempts: 8 };
    if (!(options.maxInFlight >= 1)) throw new RangeError("maxInFlight must be at least 1");
  }

  /** The fleet's entry point: an enrolled provider connected with this identity key (65-byte point or base64). */
  async onProviderConnected(identityKey: Uint8Array | string): Promise<ConnectOutcome> {
    const key = b64(identityKey);
    this.connected.add(key);
    const enrolment = await this.options.store.enrolments.byIdentityKey(key);
    if (enrolment?.state !== "enrolled") return "not_enrolled";
    if (await this.isCurrent(enrolment)) return "current";
    return this.schedule(enrolment.id, this.random() * this.connectJitterMs) ? "scheduled" : "already_scheduled";
  }

  /** The provider left: no epoch-boundary request for it (a scheduled one still runs). The fleet calls both. */
  onProviderDisconnected(identityKey: Uint8Array | string): void {
    this.connected.delete(b64(identityKey));
  }

  /** Arms the epoch-boundary timer (again after each boundary). */
  start(): this {
    if (this.stopped || this.epochTimer !== undefined) return this;
    const { nonces, now } = this.options;
    const epochMs = (nonces.epoch(now()) + 1) * MDA_EPOCH_MS - now();
    this.epochTimer = this.timers.setTimeout(
      () => {
        this.epochTimer = undefined;
        this.epochBoundary().catch(() => this.options.logger.warn("mdm epoch requests failed", { reason: "store" }));
        this.start();
      },
      Math.max(1_000, epochMs),
    );
    return this;
  }

  stop(): void {
    this.stopped = true;
    if (this.epochTimer !== undefined) this.timers.clearTimeout(this.epochTimer);
    for (const handle of this.scheduled.values()) if (handle !== "running") this.timers.clearTimeout(handle);
    this.scheduled.clear();
    this.notifySettled();
  }

  /** Requests waiting or running. */
  get pending(): number {
    return this.scheduled.size;
  }

  /** Resolves once no request waits or runs (tests). */
  settled(): Promise<void> {
    if (this.scheduled.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.settledWaiters.push(resolve));
  }

  /** Schedules a request for every connected key whose chain is not of the new epoch, spread by jitter. */
  async epochBoundary(): Promise<number> {
    let count = 0;
    for (const key of [...this.connected]) {
      const enrolment = await this.options.store.enrolments.byIdentityKey(key);
      if (enrolment?.state !== "enrolled" || (await this.isCurrent(enrolment))) continue;
      if (this.schedule(enrolment.id, this.random() * this.epochJitterMs)) count++;
    }
    return count;
  }

  /** One request now, under the concurrency cap (what a scheduled timer runs). */
  async request(enrolmentId: string): Promise<RequestOutcome> {
    await this.slot();
    try {
      return await this.requestNow(enrolmentId);
    } finally {
      this.release();
    }
  }

  private schedule(enrolmentId: string, delayMs: number): boolean {
    if (this.stopped || this.scheduled.has(enrolmentId)) return false;
    const handle = this.timers.setTimeout(() => void this.run(enrolmentId), Math.max(0, Math.floor(delayMs)));
    this.scheduled.set(enrolmentId, handle);
    return true;
  }

  private async run(enrolmentId: string): Promise<void> {
    this.scheduled.set(enrolmentId, "running");
    let outcome: RequestOutcome;
    try {
      outcome = await this.request(enrolmentId);
    } catch {
      this.options.logger.warn("mdm attestation request failed", { reason: "store" });
      outcome = "retry";
    }
    this.scheduled.delete(enrolmentId);
    if (outcome === "retry") {
      const attempt = (this.attempts.get(enrolmentId) ?? 0) + 1;
      if (attempt < this.retry.attempts) {
        this.attempts.set(enrolmentId, attempt);
        const backoff = Math.min(this.retry.maxMs, this.retry.baseMs * 2 ** (attempt - 1));
        this.schedule(enrolmentId, backoff * (0.5 + this.random() / 2));
      } else {
        this.attempts.delete(enrolmentId);
        this.options.logger.warn("mdm attestation request gave up", { count: attempt, reason: "nanomdm" });
      }
    } else {
      this.attempts.delete(enrolmentId);
    }
    if (this.scheduled.size === 0) this.notifySettled();
  }

  private async requestNow(enrolmentId: string): Promise<RequestOutcome> {
    const { store, client, nonces, now } = this.options;
    const enrolment = await store.enrolments.get(enrolmentId);
    if (enrolment?.state !== "enrolled" || enrolment.nanomdmId === null) return "not_enrolled";
    if (await this.isCurrent(enrolment)) return "current";
    const at = now();
    const outstanding = await store.commands.outstanding(enrolment.id, at);
    if (outstanding) return this.repush(enrolment.nanomdmId);
    const epoch = nonces.epoch(at);
    const command = { commandUuid: this.newUuid(), enrolmentId, epoch, issuedAt: at, expiresAt: at + COMMAND_LIFETIME_MS };
    const issued = await store.commands.issue(command, at);
    if (!issued) return "not_enrolled";
    if (!issued.created) return this.repush(enrolment.nanomdmId);
    const nonce = nonces.nonce(epoch, new Uint8Array(Buffer.from(enrolment.identityKey, "base64")));
    try {
      const result = await client.enqueue(enrolment.nanomdmId, deviceInformationCommand(command.commandUuid, nonce));
      if (result.enqueued) {
        if (!result.pushed) this.options.logger.info("mdm command queued without a push", { status: result.status });
        return "enqueued";
      }
      this.options.logger.info("mdm enqueue refused: retrying later", { status: result.status });
    } catch (e) {
      this.options.logger.warn("mdm enqueue failed: retrying later", { error_name: e instanceof NanoMdmError ? e.message : "error" });
    }
    await store.commands.withdraw(command.commandUuid);
    return "retry";
  }

  private async repush(nanomdmId: string): Promise<RequestOutcome> {
    try {
      const result = await this.options.client.push(nanomdmId);
      return result.pushed ? "repushed" : "retry";
    } catch {
      return "retry";
    }
  }

  /**
   * Nothing to ask this epoch: the stored chain is of this epoch, or was verified in it (a Mac returns its
   * cached leaf, of an earlier accepted epoch, for 7 days after a mint; asking again would only repeat it).
   */
  private async isCurrent(enrolment: MdmEnrolment): Promise<boolean> {
    const chain = await this.options.store.chains.get(enrolment.id);
    const epoch = this.options.nonces.epoch(this.options.now());
    return chain !== undefined && (chain.epoch >= epoch || this.options.nonces.epoch(chain.verifiedAt) >= epoch);
  }

  private slot(): Promise<void> {
    if (this.inFlight < this.options.maxInFlight) {
      this.inFlight++;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  private release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.inFlight--;
  }

  private notifySettled(): void {
    const waiters = this.settledWaiters;
    this.settledWaiters = [];
    for (const w of waiters) w();
  }
}
