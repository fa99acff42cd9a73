/**
 * A replica's own view of when its holds may stop being money it can spend: per hold, a deadline on the
 * local monotonic clock, `last successful renew (or reserve) + TTL - margin`, both counted from when the
 * call was *sent* (the database set `expires_at = now() + TTL` later than that, so the local deadline
 * comes first by at least the margin). A stream whose hold is past its deadline must stop (in-band
 * error, charged for what was relayed) before the sweeper can free the hold. A hold a renewal did not
 * return (swept, or settled elsewhere) is overdue at once, but only if its grant had been answered before
 * the renewal was sent: a grant answered later may have committed after the renewal's snapshot. No I/O;
 * the clock is injected.
 */

export class HoldDeadlines {
  /** request id -> deadline and when its grant was answered (both on the monotonic clock). */
  private readonly holds = new Map<string, { deadline: number; since: number }>();

  constructor(
    readonly ttlMs: number,
    readonly marginMs: number,
    private readonly now: () => number = () => performance.now(),
  ) {
    if (!(marginMs >= 0 && marginMs < ttlMs)) throw new Error("the renewal margin must be in [0, ttl)");
  }

  /** The clock, for callers that note when they send a reserve or a renew. */
  time(): number {
    return this.now();
  }

  /** A hold the database granted for a reserve sent at `sentAt`, its answer received at `answeredAt`. */
  track(requestId: string, sentAt: number, answeredAt: number = this.now()): void {
    this.holds.set(requestId, { deadline: sentAt + this.ttlMs - this.marginMs, since: answeredAt });
  }

  /** A request admitted on a lease (money-leases.ts): it stops when the lease does (same deadline and grant time). */
  trackAs(requestId: string, leaseId: string): void {
    const lease = this.holds.get(leaseId);
    if (lease === undefined) throw new Error(`no deadline for ${leaseId}`);
    this.holds.set(requestId, { ...lease });
  }

  /** A call sent at `sentAt` set the hold's expiry again (a lease topped up): a later deadline, same grant time. */
  extend(requestId: string, sentAt: number): void {
    const h = this.holds.get(requestId);
    if (h !== undefined && h.deadline !== Number.NEGATIVE_INFINITY) h.deadline = Math.max(h.deadline, sentAt + this.ttlMs - this.marginMs);
  }

  /** The hold was settled or released: nothing to watch any more. */
  forget(requestId: string): void {
    this.holds.delete(requestId);
  }

  /**
   * A renewal sent at `sentAt` answered with the holds it renewed. Those get a new deadline; a tracked
   * hold whose grant was answered before `sentAt` (so committed before the renewal ran) that it did not
   * return is lost (overdue now). Returns the lost ids.
   */
  renewed(sentAt: number, present: Iterable<string>): string[] {
    const seen = new Set(present);
    const lost: string[] = [];
    for (const [id, h] of this.holds) {
      if (seen.has(id)) h.deadline = Math.max(h.deadline, sentAt + this.ttlMs - this.marginMs);
      else if (h.since < sentAt) {
        h.deadline = Number.NEGATIVE_INFINITY;
        lost.push(id);
      }
    }
    return lost;
  }

  /** The holds whose streams must stop now: past their deadline (or lost). */
  overdue(): string[] {
    const t = this.now();
    const out: string[] = [];
    for (const [id, h] of this.holds) if (h.deadline <= t) out.push(id);
    return out;
  }

  /** False once the hold is past its deadline (or lost); true before, and for a hold not tracked. */
  held(requestId: string): boolean {
    const h = this.holds.get(requestId);
    return h === undefined || h.deadline > this.now();
  }

  /** A hold's deadline, undefined when it is not tracked. */
  deadline(requestId: string): number | undefined {
    return this.holds.get(requestId)?.deadline;
  }

  get size(): number {
    return this.holds.size;
  }
}
