/**
 * The Postgres store's change feed and read caches. A connection of its own LISTENs on umbra_changes,
 * which the triggers of migrations/0004_change_feed.sql send after every committed change to keys,
 * provider tokens, builds, aliases and prices: each replica's caches drop what any replica (or the admin
 * CLI) changed, and subscribers hear of every changed row (a revoked device token ends its sessions
 * wherever they are connected).
 *
 * Caches are trusted only while the feed is known to deliver: it sends itself a ping every `pingMs`
 * through the store's pool and is live while its own last ping came back within `staleAfterMs`. Not live
 * (connection closed, server restarted, a silent network), `epoch()` is null and the caches read the
 * database; when it is live again the epoch moves, so nothing cached before the gap is served. Writes
 * made through this store move the epoch at once (`touch`). Postgres delivers notifications in commit
 * order, so a ping's echo also proves every change committed before it arrived.
 */
import { randomBytes } from "node:crypto";
import type { Sql } from "postgres";

export const CHANGES_CHANNEL = "umbra_changes";

/** A changed row: its table (api_keys, provider_tokens, model_builds, model_aliases, model_prices) and key. */
export type ChangeListener = (table: string, id: string) => void;

export interface ChangeFeedOptions {
  /** How often the feed pings itself; 500 ms unless given. */
  readonly pingMs?: number;
  /** Live while its last ping came back within this; 3 pings unless given. */
  readonly staleAfterMs?: number;
  /** Monotonic milliseconds (performance.now unless given). */
  readonly now?: () => number;
}

/** Opens the listening connection; `onnotify` gets each payload, `onclose` fires when it is lost. */
export type OpenListener = (handlers: { onnotify(channel: string, payload: string): void; onclose(): void }) => Sql;

export class ChangeFeed {
  private epochValue = 0;
  private lastEcho = Number.NEGATIVE_INFINITY;
  private wasLive = false;
  private listener: Sql | undefined;
  private seq = 0;
  private closed = false;
  private readonly pingPrefix = `ping:${randomBytes(8).toString("hex")}:`;
  private readonly listeners = new Set<ChangeListener>();
  private readonly timer: ReturnType<typeof setInterval>;
  private readonly pingMs: number;
  private readonly staleAfterMs: number;
  private readonly now: () => number;

  constructor(
    private readonly pool: Sql,
    private readonly open: OpenListener,
    options: ChangeFeedOptions = {},
  ) {
    this.pingMs = options.pingMs ?? 500;
    this.staleAfterMs = options.staleAfterMs ?? this.pingMs * 3;
    this.now = options.now ?? (() => performance.now());
    this.timer = setInterval(() => this.tick(), this.pingMs);
    this.timer.unref?.();
    this.connect();
  }

  /** The cache epoch, or null while the feed is not known to deliver (caches must read the database). */
  epoch(): number | null {
    const live = this.now() - this.lastEcho <= this.staleAfterMs;
    if (live !== this.wasLive) {
      this.wasLive = live;
      if (live) this.epochValue++;
    }
    return live ? this.epochValue : null;
  }

  /** This replica changed cached data: its caches drop it now (other replicas when the notification comes). */
  touch(): void {
    this.epochValue++;
  }

  /** Calls `listener` for every changed row; returns the unsubscribe. */
  subscribe(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Resolves once the feed is live (its first ping came back), or false after `ms`. */
  async ready(ms = 5_000): Promise<boolean> {
    const until = this.now() + ms;
    while (this.epoch() === null) {
      if (this.now() >= until || this.closed) return false;
      await Bun.sleep(Math.min(this.pingMs, 20));
    }
    return true;
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    this.lastEcho = Number.NEGATIVE_INFINITY;
    const listener = this.listener;
    this.listener = undefined;
    await listener?.end({ timeout: 0 }).catch(() => {});
  }

  private connect(): void {
    let client: Sql;
    try {
      client = this.open({
        onnotify: (channel, payload) => {
          if (channel === CHANGES_CHANNEL && client === this.listener) this.received(payload);
        },
        onclose: () => this.lost(client),
      });
    } catch {
      return; // the next tick tries again
    }
    this.listener = client;
    client`LISTEN ${client(CHANGES_CHANNEL)}`.then(
      () => this.ping(),
      () => this.lost(client),
    );
  }

  private received(payload: string): void {
    if (payload.startsWith(this.pingPrefix)) {
      this.lastEcho = this.now();
      return;
    }
    if (payload.startsWith("ping:")) return; // another replica's
    this.epochValue++;
    const colon = payload.indexOf(":");
    if (colon <= 0) return;
    const table = payload.slice(0, colon);
    const id = payload.slice(colon + 1);
    for (const listener of this.listeners) {
      try {
        listener(table, id);
      } catch {
        // A listener's failure is its own; the feed and the other listeners go on.
      }
    }
  }

  private lost(client: Sql): void {
    if (client !== this.listener) return;
    this.listener = undefined;
    this.lastEcho = Number.NEGATIVE_INFINITY;
    this.epochValue++;
    void client.end({ timeout: 0 }).catch(() => {});
  }

  private tick(): void {
    if (this.closed) return;
    if (this.listener === undefined) {
      this.connect();
      return;
    }
    // Silent for long (a dead network the socket has not noticed): a connection of its own again.
    if (this.now() - this.lastEcho > this.staleAfterMs * 4 && this.seq > 4) this.lost(this.listener);
    else this.ping();
  }

  private ping(): void {
    this.seq++;
    this.pool`SELECT pg_notify(${CHANGES_CHANNEL}, ${this.pingPrefix + this.seq})`.catch(() => {});
  }
}

/**
 * A read cache valid for one epoch of a ChangeFeed: it holds the loads' promises, so a load begun
 * before a change is dropped with its epoch. Misses (undefined) are cached too; failures are not.
 */
export class FeedCache<V> {
  private readonly entries = new Map<string, Promise<V | undefined>>();
  private epoch: number | null = null;

  constructor(
    private readonly feed: Pick<ChangeFeed, "epoch">,
    /** Most entries kept; the map is cleared when full (the data is small and re-read cheaply). */
    private readonly limit = 10_000,
  ) {}

  get(key: string, load: (key: string) => Promise<V | undefined>): Promise<V | undefined> {
    const epoch = this.feed.epoch();
    if (epoch !== this.epoch) {
      this.entries.clear();
      this.epoch = epoch;
    }
    if (epoch === null) return load(key);
    const hit = this.entries.get(key);
    if (hit !== undefined) return hit;
    const loading = load(key);
    if (this.entries.size >= this.limit) this.entries.clear();
    this.entries.set(key, loading);
    loading.catch(() => {
      if (this.entries.get(key) === loading) this.entries.delete(key);
    });
    return loading;
  }
}
