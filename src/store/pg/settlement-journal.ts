/**
 * A cluster replica's settlement journal (`--settlement-journal PATH`; docs/operations.md "Running several
 * replicas"): the money authority's settlements are appended to a local file, one write per event-loop
 * turn, and the caller is released once it is written; they reach Postgres in one batch about every
 * `applyMs`, applied idempotently (a request id is charged once). Two files take turns, `PATH-a` and
 * `PATH-b`: appends go to one while the other's batch is applied, and a file is emptied only once all it
 * holds is in the database, so a killed replica loses nothing: its next start applies what both hold
 * before any money moves (`recover`). A batch the database did not take is sent again (backing off up to
 * 1 s) for as long as it takes. `PATH-lock` keeps a second process off the journal. Lines are JSON: ids,
 * models, token counts and amounts, and the lease a request was admitted on; never content.
 */

import { StoreOpenError } from "../errors.ts";
import { openJournal } from "../journal.ts";
import { DatabaseInUseError, type DatabaseLock, lockDatabase } from "../sqlite/lock.ts";
import type { Settlement, SettlementJournal } from "../types.ts";

/** A settlement and, for a request admitted on a balance lease, that lease. */
export interface JournalEntry {
  readonly settlement: Settlement;
  readonly lease?: { readonly id: string; readonly amount: number };
}

export interface JournalOptions {
  /** How long entries wait before their batch is applied, in ms (50, as the SQLite journal). */
  readonly applyMs?: number;
  /** The first wait before a failed batch is sent again, in ms (50; doubled up to 1 s). */
  readonly retryMs?: number;
  /** Who holds the journal, as a second process's refusal names it (`settlement journal`). */
  readonly holder?: string;
  /** Told when a batch failed and will be sent again (the database did not answer). */
  readonly onRetry?: (error: unknown, entries: number) => void;
}

/** Applies entries to the database; resolves once every one is written (idempotent: may see one twice). */
export type ApplyEntries = (entries: readonly JournalEntry[]) => Promise<void>;

type Line = Settlement & { readonly lease?: { readonly id: string; readonly amount: number } };

export class ClusterJournal {
  private writing: SettlementJournal;
  private applying: SettlementJournal;
  /** Written to `writing` and not yet sent. */
  private written: JournalEntry[] = [];
  /** Waiting for this turn's write. */
  private buffer: { entry: JournalEntry; resolve: () => void; reject: (e: unknown) => void }[] = [];
  private flushScheduled = false;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private loop: Promise<void> | undefined;
  private apply: ApplyEntries | undefined;
  private closed = false;
  /** Closed and out of time: batches are no longer sent again (the files keep them). */
  private givenUp = false;
  private inFlight = 0;
  private readonly applyMs: number;

  private constructor(
    readonly path: string,
    private readonly files: readonly [SettlementJournal, SettlementJournal],
    private readonly lock: { release(): void },
    private readonly options: JournalOptions,
  ) {
    [this.writing, this.applying] = files;
    this.applyMs = options.applyMs ?? 50;
  }

  /** Locks and opens the journal at `path`; throws StoreOpenError (in use, unreadable, damaged). */
  static open(path: string, options: JournalOptions = {}): ClusterJournal {
    let lock: DatabaseLock;
    try {
      lock = lockDatabase(path, options.holder ?? "settlement journal");
    } catch (e) {
      if (!(e instanceof DatabaseInUseError)) throw e;
      const who = e.holder ? `pid ${e.holder.pid}: ${e.holder.command}, started ${e.holder.startedAt}` : `it holds ${path}-lock`;
      throw new StoreOpenError(`settlement journal ${path} is in use by another process (${who}); give each replica its own`);
    }
    const files: SettlementJournal[] = [];
    try {
      for (const suffix of ["a", "b"]) {
        const file = openJournal(`${path}-${suffix}`);
        files.push(file);
        file.recovered.forEach((line, i) => {
          if (!validLease(line as Line)) throw new StoreOpenError(`settlement journal ${path}-${suffix} is damaged at line ${i + 1}`);
        });
      }
    } catch (e) {
      for (const f of files) f.close();
      lock.release();
      throw e;
    }
    return new ClusterJournal(path, [files[0] as SettlementJournal, files[1] as SettlementJournal], lock, options);
  }

  /** What a previous process left, in both files. */
  get recovered(): JournalEntry[] {
    return this.files.flatMap((f) => f.recovered.map((line) => entryOf(line as Line)));
  }

