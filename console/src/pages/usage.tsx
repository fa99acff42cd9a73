/**
 * Usage: the account's requests, newest first (time, key, model, tokens, cost, outcome; never any
 * content), filtered by UTC days, key, model and outcome; the filters live in the page's query string, so
 * the CSV link exports exactly what the table shows. "Show more" follows next_cursor.
 */
import { useState } from "preact/hooks";
import { type ApiKey, api, query, type UsageRow } from "../api.ts";
import { dayMs, money, num, time } from "../format.ts";
import { navigate, useLocation } from "../router.ts";
import { Empty, ErrorNote, errorText, Loaded, useLoad } from "../ui.tsx";

const DAY_MS = 86_400_000;
const FILTERS = ["from", "to", "key_id", "model", "outcome"] as const;
/** The usage rows' outcomes (the console API's `outcome` filter). */
const OUTCOMES = ["completed", "failed", "cancelled"];

/** The API's filters from the page's: days become Unix ms (`to` is the end of its day, exclusive). */
function apiFilters(params: URLSearchParams): Record<string, string | number | undefined> {
  const to = dayMs(params.get("to") ?? "");
  return {
    from: dayMs(params.get("from") ?? ""),
    to: to === undefined ? undefined : to + DAY_MS,
    key_id: params.get("key_id") ?? undefined,
    model: params.get("model") ?? undefined,
    outcome: params.get("outcome") ?? undefined,
  };
}

function Rows({ rows }: { rows: UsageRow[] }) {
  return (
    <>
      {rows.map((r) => (
        <tr key={r.request_id}>
          <th scope="row">{time(r.started_at)}</th>
          <td>{r.key_name ?? r.key_id ?? "—"}</td>
          <td>{r.model}</td>
          <td class="n">
            {num(r.prompt_tokens)}
            {r.cached_tokens > 0 ? ` (${num(r.cached_tokens)} cached)` : ""}
          </td>
          <td class="n">{num(r.completion_tokens)}</td>
          <td class="n">{money(r.cost_micro_usd)}</td>
          <td>{r.outcome}</td>
          <td class="n">{r.duration_ms === null ? "—" : `${num(r.duration_ms)} ms`}</td>
        </tr>
      ))}
    </>
  );
}

function Table({ first, filters }: { first: { data: UsageRow[]; next_cursor: string | null }; filters: string }) {
  const [rows, setRows] = useState(first.data);
  const [cursor, setCursor] = useState(first.next_cursor);
  const [error, setError] = useState("");
  const more = async () => {
    if (cursor === null) return;
    try {
      const sep = filters === "" ? "?" : "&";
      const page = await api<{ data: UsageRow[]; next_cursor: string | null }>(
        `/console/api/usage${filters}${sep}cursor=${encodeURIComponent(cursor)}`,
      );
      setRows([...rows, ...page.data]);
      setCursor(page.next_cursor);
    } catch (e) {
      setError(errorText(e));
    }
  };
  if (rows.length === 0)
    return (
      <Empty title={filters === "" ? "No requests yet." : "No requests match these filters."}>
        {filters === "" ? "Requests made with your API keys appear here within seconds." : "Widen the days or clear the filters."}
      </Empty>
    );
  return (
    <>
      <table>
        <caption>Requests, newest first</caption>
        <thead>
          <tr>
            <th scope="col">Time</th>
            <th scope="col">Key</th>
            <th scope="col">Model</th>
            <th scope="col">Prompt tokens</th>
            <th scope="col">Completion tokens</th>
            <th scope="col">Cost</th>
            <th scope="col">Outcome</th>
            <th scope="col">Duration</th>
          </tr>
        </thead>
        <tbody>
          <Rows rows={rows} />
        </tbody>
      </table>
      {error !== "" && <ErrorNote message={error} retry={more} />}
      {cursor !== null && (
        <button type="button" onClick={more}>
          Show more
        </button>
      )}
    </>
  );
}

export function UsagePage() {
  const { params } = useLocation();
  const filters = query(apiFilters(params));
  const [load, reload] = useLoad(() => api<{ data: UsageRow[]; next_cursor: string | null }>(`/console/api/usage${filters}`), filters);
  const [keys] = useLoad(() => api<{ data: ApiKey[] }>("/console/api/keys"), "keys");
  const apply = (event: SubmitEvent) => {
    event.preventDefault();
    const form = new FormData(event.currentTarget as HTMLFormElement);
    const values: Record<string, string> = {};
    for (const f of FILTERS) values[f] = String(form.get(f) ?? "").trim();
    navigate(`/console/usage${query(values)}`);
  };
  const value = (name: string) => params.get(name) ?? "";
  return (
    <>
      <form onSubmit={apply} class="filters" aria-label="Filters">
        <div>
          <label for="f-from">From (UTC day)</label>
          <input id="f-from" name="from" type="date" value={value("from")} />
        </div>
        <div>
          <label for="f-to">To (UTC day, included)</label>
          <input id="f-to" name="to" type="date" value={value("to")} />
        </div>
        <div>
          <label for="f-key">Key</label>
          <select id="f-key" name="key_id" value={value("key_id")}>
            <option value="">Any key</option>
            {keys.state === "done" &&
              keys.data.data.map((k) => (
                <option key={k.id} value={k.id}>
                  {k.name ?? k.hint}
                </option>
              ))}
          </select>
        </div>
        <div>
          <label for="f-model">Model</label>
          <input id="f-model" name="model" value={value("model")} autoComplete="off" />
        </div>
        <div>
          <label for="f-outcome">Outcome</label>
          <select id="f-outcome" name="outcome" value={value("outcome")}>
            <option value="">Any outcome</option>
            {OUTCOMES.map((o) => (
              <option key={o} value={o}>
                {o}
              </option>
            ))}
          </select>
        </div>
        <div class="actions">
          <button type="submit">Apply filters</button>
          <a href={`/console/api/usage.csv${filters}`} download>
            Export these requests as CSV
          </a>
        </div>
      </form>
      <Loaded load={load} what="your usage" retry={reload}>
        {(first) => <Table key={filters} first={first} filters={filters} />}
      </Loaded>
    </>
  );
}
