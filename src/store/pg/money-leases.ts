/**
 * Balance leases: a replica holds part of a hot key's money as one hold row of its own
 * (migrations/0008_money_leases.sql) and admits that key's requests against it in memory, with no round
 * trip and no hold row per request; their settlements charge the lease row, batched. A key is hot after
 * `hotCount` admissions within `hotWindowMs`; a lease asks for `depth` x the request's amount (at most
 * 1/`share` of the room it draws on), is topped up below half of that, given back whole when idle
 * `idleMs`, and follows the replica's holds: renewed with them, swept when the replica dies, its requests
 * stopped when it is lost (hold-deadlines.ts). Money in a lease never makes a request elsewhere fail:
 * before a 402 the authority recalls the account's leases (this replica's at once, the others' over the
 * cluster), which give back what no request uses and take no lease on that account for `coolMs`. Leases
 * are taken only while `enabled()` (the cluster connection is up, so recalls reach this replica).
 */
import { randomUUID } from "node:crypto";
import type { Sql } from "postgres";
import type { HoldDeadlines } from "./hold-deadlines.ts";

export interface LeaseOptions {
  readonly hotCount?: number;
  readonly hotWindowMs?: number;
  readonly depth?: number;
  readonly share?: number;
  readonly idleMs?: number;
  readonly coolMs?: number;
  /** Whether leases may be taken now; never unless given (or set by `enableWhen`). */
  readonly enabled?: () => boolean;
}

export interface LeaseRequest {
  readonly requestId: string;
  readonly accountId: string;
  readonly keyId: string | null;
  readonly amount: number;
}

interface Lease {
  readonly id: string;
  readonly slot: string;
  readonly accountId: string;
  readonly keyId: string | null;
  /** What the row holds as far as this replica knows (never more than the row). */
  granted: number;
  /** Admitted here and not sent for settlement. */
  inUse: number;
  /** Charges sent for settlement and not answered. */
  charging: number;
  /** What it asks to hold. */
  readonly target: number;
  /** Admits requests (false before its grant, once lost, recalled or closing). */
  live: boolean;
  /** A grant, top-up or return in flight. */
  busy: boolean;
  /** Resolves when the call in flight (busy) is answered. */
  done: Promise<void>;
  lastUse: number;
  readonly requests: Set<string>;
}

/** A request admitted on a lease, until its settlement is answered. */
export interface LeasedRequest {
  readonly leaseId: string;
  readonly amount: number;
}

const free = (l: Lease) => l.granted - l.inUse - l.charging;

export class Leases {
  private readonly bySlot = new Map<string, Lease>();
  private readonly byId = new Map<string, Lease>();
  private readonly admitted = new Map<string, { lease: Lease; amount: number; charge: number | undefined }>();
  private readonly demand = new Map<string, number[]>();
  private readonly cool = new Map<string, number>();
  private readonly prefix: string;
  private seq = 0;
  private readonly o: Required<Omit<LeaseOptions, "enabled">> & { enabled: () => boolean };
  private timer: ReturnType<typeof setInterval> | undefined;
  private closed = false;

  constructor(
    private readonly client: Sql,
    private readonly replica: string,
    private readonly ttlMs: number,
    private readonly deadlines: HoldDeadlines,
    /** Lease ids whose grant is in flight: a renewal must not take their rows for orphans. */
    private readonly reserving: Set<string>,
    options: LeaseOptions = {},
  ) {
    this.prefix = `lease:${replica}:${randomUUID().slice(0, 8)}:`;
    this.o = {
      hotCount: options.hotCount ?? 8,
      hotWindowMs: options.hotWindowMs ?? 1000,
      depth: options.depth ?? 64,
      share: options.share ?? 4,
      idleMs: options.idleMs ?? 1000,
      coolMs: options.coolMs ?? 2000,
      enabled: options.enabled ?? (() => false),
    };
  }

  /** Leases may be taken while `enabled()` (the cluster wires its connection's state here). */
  enableWhen(enabled: () => boolean): void {
    this.o.enabled = enabled;
  }

