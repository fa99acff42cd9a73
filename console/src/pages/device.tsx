/**
 * Device approval: the code from `umbra-provider login` (typed, or from ?code= or ?user_code= in the
 * link the tool shows); the machine's name, models and trust as it reported them (verified when it connects) before
 * approving or denying.
 */
import { useEffect, useState } from "preact/hooks";
import { ApiFailure, api, type DeviceLogin, type ReportedTrust } from "../api.ts";
import { time } from "../format.ts";
import { navigate, useLocation } from "../router.ts";
import { ErrorNote, errorText, Link, Loading } from "../ui.tsx";

const LIFETIMES: [string, string][] = [
  ["", "The coordinator's default"],
  [String(30 * 86_400), "30 days"],
  [String(90 * 86_400), "90 days"],
  [String(365 * 86_400), "1 year"],
];

function trustText(trust: ReportedTrust): string {
  if (trust === null) return "(none reported)";
  if (typeof trust === "string") return trust;
  return trust.level ?? "(none reported)";
}

function lookupError(e: unknown): string {
  if (e instanceof ApiFailure && e.status === 404)
    return "No machine login waits for this code. Codes expire after a few minutes: check it, or run umbra-provider login again for a new one.";
  if (e instanceof ApiFailure && e.status === 409)
    return "This code was already approved or denied. Run umbra-provider login again if you need to.";
  return errorText(e);
}

function Decide({ login, onDone }: { login: DeviceLogin; onDone: (message: string) => void }) {
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  const [lifetime, setLifetime] = useState("");
  const decide = async (decision: "approve" | "deny") => {
    setBusy(true);
    setError("");
    try {
      const body = decision === "approve" && lifetime !== "" ? { token_expires_in_seconds: Number(lifetime) } : {};
      await api(`/console/api/device/${encodeURIComponent(login.user_code)}/${decision}`, { method: "POST", body });
      onDone(
        decision === "approve"
          ? "Approved. The machine finishes its login within a few seconds and then appears on the Machines page."
          : "Denied. The machine's login fails; nothing was linked.",
      );
    } catch (e) {
      setError(lookupError(e));
      setBusy(false);
    }
  };
  return (
    <section aria-labelledby="login-title">
      <h2 id="login-title">The machine asking to link</h2>
      <dl class="facts">
        <dt>Code</dt>
        <dd>
          <code>{login.user_code}</code>
        </dd>
        <dt>Machine name</dt>
        <dd>{login.machine_name ?? "(none given)"}</dd>
        <dt>Asked at</dt>
        <dd>{time(login.requested_at)}</dd>
        <dt>Models</dt>
        <dd>{login.models.length === 0 ? "(none reported)" : login.models.join(", ")}</dd>
        <dt>Trust</dt>
        <dd>{trustText(login.trust)}</dd>
        {login.expires_at !== undefined && (
          <>
            <dt>Code valid until</dt>
            <dd>{time(login.expires_at)}</dd>
          </>
        )}
      </dl>
      <p class="note">These are what the machine reported when it started the login; its trust is verified when it connects.</p>
      <div class="stack">
        <label for="lifetime">Its device token lasts</label>
        <select id="lifetime" value={lifetime} onChange={(e) => setLifetime((e.target as HTMLSelectElement).value)}>
          {LIFETIMES.map(([v, label]) => (
            <option key={v} value={v}>
              {label}
            </option>
          ))}
        </select>
      </div>
      {error !== "" && <ErrorNote message={error} />}
      <div class="actions">
        <button type="button" disabled={busy} onClick={() => decide("approve")}>
          Approve and link
        </button>
        <button type="button" class="danger" disabled={busy} onClick={() => decide("deny")}>
          Deny
        </button>
      </div>
    </section>
  );
}

export function DevicePage() {
  const { params } = useLocation();
  // `code`, or `user_code` as RFC 8628's verification_uri_complete names it.
  const code = (params.get("code") ?? params.get("user_code") ?? "").trim().toUpperCase();
  const [state, setState] = useState<{ code: string; login?: DeviceLogin; error?: string; done?: string }>({ code: "" });
  useEffect(() => {
    if (code === "") return;
    setState({ code });
    api<DeviceLogin>(`/console/api/device/${encodeURIComponent(code)}`).then(
      (login) => setState({ code, login }),
      (e: unknown) => setState({ code, error: lookupError(e) }),
    );
  }, [code]);
  const submit = (event: SubmitEvent) => {
    event.preventDefault();
    const typed = String(new FormData(event.currentTarget as HTMLFormElement).get("code") ?? "").trim();
    navigate(`/console/device?code=${encodeURIComponent(typed)}`);
  };
  return (
    <>
      <form onSubmit={submit} class="stack" aria-label="Device code">
        <label for="device-code">The code umbra-provider login shows (like ABCD-EFGH)</label>
        <input
          id="device-code"
          name="code"
          defaultValue={code}
          required
          autoComplete="off"
          autoCapitalize="characters"
          spellcheck={false}
        />
        <div class="actions">
          <button type="submit">Look up</button>
        </div>
      </form>
      {code !== "" && state.code === code && state.done !== undefined && (
        <p role="status" class="done">
          {state.done} <Link href="/console/machines">Go to Machines</Link>
        </p>
      )}
      {code !== "" && (state.code !== code || (state.login === undefined && state.error === undefined && state.done === undefined)) && (
        <Loading what="the login" />
      )}
      {code !== "" && state.code === code && state.error !== undefined && <ErrorNote message={state.error} />}
      {code !== "" && state.code === code && state.login !== undefined && state.done === undefined && (
        <Decide login={state.login} onDone={(done) => setState({ code, done })} />
      )}
    </>
  );
}
