/**
 * Read caches for the lookups every chat request makes (API key by hash, alias, build, price) and the
 * catalog lists of GET /v1/models, kept exact across processes.
 *
 * A cache is valid for one epoch. The epoch moves when this store writes the data (its own methods
 * call `touch`), or when another connection committed to the database: SQLite's `PRAGMA data_version`
 * changes exactly then (a write by the admin CLI in another process, say). The pragma is read at most
 * once per millisecond, so a write made elsewhere is seen within a millisecond; one made through this
 * store, at once.
 */
import type { Database, Statement } from "bun:sqlite";

export class Freshness {
  private readonly dataVersion: Statement<{ data_version: number }>;
  private seen: number;
  private checkedAt = 0;
  private epoch = 0;

  constructor(client: Database) {
    this.dataVersion = client.prepare("PRAGMA data_version");
    this.seen = this.read();
  }

  private read(): number {
    return this.dataVersion.get()?.data_version ?? 0;
  }

  /** The current epoch, after noticing writes made by other connections. */
  current(): number {
    const now = performance.now();
    if (now - this.checkedAt >= 1) {
      this.checkedAt = now;
      const version = this.read();
      if (version !== this.seen) {
        this.seen = version;
        this.epoch++;
      }
    }
    return this.epoch;
  }

  /** This store changed cached data. */
  touch(): void {
    this.epoch++;
  }
}

/** A map valid for one epoch of a Freshness; misses (undefined) are cached too. */
export class EpochCache<V> {
  private readonly entries = new Map<string, V | undefined>();
  private epoch = -1;

  constructor(
    private readonly freshness: Freshness,
    /** Most entries kept; the map is cleared when full (the data is small and re-read cheaply). */
    private readonly limit = 10_000,
  ) {}

  get(key: string, load: (key: string) => V | undefined): V | undefined {
    const epoch = this.freshness.current();
    if (epoch !== this.epoch) {
      this.entries.clear();
      this.epoch = epoch;
    }
    if (this.entries.has(key)) return this.entries.get(key);
    const value = load(key);
    if (this.entries.size >= this.limit) this.entries.clear();
    this.entries.set(key, value);
    return value;
  }

  /** Replaces a cached value in place (a write whose new value is known); nothing when not cached. */
  patch(key: string, update: (value: V) => V): void {
    const value = this.entries.get(key);
    if (value !== undefined) this.entries.set(key, update(value));
  }

  /** Drops everything now (data this cache holds changed). */
  clear(): void {
    this.entries.clear();
  }
}
