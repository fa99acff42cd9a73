/**
 * The fleet's load as the receipt check sees it: the attempts assigned and not yet released over every
 * session of one fleet (each session counts its own in and out, session.ts).
 *
 * While at most INLINE_RECEIPTS_UP_TO run, the event loop has little else to do: a receipt is verified on
 * it at once (~45 us of one thread) rather than handed to the thread pool, whose round trip adds ~15 us of
 * CPU and ~70 us of latency (bench/HISTORY.md, "receipts inline while the coordinator is quiet"). Under
 * load the pool keeps those 45 us off the loop. Either way every receipt is verified before its attempt
 * completes (attempt-frames.ts). A count that drifted upward would only keep receipts on the pool.
 */
export class FleetLoad {
  running = 0;
  /** True while at most INLINE_RECEIPTS_UP_TO attempts run (the one completing included). */
  readonly quiet = (): boolean => this.running <= INLINE_RECEIPTS_UP_TO;
}

/** Most running attempts (the one completing included) at which a receipt is verified on the event loop. */
export const INLINE_RECEIPTS_UP_TO = 4;
