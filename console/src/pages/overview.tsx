/**
 * Overview: balance and reserve, spend and tokens per UTC day for the last 30 days per model (uPlot
 * charts, with the same numbers in a table for screen readers), totals per model and per API key.
 */
import { useMemo } from "preact/hooks";
import { api, type Overview } from "../api.ts";
import { type ChartSeries, LineChart } from "../chart.tsx";
import { daySeconds, money, num } from "../format.ts";
import { Empty, Link, Loaded, useLoad } from "../ui.tsx";

const usdAxis = (v: number) => money(v * 1e6);

/** One series per model over `days` (zero where a model had no requests that day). */
function seriesOf(o: Overview, pick: (row: Overview["daily_by_model"][number]) => number): ChartSeries[] {
  const index = new Map(o.days.map((d, i) => [d.date, i]));
  const byModel = new Map<string, number[]>();
  for (const row of o.daily_by_model) {
    const values = byModel.get(row.model) ?? o.days.map(() => 0);
    byModel.set(row.model, values);
    const i = index.get(row.date);
    if (i !== undefined) values[i] = pick(row);
  }
  return [...byModel].sort(([a], [b]) => (a < b ? -1 : 1)).map(([label, values]) => ({ label, values }));
}

function Charts({ o }: { o: Overview }) {
  const days = useMemo(() => o.days.map((d) => daySeconds(d.date)), [o]);
  const spend = useMemo(() => seriesOf(o, (r) => r.spend_micro_usd / 1e6), [o]);
  const tokens = useMemo(() => seriesOf(o, (r) => r.tokens), [o]);
  return (
    <>
      <section aria-labelledby="spend-title">
        <h2 id="spend-title">Spend per day by model</h2>
        <LineChart
          label="Spend per day by model, last 30 days (the table below has the numbers)"
          days={days}
          series={spend}
          format={usdAxis}
        />
      </section>
      <section aria-labelledby="tokens-title">
        <h2 id="tokens-title">Tokens per day by model</h2>
        <LineChart
          label="Tokens per day by model, last 30 days (the table below has the numbers)"
          days={days}
          series={tokens}
          format={num}
        />
      </section>
      <details>
        <summary>The charts' numbers per day</summary>
        <Totals
          caption="Requests, tokens and spend per UTC day"
          first="Day"
          rows={o.days.map((d) => ({ ...d, id: d.date, name: d.date }))}
        />
      </details>
    </>
  );
}

function Totals({
  caption,
  first,
  rows,
}: {
  caption: string;
  first: string;
  rows: { id: string; name: string; requests: number; prompt_tokens: number; completion_tokens: number; spend_micro_usd: number }[];
}) {
  return (
    <table>
      <caption>{caption}</caption>
      <thead>
        <tr>
          <th scope="col">{first}</th>
          <th scope="col">Requests</th>
          <th scope="col">Prompt tokens</th>
          <th scope="col">Completion tokens</th>
          <th scope="col">Spend</th>
        </tr>
      </thead>
      <tbody>
        {rows.map((r) => (
          <tr key={r.id}>
            <th scope="row">{r.name}</th>
            <td class="n">{num(r.requests)}</td>
            <td class="n">{num(r.prompt_tokens)}</td>
            <td class="n">{num(r.completion_tokens)}</td>
            <td class="n">{money(r.spend_micro_usd)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

export function OverviewPage() {
  const [load, reload] = useLoad(() => api<Overview>("/console/api/overview?days=30"), "overview");
  return (
    <Loaded load={load} what="the overview" retry={reload}>
      {(o) => (
        <>
          <dl class="cards">
            <div>
              <dt>Balance</dt>
              <dd>{money(o.balance_micro_usd)}</dd>
            </div>
            <div>
              <dt>Reserved for requests in flight</dt>
              <dd>{money(o.reserved_micro_usd)}</dd>
            </div>
            <div>
              <dt>Spend, last 30 days</dt>
              <dd>{money(o.days.reduce((s, d) => s + d.spend_micro_usd, 0))}</dd>
            </div>
          </dl>
          {o.by_model.length === 0 ? (
            <Empty title="No requests in the last 30 days.">
              Create a key on the <Link href="/console/keys">API keys</Link> page and call <code>/v1/chat/completions</code> with it; the
              API reference page shows how.
            </Empty>
          ) : (
            <>
              <Charts o={o} />
              <h2>Last 30 days by model and by key</h2>
              <Totals caption="Totals per model" first="Model" rows={o.by_model.map((m) => ({ ...m, id: m.model, name: m.model }))} />
              <Totals
                caption="Totals per API key"
                first="Key"
                rows={o.by_key.map((k) => ({
                  ...k,
                  id: k.key_id,
                  name: k.name === null || k.name === "" ? k.hint : `${k.name} (${k.hint})`,
                }))}
              />
            </>
          )}
        </>
      )}
    </Loaded>
  );
}
