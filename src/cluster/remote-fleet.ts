/**
 * The other replicas' providers, as their digests (digest.ts) describe them: routing candidates, capacity
 * per build and public attestation entries. A digest replaces the replica's previous one once all its
 * pages arrived; a replica whose pages stop for `missedDigests` periods is dropped (with its providers).
 * This replica's own digests are ignored. A malformed page is skipped (and counted), never thrown.
 * Capacity counts are as fresh as the last digest: the owner still admits or refuses each dispatch.
 */
import {
  type AttestationFacts,
  type AttestationSummary,
  meetsTrustFloor,
  summarizeFacts,
  type TrustLevel,
} from "../../attestation/provider/levels.ts";
import type { PublicProviderAttestation } from "../fleet/public-list.ts";
import { type DigestPage, type DigestProvider, decodeDigest, digestFacts } from "./digest.ts";
import type { RemoteTarget } from "./forwarder.ts";

interface Replica {
  providers: readonly DigestProvider[];
  /** Its public entries as JSON, to notice when they change. */
  listed: string;
  heard: number;
  /** Pages of a digest still arriving. */
  partial?: { readonly seq: number; readonly pages: (readonly DigestProvider[] | undefined)[] };
}

/** Per-build figures of the remote providers (ModelCapacity's fields). */
export interface RemoteCapacity extends AttestationSummary {
  readonly providerCount: number;
  readonly routableProviders: number;
  readonly warmProviders: number;
  readonly canAccept: boolean;
}

export interface RemoteCandidate extends RemoteTarget {
  readonly replica: string;
}

export class RemoteFleet {
  private readonly replicas = new Map<string, Replica>();
  private malformed = 0;
  private changes = 0;

  constructor(
    private readonly self: string,
    private readonly options: {
      readonly digestMs: number;
      readonly missedDigests: number;
      readonly minTrust: TrustLevel;
      readonly now: () => number;
    },
  ) {}

  /** One page from `<prefix>.fleet.*`; never throws. */
  onDigest(data: Uint8Array): void {
    let page: DigestPage;
    try {
      page = decodeDigest(data);
    } catch {
      this.malformed++;
      return;
    }
    if (page.replica === this.self) return;
    const now = this.options.now();
    let r = this.replicas.get(page.replica);
    if (r === undefined) {
      r = { providers: [], listed: "[]", heard: now };
      this.replicas.set(page.replica, r);
    }
    r.heard = now;
    if (page.pages === 1) {
      this.replace(r, page.providers);
      return;
    }
    if (r.partial?.seq !== page.seq) r.partial = { seq: page.seq, pages: new Array(page.pages).fill(undefined) };
    r.partial.pages[page.index] = page.providers;
    if (r.partial.pages.every((p) => p !== undefined)) this.replace(r, r.partial.pages.flat() as DigestProvider[]);
  }

  private replace(r: Replica, providers: readonly DigestProvider[]): void {
    r.providers = providers;
    r.partial = undefined;
    const listed = JSON.stringify(providers.flatMap((p) => (p.pub ? [p.pub] : [])));
    if (listed !== r.listed) {
      r.listed = listed;
      this.changes++;
    }
  }

  /** Forgets every other replica (this one's NATS connection dropped: none of them can be reached). */
  clear(): void {
    if (this.replicas.size > 0) this.changes++;
    this.replicas.clear();
  }

  /** Drops replicas silent for `missedDigests` periods. */
  expire(): void {
    const cutoff = this.options.now() - this.options.digestMs * this.options.missedDigests;
    for (const [id, r] of this.replicas) {
      if (r.heard >= cutoff) continue;
      this.replicas.delete(id);
      if (r.listed !== "[]") this.changes++;
    }
  }

  /** Moves whenever the public entries of the other replicas change. */
  get version(): number {
    this.expire();
    return this.changes;
  }

  /** Replicas heard from recently (not this one). */
  get replicaIds(): string[] {
    this.expire();
    return [...this.replicas.keys()];
  }

  /** Providers of the replicas heard from recently. */
  get providerCount(): number {
    this.expire();
    let n = 0;
    for (const r of this.replicas.values()) n += r.providers.length;
    return n;
  }

  /** Digest pages that failed validation. */
  get malformedPages(): number {
    return this.malformed;
  }

  /** The account's providers on the other replicas (routable or not), as their last digests describe them. */
  machinesOf(accountId: string): DigestProvider[] {
    const out: DigestProvider[] = [];
    for (const [, p] of this.providers()) if (p.account === accountId) out.push(p);
    return out;
  }

  private *providers(): Generator<[string, DigestProvider]> {
    this.expire();
    for (const [id, r] of this.replicas) for (const p of r.providers) yield [id, p];
  }

  private routable(p: DigestProvider): boolean {
    return !p.draining && meetsTrustFloor(p.trust, this.options.minTrust);
  }

  /** Remote providers of the build with a free slot at their last digest, warm and least loaded first. */
  candidates(buildId: string, accept?: (c: RemoteCandidate) => boolean): RemoteCandidate[] {
    const found: { c: RemoteCandidate; p: DigestProvider }[] = [];
    for (const [replica, p] of this.providers()) {
      if (!p.builds.includes(buildId) || !this.routable(p) || p.active >= p.max) continue;
      const c = { replica, providerId: p.id, accountId: p.account, ...(p.tok ? { deviceTokenId: p.tok } : {}) };
      if (!accept || accept(c)) found.push({ c, p });
    }
    found.sort(
      (a, b) => Number(b.p.warm.includes(buildId)) - Number(a.p.warm.includes(buildId)) || a.p.active / a.p.max - b.p.active / b.p.max,
    );
    return found.map((f) => f.c);
  }

  /** The builds the account's routable providers serve. */
  buildsOf(accountId: string): string[] {
    const out = new Set<string>();
    for (const [, p] of this.providers()) if (p.account === accountId && this.routable(p)) for (const b of p.builds) out.add(b);
    return [...out];
  }

  /** True when a routable provider of the account serves the build (busy or not). */
  routableOf(buildId: string, accountId: string): boolean {
    for (const [, p] of this.providers()) if (p.account === accountId && p.builds.includes(buildId) && this.routable(p)) return true;
    return false;
  }

  capacity(buildId: string): RemoteCapacity {
    let providerCount = 0;
    let routableProviders = 0;
    let warmProviders = 0;
    let canAccept = false;
    const facts: AttestationFacts[] = [];
    for (const [, p] of this.providers()) {
      if (!p.builds.includes(buildId)) continue;
      providerCount++;
      facts.push(digestFacts(p));
      if (p.warm.includes(buildId)) warmProviders++;
      if (this.routable(p)) {
        routableProviders++;
        if (p.active < p.max) canAccept = true;
      }
    }
    return { providerCount, routableProviders, warmProviders, canAccept, ...summarizeFacts(facts) };
  }

  /** The public attestation entries the other replicas list. */
  publicAttestations(): PublicProviderAttestation[] {
    const out: PublicProviderAttestation[] = [];
    for (const [, p] of this.providers()) if (p.pub) out.push(p.pub);
    return out;
  }
}
