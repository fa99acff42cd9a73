/**
 * The provider tool's one call to `GET /v1/provider/me` (docs/api.md): who a device token belongs to,
 * with the account's earnings and live machines. `login --token`, `status` and `doctor` each read the
 * answer their own way; this file only asks. Network failures throw; any HTTP status is returned.
 */

/** The coordinator's view of a device token's account. */
export interface AccountView {
  readonly account_id: string;
  readonly earnings?: { readonly total_micro_usd?: number; readonly today_micro_usd?: number };
  readonly balance_micro_usd?: number;
  readonly machines?: readonly { readonly provider_id: string; readonly trust_level: string; readonly models?: readonly string[] }[];
}

export interface MeAnswer {
  readonly status: number;
  /** Present when the answer was 200 with an account id. */
  readonly account?: AccountView;
  /** The parsed JSON body of any answer (an error envelope otherwise); {} when it was not JSON. */
  readonly body: Readonly<Record<string, unknown>>;
}

export async function fetchProviderMe(
  base: string,
  token: string,
  options: { readonly signal: AbortSignal; readonly fetch?: (url: string, init: RequestInit) => Promise<Response> },
): Promise<MeAnswer> {
  const response = await (options.fetch ?? fetch)(`${base}/v1/provider/me`, {
    signal: options.signal,
    // The token goes to this coordinator only, never to where a redirect points.
    redirect: "manual",
    headers: { authorization: `Bearer ${token}`, accept: "application/json" },
  });
  const parsed: unknown = await response.json().catch(() => ({}));
  const body = typeof parsed === "object" && parsed !== null ? (parsed as Record<string, unknown>) : {};
  const ok = response.status === 200 && typeof body.account_id === "string";
  return ok ? { status: 200, account: body as unknown as AccountView, body } : { status: response.status, body };
}
