/**
 * The tool's read of `GET /v1/provider/enroll/status` (docs/api.md "MDM enrolment") for `status`, `doctor`
 * and `start`: the enrolment state of the latest enrolment made with this device token (or of one identity
 * key). A coordinator without MDM enrolment answers 404: `offered: false`. Network failures throw; any
 * other HTTP status is returned as such.
 */

export const ENROLMENT_STATES = ["none", "issued", "enrolled", "attested"] as const;
export type EnrolmentState = (typeof ENROLMENT_STATES)[number];

export type EnrolmentAnswer =
  | { readonly offered: false }
  | { readonly offered: true; readonly state: EnrolmentState; readonly attested_at: number | null }
  | { readonly offered: true; readonly status: number };

export async function fetchEnrolmentStatus(
  base: string,
  token: string,
  options: {
    readonly signal: AbortSignal;
    readonly identityKey?: Uint8Array;
    readonly fetch?: (url: string, init: RequestInit) => Promise<Response>;
  },
): Promise<EnrolmentAnswer> {
  const query = options.identityKey ? `?identity_key=${Buffer.from(options.identityKey).toString("base64url")}` : "";
  const response = await (options.fetch ?? fetch)(`${base}/v1/provider/enroll/status${query}`, {
    signal: options.signal,
    // The token goes to this coordinator only, never to where a redirect points.
    redirect: "manual",
    headers: { authorization: `Bearer ${token}`, accept: "application/json" },
  });
  if (response.status === 404) return { offered: false };
  const body = (await response.json().catch(() => ({}))) as { state?: unknown; attested_at?: unknown };
  const state = ENROLMENT_STATES.find((s) => s === body.state);
  if (response.status !== 200 || state === undefined) return { offered: true, status: response.status };
  return { offered: true, state, attested_at: typeof body.attested_at === "number" ? body.attested_at : null };
}

/** One line for people: what the state means and what to do. */
export function describeEnrolment(answer: EnrolmentAnswer): string {
  if (!answer.offered) return "not offered by this coordinator (no MDM enrolment: hardware trust only through --dev-attestation)";
  if ("status" in answer) return `unavailable (the coordinator answered HTTP ${answer.status})`;
  switch (answer.state) {
    case "none":
      return "not enrolled: run umbra-provider enroll (hardware trust needs it)";
    case "issued":
      return "profile issued, not installed yet: approve it in System Settings -> Privacy & Security -> Profiles";
    case "enrolled":
      return "enrolled, waiting for Apple's attestation (asked when the provider connects)";
    case "attested":
      return `attested${answer.attested_at !== null ? ` (chain verified ${new Date(answer.attested_at).toISOString()})` : ""}: hardware trust`;
  }
}
