/**
 * Billing's Reservations over the Postgres money authority (store/pg/money-authority.ts), for several
 * coordinators on one database: a hot key's request is admitted synchronously on this replica's balance
 * lease (money-leases.ts), any other is one round trip that the database decides; a shortfall first
 * reclaims the account's leases everywhere, then becomes the same 402 as Wallets'; every settlement is
 * one idempotent call that charges at most the hold. A settlement whose hold had gone (swept after its
 * replica stopped renewing) charges nothing and is logged for review. A settlement the database did not answer (restarting) is
 * sent again, idempotent on the request id, backing off up to `retry.maxMs`, for as long as the hold's
 * lease; only then does it fail, the hold abandoned (the replica's next renewal gives it back).
 * Renewals and sweeps are the HoldKeeper's (store/pg/hold-keeper.ts). Chosen only when the app is
 * given an authority; off by default.
 */
import { Errors } from "../errors/api-error.ts";
import type { Logger } from "../observability/logger.ts";
import type { MoneyAuthority } from "../store/pg/money-authority.ts";
import type { Settlement } from "../store/types.ts";
import type { Reservations } from "./billing.ts";
import type { Hold, HoldRequest } from "./holds.ts";

export interface SettleRetry {
  /** First wait before sending a settlement again; doubled each time up to `maxMs`. */
  readonly firstMs: number;
  readonly maxMs: number;
  /** How long to keep trying (default: the hold's lease). */
  readonly forMs?: number;
}

const RETRY: SettleRetry = { firstMs: 50, maxMs: 1000 };

export class AuthorityReservations implements Reservations {
  constructor(
    private readonly authority: MoneyAuthority,
    private readonly logger: Logger,
    private readonly retry: SettleRetry = RETRY,
  ) {}

  tryReserve(request: HoldRequest): Hold | undefined {
    if (request.requestId === undefined) return undefined;
    const { requestId, accountId, keyId, amount } = request;
    return this.authority.admit({ requestId, accountId, keyId, amount }) ? holdFor(request) : undefined;
  }

  async reserve(request: HoldRequest): Promise<Hold> {
    if (request.requestId === undefined) throw new Error("the money authority needs the request id to hold money");
    const { requestId, accountId, keyId, amount } = request;
    let out = await this.authority.reserve({ requestId, accountId, keyId, amount });
    // Money in a balance lease (here or on another replica) is given back before anyone is refused.
    if ("shortfall" in out && (out.shortfall === "funds" || out.shortfall === "quota") && (await this.authority.reclaim(accountId))) {
      out = await this.authority.reserve({ requestId, accountId, keyId, amount });
    }
    if ("shortfall" in out) {
      if (out.shortfall === "quota") throw Errors.insufficientQuota("this API key has reached its spend cap");
      if (out.shortfall === "funds") {
        throw Errors.insufficientFunds("the account balance is too low for this request; add credit or lower max_tokens");
      }
      throw new Error(`the money authority refused the hold (${out.shortfall})`);
    }
    return holdFor(request);
  }

  async settle(hold: Hold | undefined, settlement: Settlement): Promise<void> {
    if (hold) hold.done = true;
    const out = await this.settleOnce(settlement);
    if (hold && !out.hadHold && out.applied) {
      this.logger.warn("settled without its hold: nothing charged", { request_id: settlement.requestId, account_id: settlement.accountId });
    }
  }

  /** The settlement, sent again while the database does not answer, for as long as the lease. */
  private async settleOnce(settlement: Settlement) {
    const until = performance.now() + (this.retry.forMs ?? this.authority.deadlines.ttlMs);
    for (let wait = this.retry.firstMs, tries = 1; ; wait = Math.min(wait * 2, this.retry.maxMs), tries++) {
      try {
        const out = await this.authority.settle(settlement);
        if (tries > 1) this.logger.info("settlement written after a retry", { request_id: settlement.requestId, count: tries });
        return out;
      } catch (e) {
        if (performance.now() + wait > until) {
          this.logger.error("settlement not written: the database did not answer", { request_id: settlement.requestId, count: tries });
          this.authority.abandon(settlement.requestId);
          throw e;
        }
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  }
}

function holdFor(request: HoldRequest): Hold {
  const { accountId, amount, keyId } = request;
  return keyId !== null && request.spendCap !== null
    ? { accountId, amount, keyId, capped: true, done: false }
    : { accountId, amount, keyId, capped: false, done: false };
}