  /**
   * Applies what a previous process left (before anything else moves money), empties both files, and
   * from then on takes entries (`add`), applied by `apply`.
   */
  async recover(apply: ApplyEntries): Promise<number> {
    const entries = this.recovered;
    if (entries.length > 0) await this.withRetry(apply, entries);
    for (const f of this.files) f.clear();
    this.apply = apply;
    return entries.length;
  }

  /** Entries added and not yet in the database. */
  get pending(): number {
    return this.written.length + this.buffer.length + this.inFlight;
  }

  /**
   * Appends the entry with the others of this event-loop turn (one write); resolves once written. Rejects
   * when the journal is closed or the file cannot be written (then the caller settles directly).
   */
  add(entry: JournalEntry): Promise<void> {
    if (this.closed || this.apply === undefined) return Promise.reject(new Error("the settlement journal is closed"));
    return new Promise((resolve, reject) => {
      this.buffer.push({ entry, resolve, reject });
      if (this.flushScheduled) return;
      this.flushScheduled = true;
      setImmediate(() => this.flush());
    });
  }

  /** Resolves once every entry added so far is in the database. */
  async flushed(): Promise<void> {
    while (this.buffer.length > 0 || this.written.length > 0 || this.loop) {
      if (this.buffer.length > 0) this.flush();
      if (this.written.length > 0 && !this.loop) this.startLoop();
      await this.loop;
    }
  }

  /**
   * Applies what is written (for at most `timeoutMs`), then closes the files: what could not be applied
   * stays in them for the next start. False when something was left.
   */
  async close(timeoutMs = 5000): Promise<boolean> {
    if (this.closed) return this.pending === 0;
    this.closed = true;
    clearTimeout(this.timer);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const done = await Promise.race([
      this.flushed().then(() => true),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    this.givenUp = !done;
    for (const f of this.files) f.close();
    this.lock.release();
    return done;
  }

  private flush(): void {
    this.flushScheduled = false;
    const batch = this.buffer;
    this.buffer = [];
    if (batch.length === 0) return;
    try {
      this.writing.append(batch.map((b) => lineOf(b.entry)));
    } catch (e) {
      for (const b of batch) b.reject(e);
      return;
    }
    for (const b of batch) this.written.push(b.entry);
    for (const b of batch) b.resolve();
    if (this.timer === undefined && this.loop === undefined) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.startLoop();
      }, this.applyMs);
      this.timer.unref(); // shutdown applies what is left itself (close)
    }
  }

  /** Applies batches, the files taking turns, until nothing written is left. */
  private startLoop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    const apply = this.apply;
    if (this.loop || apply === undefined) return;
    this.loop = (async () => {
      while (this.written.length > 0) {
        const batch = this.written;
        this.written = [];
        const file = this.writing;
        [this.writing, this.applying] = [this.applying, file];
        this.inFlight = batch.length;
        try {
          await this.withRetry(apply, batch);
        } catch {
          return; // given up at close: the file keeps the batch for the next start
        }
        this.inFlight = 0;
        file.clear();
        if (this.written.length > 0 && !this.closed) await new Promise((r) => setTimeout(r, this.applyMs));
      }
    })().finally(() => {
      this.loop = undefined;
    });
  }

  private async withRetry(apply: ApplyEntries, entries: readonly JournalEntry[]): Promise<void> {
    for (let wait = this.options.retryMs ?? 50; ; wait = Math.min(wait * 2, 1000)) {
      try {
        await apply(entries);
        return;
      } catch (e) {
        if (this.givenUp) throw e;
        this.options.onRetry?.(e, entries.length);
        await new Promise((r) => setTimeout(r, wait));
      }
    }
  }
}

function lineOf(entry: JournalEntry): Settlement {
  return (entry.lease ? { ...entry.settlement, lease: entry.lease } : entry.settlement) as Settlement;
}

function entryOf(line: Line): JournalEntry {
  const { lease, ...settlement } = line;
  return lease ? { settlement, lease } : { settlement };
}

function validLease(line: Line): boolean {
  const lease = line.lease as unknown;
  if (lease === undefined) return true;
  if (typeof lease !== "object" || lease === null) return false;
  const l = lease as Record<string, unknown>;
  return typeof l.id === "string" && Number.isSafeInteger(l.amount) && (l.amount as number) > 0;
}
