/**
 * Machines: the provider devices linked to the account (trust level and its source, models, online
 * state, requests served, earnings); unlinking one (after a confirmation) revokes its device token and
 * ends its sessions. A machine is labelled by its name (the approved login's machine name) with its
 * token hint beneath, or by the hint alone when it has no name; names are rendered as text only.
 */
import { useState } from "preact/hooks";
import { api, type Machine } from "../api.ts";
import { money, num, time } from "../format.ts";
import { Confirm, Empty, Link, Loaded, useLoad } from "../ui.tsx";

export function MachinesPage() {
  const [load, reload] = useLoad(() => api<{ data: Machine[] }>("/console/api/machines"), "machines");
  const [unlinking, setUnlinking] = useState<Machine | null>(null);
  const [notice, setNotice] = useState("");
  const label = (m: Machine) => m.name ?? m.hint ?? `machine ${m.id}`;
  return (
    <>
      <p role="status" class="note">
        {notice}
      </p>
      <Loaded load={load} what="your machines" retry={reload}>
        {({ data }) =>
          data.length === 0 ? (
            <Empty title="No machines linked.">
              On the Mac that should serve, run <code>umbra-provider login</code> and approve its code on the{" "}
              <Link href="/console/device">Approve a device</Link> page.
            </Empty>
          ) : (
            <table>
              <caption>Your linked machines</caption>
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">State</th>
                  <th scope="col">Trust</th>
                  <th scope="col">Models</th>
                  <th scope="col">Requests served</th>
                  <th scope="col">Earnings</th>
                  <th scope="col">Linked</th>
                  <th scope="col">Token expires</th>
                  <th scope="col">
                    <span class="visually-hidden">Actions</span>
                  </th>
                </tr>
              </thead>
              <tbody>
                {data.map((m) => (
                  <tr key={m.id}>
                    <th scope="row">
                      {label(m)}
                      {m.name !== null && m.hint !== undefined && <span class="sub">{m.hint}</span>}
                    </th>
                    <td>{m.revoked_at !== null ? `unlinked ${time(m.revoked_at)}` : m.online ? "online" : "offline"}</td>
                    <td>{m.trust_level === null ? "—" : `${m.trust_level}${m.trust_source === null ? "" : ` (${m.trust_source})`}`}</td>
                    <td>{m.models.length === 0 ? "—" : m.models.join(", ")}</td>
                    <td class="n">{num(m.requests_served)}</td>
                    <td class="n">{money(m.earnings_micro_usd)}</td>
                    <td>{time(m.created_at)}</td>
                    <td>{m.expires_at === null ? "never" : time(m.expires_at)}</td>
                    <td>
                      {m.revoked_at === null && (
                        <button type="button" class="danger" onClick={() => setUnlinking(m)} aria-label={`Unlink ${label(m)}`}>
                          Unlink
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
      {unlinking !== null && (
        <Confirm
          title={`Unlink ${label(unlinking)}?`}
          action="Unlink machine"
          onClose={() => setUnlinking(null)}
          onConfirm={async () => {
            await api(`/console/api/machines/${encodeURIComponent(unlinking.id)}/unlink`, { method: "POST" });
            setNotice(`${label(unlinking)} is unlinked.`);
            reload();
          }}
        >
          <p>Its device token is revoked and its connections end now. To serve again it must log in again (umbra-provider login).</p>
        </Confirm>
      )}
    </>
  );
}
