/**
 * Natural batching of one kind of call (the money authority's reserves, settlements, releases): a call
 * made while no batch of its kind is in flight goes at once, with the calls made in the same turn of the
 * event loop; calls made while one is in flight wait for it and then go together, at most `max` per
 * round trip. An idle replica adds no latency; a busy one pays one commit per batch, not per call.
 *
 * A round trip that fails is decided by `rolledBack(error)`: true (the database refused it, so nothing
 * of it happened) retries each call of a batch of several alone, so one bad call fails alone; false (the
 * connection: the outcome is unknown) fails every call in it, as a single call's failure would. `max` 1
 * is no batching: every call is its own round trip, sent at once.
 */

export interface BatchCounts {
  /** Calls answered or failed. */
  readonly calls: number;
  /** Round trips sent (retries of a refused batch's calls included). */
  readonly roundTrips: number;
  /** The most calls one round trip carried. */
  readonly largest: number;
  /** Milliseconds spent waiting for round trips, summed over them. */
  readonly waitedMs: number;
}

interface Pending<I, O> {
  readonly item: I;
  readonly resolve: (out: O) => void;
  readonly reject: (e: unknown) => void;
}

export class CallBatcher<I, O> {
  private queue: Pending<I, O>[] = [];
  private busy = false;
  private calls = 0;
  private roundTrips = 0;
  private largest = 0;
  private waitedMs = 0;

  constructor(
    /** One round trip: the outcomes in the order of `items`. */
    private readonly send: (items: readonly I[]) => Promise<readonly O[]>,
    private readonly max: number,
    private readonly rolledBack: (e: unknown) => boolean,
  ) {
    if (!Number.isInteger(max) || max < 1) throw new Error(`a batch holds at least one call, got ${max}`);
  }

  call(item: I): Promise<O> {
    return new Promise<O>((resolve, reject) => {
      const pending = { item, resolve, reject };
      if (this.max === 1) {
        void this.run([pending]);
        return;
      }
      this.queue.push(pending);
      if (this.busy) return;
      this.busy = true;
      queueMicrotask(() => void this.drain());
    });
  }

  counts(): BatchCounts {
    return { calls: this.calls, roundTrips: this.roundTrips, largest: this.largest, waitedMs: this.waitedMs };
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) await this.run(this.queue.splice(0, this.max));
    this.busy = false;
  }

  /** Sends `batch` and settles each of its calls; never throws. */
  private async run(batch: readonly Pending<I, O>[]): Promise<void> {
    this.roundTrips++;
    this.largest = Math.max(this.largest, batch.length);
    let out: readonly O[];
    const sent = performance.now();
    try {
      out = await this.send(batch.map((p) => p.item));
    } catch (e) {
      this.waitedMs += performance.now() - sent;
      if (batch.length > 1 && this.rolledBack(e)) {
        await Promise.all(batch.map((p) => this.run([p])));
        return;
      }
      this.calls += batch.length;
      for (const p of batch) p.reject(e);
      return;
    }
    this.waitedMs += performance.now() - sent;
    this.calls += batch.length;
    for (const [i, p] of batch.entries()) {
      if (i < out.length) p.resolve(out[i] as O);
      else p.reject(new Error(`a batch of ${batch.length} came back with ${out.length} outcomes`));
    }
  }
}