  /** Starts the upkeep timer (idle and drained leases given back). */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => void this.upkeep(), Math.max(10, Math.floor(this.o.idleMs / 2)));
    this.timer.unref?.();
  }

  /** Admits the request on its key's lease, synchronously; false sends it to a hold of its own. */
  admit(r: LeaseRequest): boolean {
    if (!this.o.enabled()) return false;
    const slot = `${r.accountId}\n${r.keyId ?? ""}`;
    const lease = this.bySlot.get(slot);
    const now = this.deadlines.time();
    if (lease?.live && free(lease) >= r.amount && this.deadlines.held(lease.id)) {
      lease.inUse += r.amount;
      lease.lastUse = now;
      lease.requests.add(r.requestId);
      this.admitted.set(r.requestId, { lease, amount: r.amount, charge: undefined });
      this.deadlines.trackAs(r.requestId, lease.id);
      if (free(lease) < lease.target / 2) void this.topUp(lease, 1);
      return true;
    }
    if ((this.cool.get(r.accountId) ?? Number.NEGATIVE_INFINITY) > now || !this.hot(slot, now)) return false;
    if (lease === undefined) void this.open(slot, r);
    else if (lease.live) void this.topUp(lease, r.amount);
    return false;
  }

  /** The request's lease, while its settlement is not answered. */
  leased(requestId: string): LeasedRequest | undefined {
    const a = this.admitted.get(requestId);
    return a && { leaseId: a.lease.id, amount: a.amount };
  }

  /** A settlement of a leased request is being sent (again): its charge is counted as spent until answered. */
  settling(requestId: string, charge: number): void {
    const a = this.admitted.get(requestId);
    if (a === undefined || a.charge !== undefined) return;
    a.charge = charge;
    a.lease.inUse -= a.amount;
    a.lease.charging += charge;
  }

  /**
   * The settlement was answered: the lease row gave `charged` (applied) or, for a settlement made before
   * (its answer lost), an unknown part of its charge, counted whole here (this view stays at or below the row's).
   */
  settled(requestId: string, applied: boolean, charged: number): void {
    const a = this.admitted.get(requestId);
    if (a === undefined || a.charge === undefined) return;
    this.forget(requestId);
    a.lease.granted += a.charge - (applied ? charged : a.charge);
  }

  /**
   * The request's settlement was given up (abandoned) or it ends without one (released): an unanswered
   * charge counts as spent here; what it was admitted for goes back.
   */
  forget(requestId: string): void {
    const a = this.admitted.get(requestId);
    if (a === undefined) return;
    this.admitted.delete(requestId);
    a.lease.requests.delete(requestId);
    this.deadlines.forget(requestId);
    if (a.charge === undefined) a.lease.inUse -= a.amount;
    else {
      a.lease.charging -= a.charge;
      a.lease.granted -= a.charge;
    }
  }

  /** A renewal's rows plus the requests admitted on the leases among them (present as their lease is). */
  present(ids: readonly string[]): string[] {
    const out = [...ids];
    for (const id of ids) for (const r of this.byId.get(id)?.requests ?? []) out.push(r);
    return out;
  }

  /** Leases a renewal found gone: no more admissions (their requests are overdue through their deadlines). */
  lost(ids: readonly string[]): void {
    for (const id of ids) {
      const lease = this.byId.get(id);
      if (lease) this.drop(lease);
    }
  }

  /**
   * Gives back what this replica's leases on the account hold and no request uses, and takes none on it
   * for `coolMs`; resolves with the amount given back.
   */
  async recall(accountId: string): Promise<number> {
    this.cool.set(accountId, this.deadlines.time() + this.o.coolMs);
    const leases = this.all().filter((l) => l.accountId === accountId);
    let total = 0;
    await Promise.all(
      leases.map(async (l) => {
        total += await this.retire(l);
      }),
    );
    return total;
  }

  /** Whether this replica holds a lease on the account (or has asked for one). */
  holds(accountId: string): boolean {
    return this.all().some((l) => l.accountId === accountId);
  }

  /** Gives every lease back (shutdown); requests still running keep theirs until they end. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await Promise.all(this.all().map((l) => this.retire(l)));
  }

  /** Every lease, those whose grant is in flight too. */
  private all(): Lease[] {
    return [...new Set([...this.byId.values(), ...this.bySlot.values()])];
  }

  /**
   * No more admissions on the lease; given back (what no request uses) once the grant or top-up in flight
   * is answered: a grant that commits during a recall or a close is not left live, holding money.
   */
  private async retire(l: Lease): Promise<number> {
    l.live = false;
    while (l.busy) await l.done;
    return this.byId.has(l.id) ? this.giveBack(l) : 0; // not there: never granted, or closed already
  }

  get size(): number {
    return this.byId.size;
  }

  /** What this replica holds in leases now (µUSD, as far as it knows: never more than the rows). */
  get held(): number {
    let total = 0;
    for (const l of this.byId.values()) total += l.granted;
    return total;
  }

  /** Idle leases closed; non-live drained ones closed; while disabled, every lease's free part given back. */
  private async upkeep(): Promise<void> {
    const now = this.deadlines.time();
    const enabled = this.o.enabled();
    for (const l of [...this.byId.values()]) {
      if (l.busy) continue;
      if (!enabled || now - l.lastUse >= this.o.idleMs) l.live = false;
      if (!l.live) await this.giveBack(l);
    }
    for (const [slot, times] of this.demand) if ((times.at(-1) ?? 0) < now - this.o.hotWindowMs) this.demand.delete(slot);
    for (const [account, until] of this.cool) if (until <= now) this.cool.delete(account);
  }

  /** Closes a drained lease, or gives back its free part; the amount given back. */
  private async giveBack(l: Lease): Promise<number> {
    if (l.busy) return 0;
    const drained = l.inUse === 0 && l.charging === 0;
    const amount = drained ? l.granted : free(l);
    if (!drained && amount <= 0) return 0;
    const answered = this.begin(l);
    if (drained) this.drop(l);
    else l.granted -= amount;
    try {
      const [row] = await this.client<{ given: string }[]>`SELECT umbra_lease_return(${l.id}, ${amount}, ${drained}) AS given`;
      return Number(row?.given ?? 0);
    } catch {
      return 0; // still held: the next upkeep, or the next renewal (a closed lease is an orphan), gives it back
    } finally {
      answered();
      if (drained) this.deadlines.forget(l.id);
    }
  }

  private hot(slot: string, now: number): boolean {
    const times = this.demand.get(slot) ?? [];
    if (times.length === 0) this.demand.set(slot, times);
    times.push(now);
    while ((times[0] ?? now) < now - this.o.hotWindowMs) times.shift();
    if (times.length > this.o.hotCount) times.shift();
    return times.length >= this.o.hotCount;
  }

  private async open(slot: string, r: LeaseRequest): Promise<void> {
    const target = Math.min(Number.MAX_SAFE_INTEGER, r.amount * this.o.depth);
    const lease: Lease = {
      id: `${this.prefix}${++this.seq}`,
      slot,
      accountId: r.accountId,
      keyId: r.keyId,
      granted: 0,
      inUse: 0,
      charging: 0,
      target,
      live: false,
      busy: false,
      done: Promise.resolve(),
      lastUse: this.deadlines.time(),
      requests: new Set(),
    };
    const answered = this.begin(lease);
    this.bySlot.set(slot, lease);
    this.reserving.add(lease.id);
    const sentAt = this.deadlines.time();
    try {
      const got = await this.grant(lease, target, r.amount, false);
      if (got.granted > 0) {
        lease.granted = got.granted;
        // Not if the account was recalled (it cools) or this replica closed meanwhile: then it goes back.
        lease.live = !this.closed && !((this.cool.get(r.accountId) ?? Number.NEGATIVE_INFINITY) > this.deadlines.time());
        this.byId.set(lease.id, lease);
        this.deadlines.track(lease.id, sentAt);
        return;
      }
      if (got.shortfall === "funds" || got.shortfall === "quota") this.cool.set(r.accountId, this.deadlines.time() + this.o.coolMs);
      this.bySlot.delete(slot);
    } catch {
      this.bySlot.delete(slot); // a row committed without an answer is an orphan: the next renewal releases it
    } finally {
      answered();
      this.reserving.delete(lease.id);
    }
  }

  private async topUp(lease: Lease, min: number): Promise<void> {
    const want = lease.target - free(lease);
    if (lease.busy || want < min) return;
    const answered = this.begin(lease);
    const sentAt = this.deadlines.time();
    try {
      const got = await this.grant(lease, want, min, true);
      if (got.granted > 0) {
        lease.granted += got.granted;
        this.deadlines.extend(lease.id, sentAt);
      } else if (got.shortfall === "gone") this.drop(lease);
    } catch {
      // the lease goes on with what it has; a top-up that committed unanswered only leaves this view low
    } finally {
      answered();
    }
  }

  private async grant(lease: Lease, want: number, min: number, existing: boolean) {
    const [row] = await this.client<{ granted: string; shortfall: string | null }[]>`
      SELECT granted, shortfall FROM umbra_lease(${lease.id}, ${lease.accountId}, ${lease.keyId}, ${want}, ${min},
        ${this.o.share}, ${existing}, ${this.replica}, ${this.ttlMs})`;
    return { granted: Number(row?.granted ?? 0), shortfall: row?.shortfall ?? null };
  }

  /** Marks a call in flight on the lease; the function returned marks it answered. */
  private begin(l: Lease): () => void {
    let answered = () => {};
    l.busy = true;
    l.done = new Promise<void>((resolve) => {
      answered = resolve;
    });
    return () => {
      l.busy = false;
      answered();
    };
  }

  /** No more admissions; forgotten once nothing draws on it. */
  private drop(lease: Lease): void {
    lease.live = false;
    if (this.bySlot.get(lease.slot) === lease) this.bySlot.delete(lease.slot);
    if (lease.requests.size === 0 && lease.charging === 0) this.byId.delete(lease.id);
  }
}
