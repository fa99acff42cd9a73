/**
 * Single-use console sign-in links (issue 22): made by the admin API and CLI for operators without an
 * identity provider, and by `umbra-coordinator dev` for the demo account.
 *
 * A link is `<public URL>/console/sign-in?token=<32 random bytes, base64url>`, valid 15 minutes; the
 * store keeps only the token's SHA-256 (hex). Opening the link shows a page whose form POSTs the token;
 * only that POST consumes it (a link preview or scanner that fetches the URL does not). Consuming is
 * atomic in the store: a reused, expired or unknown token is refused the same way.
 */
import { randomBytes } from "node:crypto";
import { Errors } from "../errors/api-error.ts";
import type { Store } from "../store/types.ts";
import { sha256Hex } from "./secrets.ts";

export const SIGN_IN_LINK_TTL_MS = 15 * 60_000;
export const SIGN_IN_PATH = "/console/sign-in";
const TOKEN = /^[A-Za-z0-9_-]{43}$/;

export interface IssuedSignInLink {
  readonly url: string;
  /** Unix ms. */
  readonly expiresAt: number;
}

/**
 * A new link for the account. Throws 404 `not_found` for an unknown account, and 503 when the
 * coordinator has no public URL to build it from (never the request's Host).
 */
export async function issueSignInLink(
  store: Pick<Store, "signInLinks">,
  input: { readonly accountId: string; readonly now: number; readonly publicUrl: string | undefined },
): Promise<IssuedSignInLink> {
  if (input.publicUrl === undefined) {
    throw Errors.serviceUnavailable("console sign-in links need the coordinator's public URL: set --public-url (UMBRA_PUBLIC_URL)");
  }
  const token = randomBytes(32).toString("base64url");
  const expiresAt = input.now + SIGN_IN_LINK_TTL_MS;
  const created = await store.signInLinks.create({
    tokenHash: sha256Hex(token),
    accountId: input.accountId,
    createdAt: input.now,
    expiresAt,
  });
  if (!created) throw Errors.notFound(`no account '${input.accountId.slice(0, 64)}'`, "account_id");
  return { url: `${input.publicUrl}${SIGN_IN_PATH}?token=${token}`, expiresAt };
}

/** The account the token signs in, consuming it; undefined when it is malformed, unknown, used or expired. */
export async function consumeSignInLink(store: Pick<Store, "signInLinks">, token: string, now: number): Promise<string | undefined> {
  if (!TOKEN.test(token)) return undefined;
  return (await store.signInLinks.consume(sha256Hex(token), now))?.accountId;
}

/** Whether a string is shaped like a link token (the page's form carries only such a value). */
export const isSignInToken = (token: string): boolean => TOKEN.test(token);
