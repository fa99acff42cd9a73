/**
 * A coordinator process killed (SIGKILL) in the middle of traffic and restarted on the same database:
 * every answer a client fully received has its charge in the ledger (settlements are durable before
 * an answer's last bytes), the books still balance, and no reservation outlives the process (the whole
 * balance is available again). Real processes: coordinator and provider. Run twice: settlements
 * committed one by one, and grouped through the settlement journal (applied by the restarted process).
 */
import { describe, expect, test } from "bun:test";
import { reservationFor } from "../../src/billing/billing.ts";
import { costOf } from "../../src/billing/money.ts";
import { usageLimits } from "../../src/billing/usage-bounds.ts";
import type { ChatMessage } from "../../src/protocol/chat-messages.ts";
import { tempDir } from "../support/harness.ts";
import { type CoordinatorProcess, startCoordinator, startProvider } from "../support/processes.ts";
import { waitFor } from "../support/wait.ts";

/** The prompt tokens a request with these messages reserves (the bound a provider's report is held to). */
const promptLimit = (messages: readonly ChatMessage[]) => usageLimits({ messages, max_tokens: 1 }).promptTokens;

const BUILD = "org/crash-build";
/** The build has no price: the fallback rates apply (config defaults). */
const FALLBACK = { input: 500_000, output: 1_500_000, cacheRead: 250_000, source: "fallback" as const };

interface Ledger {
  data: { kind: string; amount_micro_usd: number; request_id: string | null }[];
}

async function chat(url: string, apiKey: string, content: string, maxTokens: number): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: BUILD, max_tokens: maxTokens, messages: [{ role: "user", content }] }),
  });
}

const GROUPINGS = [
  { name: "settlements committed one by one", env: { UMBRA_SETTLEMENT_GROUP_ABOVE: "1000000000" } },
  { name: "settlements grouped through the journal", env: { UMBRA_SETTLEMENT_GROUP_ABOVE: "0" } },
];

describe.each(GROUPINGS)("coordinator crash, $name", ({ env }) => {
  test("killed mid-traffic and restarted: no delivered charge lost, books balance, no reservation survives", async () => {
    using dir = tempDir();
    const first = await startCoordinator(env, { dir: dir.path });
    // $100: small enough that one request can ask for the whole balance within the protocol's budget.
    const { apiKey, providerToken, accountId } = await first.seed([BUILD], {}, 100_000_000);
    const providerArgs = (c: CoordinatorProcess) => [
      "--coordinator",
      c.url,
      "--token",
      providerToken,
      "--engine",
      "echo",
      "--model",
      BUILD,
      "--max-concurrency",
      "64",
      "--echo-tokens-per-second",
      "400",
    ];
    {
      await using provider = startProvider(providerArgs(first));
      await provider.connected;

      // Sixteen clients in a loop until the coordinator dies; each remembers the answers it received whole.
      const delivered: string[] = [];
      let stop = false;
      const clients = Array.from({ length: 16 }, async (_, i) => {
        for (let n = 0; !stop; n++) {
          try {
            const response = await chat(first.url, apiKey, `client ${i} request ${n} has ten words in it`, 20);
            if (response.status !== 200) continue;
            const body = (await response.json()) as { choices: { finish_reason: string }[] };
            if (body.choices[0]?.finish_reason) delivered.push(response.headers.get("x-request-id") as string);
          } catch {
            return; // the coordinator is gone
          }
        }
      });
      await waitFor(() => delivered.length >= 40, "forty delivered answers");
      first.proc.kill("SIGKILL");
      await first.proc.exited;
      stop = true;
      await Promise.all(clients);

      await using second = await startCoordinator(env, { dir: dir.path });
      const ledger = await second.admin<Ledger>("GET", `/accounts/${accountId}/ledger?limit=1000`);
      const charged = new Set(ledger.data.filter((e) => e.kind === "charge").map((e) => e.request_id));
      expect(delivered.filter((id) => !charged.has(id))).toEqual([]);

      const account = await second.admin<{ balance_micro_usd: number; reserved_micro_usd: number }>("GET", `/accounts/${accountId}`);
      const credits = ledger.data.reduce((sum, e) => sum + e.amount_micro_usd, 0);
      expect({ balance: account.balance_micro_usd, reserved: account.reserved_micro_usd }).toEqual({ balance: credits, reserved: 0 });

      // No hold survived: a request whose reservation is the whole balance is served.
      await using again = startProvider(providerArgs(second));
      await again.connected;
      const content = "after the restart";
      const promptCost = costOf(promptLimit([{ role: "user", content }]), FALLBACK.input);
      const maxTokens = Number(((BigInt(account.balance_micro_usd) - promptCost) * 1_000_000n) / BigInt(FALLBACK.output));
      const reservation = reservationFor(promptLimit([{ role: "user", content }]), maxTokens, FALLBACK);
      expect(reservation).toBeLessThanOrEqual(account.balance_micro_usd);
      expect(account.balance_micro_usd - reservation).toBeLessThan(2);
      const response = await chat(second.url, apiKey, content, maxTokens);
      expect(response.status).toBe(200);
      await response.json();
      // And one micro-USD more is refused: the check is real.
      const tooMuch = await chat(second.url, apiKey, content, maxTokens + 1_000);
      expect(tooMuch.status).toBe(402);
    }
  }, 60_000);
});
