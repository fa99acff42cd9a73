/**
 * Work put off to the end of the provider's event-loop turn, all of it in one setImmediate: the
 * attempts' flushes (text coalesced per turn) and, queued by the frames those flushes send, the
 * connection's batch, which then runs in the same pass, after them. Two setImmediates in a row would
 * send the batch a loop iteration later, with an Immediate more per token. Functions and their
 * arguments are queued without a closure per call.
 */

type Work<A, B> = (a: A, b: B) => void;

const fns: Work<never, never>[] = [];
const firsts: unknown[] = [];
const seconds: unknown[] = [];
let scheduled = false;

/** Runs `fn(a, b)` at the end of this turn, after the work queued before it. */
export function atTurnEnd<A, B>(fn: Work<A, B>, a: A, b: B): void {
  fns.push(fn as Work<never, never>);
  firsts.push(a);
  seconds.push(b);
  if (!scheduled) {
    scheduled = true;
    setImmediate(runTurnEnd);
  }
}

/** Runs the queue, including what its work queues meanwhile; a throw is rethrown once the pass is done. */
function runTurnEnd(): void {
  let failure: { error: unknown } | undefined;
  for (let i = 0; i < fns.length; i++) {
    try {
      (fns[i] as Work<unknown, unknown>)(firsts[i], seconds[i]);
    } catch (error) {
      failure ??= { error };
    }
  }
  fns.length = 0;
  firsts.length = 0;
  seconds.length = 0;
  scheduled = false;
  if (failure) throw failure.error;
}
