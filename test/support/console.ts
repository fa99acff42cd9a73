/**
 * Console sign-in for tests over a real socket: a sign-in link made through the admin service, its token,
 * the form POST (redirects not followed), and the session cookie read from Set-Cookie, so later requests
 * can present it (`cookie: umbra_session=...`). Also the parsed attributes of a Set-Cookie value.
 */
import type { TestApp } from "./harness.ts";

export interface SignedIn {
  /** The value to send as the Cookie header. */
  readonly cookie: string;
  /** The raw Set-Cookie value of the session cookie. */
  readonly setCookie: string;
  readonly response: Response;
}

/** A fresh sign-in link's token for the account. */
export async function linkToken(t: TestApp, accountId: string): Promise<string> {
  const { url } = await t.app.admin.createSignInLink(accountId);
  return new URL(url).searchParams.get("token") ?? "";
}

/** POST /console/sign-in with `token`; `cookie` is presented as the browser would. */
export function postSignIn(base: string, token: string, cookie?: string): Promise<Response> {
  return fetch(`${base}/console/sign-in`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", ...(cookie ? { cookie } : {}) },
    body: new URLSearchParams({ token }).toString(),
    redirect: "manual",
  });
}

/** The session cookie set by a response, or undefined. */
export function sessionCookie(response: Response): string | undefined {
  return response.headers.getSetCookie().find((c) => c.startsWith("umbra_session="));
}

/** Signs the account in through a new link; throws unless the answer is 303 with a session cookie. */
export async function signIn(base: string, t: TestApp, accountId: string, presented?: string): Promise<SignedIn> {
  const response = await postSignIn(base, await linkToken(t, accountId), presented);
  const setCookie = sessionCookie(response);
  if (response.status !== 303 || setCookie === undefined) throw new Error(`sign-in answered ${response.status}`);
  return { cookie: setCookie.split(";")[0] as string, setCookie, response };
}

/** A Set-Cookie value's attributes: name=value first, then each attribute lower-cased, in order. */
export function cookieAttributes(setCookie: string): string[] {
  return setCookie.split(";").map((p, i) => (i === 0 ? (p.trim().split("=")[0] ?? "") : p.trim().toLowerCase()));
}
