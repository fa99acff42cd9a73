/**
 * API keys: the account's keys with their limits; a new key (name, model allowlist, spend cap, rpm, tpm,
 * self-route, link machines) whose secret is shown once with a copy button and never again; revoking a
 * key after a confirmation.
 */
import { useState } from "preact/hooks";
import { type ApiKey, api, type NewKey } from "../api.ts";
import { money, num, time } from "../format.ts";
import { Confirm, CopyButton, Empty, ErrorNote, errorText, Loaded, useLoad } from "../ui.tsx";

function limits(k: ApiKey): string {
  const parts = [
    k.allowed_models === null ? "all models" : `models: ${k.allowed_models.join(", ")}`,
    k.spend_cap_micro_usd === null ? "no spend cap" : `cap ${money(k.spend_cap_micro_usd)} (spent ${money(k.spent_micro_usd)})`,
    k.rpm === null ? "" : `${num(k.rpm)} requests/min`,
    k.tpm === null ? "" : `${num(k.tpm)} tokens/min`,
    k.self_route_only ? "own machines only" : "",
    k.link_machines ? "can link machines" : "",
  ];
  return parts.filter((p) => p !== "").join("; ");
}

/** A whole number field: "" is absent; anything else must be a non-negative integer. */
function whole(value: string, what: string): number | undefined {
  if (value.trim() === "") return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${what} must be a whole number of 0 or more.`);
  return n;
}

function CreateForm({ onCreated }: { onCreated: (key: ApiKey, secret: string) => void }) {
  const [error, setError] = useState("");
  const [busy, setBusy] = useState(false);
  const submit = async (event: SubmitEvent) => {
    event.preventDefault();
    const form = new FormData(event.currentTarget as HTMLFormElement);
    const text = (name: string) => String(form.get(name) ?? "");
    setError("");
    let body: NewKey;
    try {
      const cap = text("spend_cap").trim();
      const capUsd = cap === "" ? undefined : Number(cap);
      if (capUsd !== undefined && !(Number.isFinite(capUsd) && capUsd >= 0))
        throw new Error("The spend cap must be an amount in USD, 0 or more.");
      const models = text("allowed_models")
        .split(/[\s,]+/)
        .filter((m) => m !== "");
      const rpm = whole(text("rpm"), "Requests per minute");
      const tpm = whole(text("tpm"), "Tokens per minute");
      body = {
        name: text("name").trim(),
        ...(models.length > 0 ? { allowed_models: models } : {}),
        ...(capUsd !== undefined ? { spend_cap_micro_usd: Math.round(capUsd * 1e6) } : {}),
        ...(rpm !== undefined ? { rpm } : {}),
        ...(tpm !== undefined ? { tpm } : {}),
        self_route_only: form.get("self_route_only") === "on",
        link_machines: form.get("link_machines") === "on",
      };
    } catch (e) {
      setError(e instanceof Error ? e.message : String(e));
      return;
    }
    setBusy(true);
    try {
      const created = await api<{ key: ApiKey; secret: string }>("/console/api/keys", { method: "POST", body });
      (event.target as HTMLFormElement).reset();
      onCreated(created.key, created.secret);
    } catch (e) {
      setError(errorText(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form onSubmit={submit} aria-labelledby="create-title" class="stack">
      <h2 id="create-title">Create a key</h2>
      <label for="key-name">Name</label>
      <input id="key-name" name="name" required maxLength={64} autoComplete="off" />
      <label for="key-models">Allowed models (optional; separated by commas; empty allows every model)</label>
      <input id="key-models" name="allowed_models" autoComplete="off" />
      <label for="key-cap">Spend cap in USD (optional)</label>
      <input id="key-cap" name="spend_cap" inputMode="decimal" autoComplete="off" />
      <label for="key-rpm">Requests per minute (optional)</label>
      <input id="key-rpm" name="rpm" inputMode="numeric" autoComplete="off" />
      <label for="key-tpm">Tokens per minute (optional)</label>
      <input id="key-tpm" name="tpm" inputMode="numeric" autoComplete="off" />
      <div class="check">
        <input id="key-self" name="self_route_only" type="checkbox" />
        <label for="key-self">Only my own machines serve this key (self-route)</label>
      </div>
      <div class="check">
        <input id="key-link" name="link_machines" type="checkbox" />
        <label for="key-link">This key may approve machine logins (umbra-provider login)</label>
      </div>
      {error !== "" && <ErrorNote message={error} />}
      <div class="actions">
        <button type="submit" disabled={busy}>
          {busy ? "Creating…" : "Create key"}
        </button>
      </div>
    </form>
  );
}

function Secret({ keyName, secret, onDone }: { keyName: string; secret: string; onDone: () => void }) {
  return (
    <section class="secret" aria-labelledby="secret-title">
      <h2 id="secret-title" tabIndex={-1} ref={(el) => el?.focus()}>
        Your new key {keyName}
      </h2>
      <p>Copy it now and keep it secret: it is shown only this once. If you lose it, revoke it and create another.</p>
      <label for="secret-value">API key</label>
      <input id="secret-value" readOnly value={secret} onFocus={(e) => (e.target as HTMLInputElement).select()} />
      <div class="actions">
        <CopyButton text={secret} label="Copy the key" />
        <button type="button" class="secondary" onClick={onDone}>
          I have saved it
        </button>
      </div>
    </section>
  );
}

export function KeysPage() {
  const [load, reload] = useLoad(() => api<{ data: ApiKey[] }>("/console/api/keys"), "keys");
  const [secret, setSecret] = useState<{ name: string; value: string } | null>(null);
  const [revoking, setRevoking] = useState<ApiKey | null>(null);
  const [notice, setNotice] = useState("");
  return (
    <>
      {secret !== null && <Secret keyName={secret.name} secret={secret.value} onDone={() => setSecret(null)} />}
      <p role="status" class="note">
        {notice}
      </p>
      <Loaded load={load} what="your API keys" retry={reload}>
        {({ data }) =>
          data.length === 0 ? (
            <Empty title="No API keys yet.">Create one below, then send it as a bearer token to /v1/chat/completions.</Empty>
          ) : (
            <table>
              <caption>Your API keys</caption>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Key</th>
                  <th scope="col">Created</th>
                  <th scope="col">Last used</th>
                  <th scope="col">Limits</th>
                  <th scope="col">State</th>
                  <th scope="col">
                    <span class="visually-hidden">Actions</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {data.map((k) => (
                  <tr key={k.id}>
                    <th scope="row">{k.name ?? "(no name)"}</th>
                    <td>
                      <code>{k.hint}</code>
                    </td>
                    <td>{time(k.created_at)}</td>
                    <td>{k.last_used_at === null ? "never" : time(k.last_used_at)}</td>
                    <td>{limits(k)}</td>
                    <td>{k.revoked_at === null ? "active" : `revoked ${time(k.revoked_at)}`}</td>
                    <td>
                      {k.revoked_at === null && (
                        <button type="button" class="danger" onClick={() => setRevoking(k)} aria-label={`Revoke key ${k.name ?? k.hint}`}>
                          Revoke
                        </button>
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          )
        }
      </Loaded>
      <CreateForm
        onCreated={(key, value) => {
          setSecret({ name: key.name ?? key.hint, value });
          setNotice("");
          reload();
        }}
      />
      {revoking !== null && (
        <Confirm
          title={`Revoke the key ${revoking.name ?? revoking.hint}?`}
          action="Revoke key"
          onClose={() => setRevoking(null)}
          onConfirm={async () => {
            await api(`/console/api/keys/${encodeURIComponent(revoking.id)}/revoke`, { method: "POST" });
            setNotice(`The key ${revoking.name ?? revoking.hint} is revoked.`);
            reload();
          }}
        >
          <p>Every request with this key fails from now on (401). This cannot be undone.</p>
        </Confirm>
      )}
    </>
  );
}
