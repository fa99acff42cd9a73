/**
 * The console's sign-in side assembled for createApp: sessions on the store, OpenID Connect when it is
 * configured and a public URL is known, and the sweep of expired sessions and sign-in links (every ten
 * minutes, unref'd; rows are refused once expired whether swept or not). `close` stops the sweep.
 */
import type { Logger } from "../observability/logger.ts";
import type { Store } from "../store/types.ts";
import { ConsoleOidc } from "./oidc.ts";
import { ConsoleSessions } from "./sessions.ts";

const SWEEP_MS = 10 * 60_000;

export interface ConsoleAuthOptions {
  readonly store: Store;
  /** Unix ms. */
  readonly now: () => number;
  readonly logger: Logger;
  /** The coordinator's public base URL (config/config.ts publicBaseUrl); undefined when unknown. */
  readonly publicUrl: string | undefined;
  /** OpenID Connect at the JWT issuer; absent: off. */
  readonly oidc?: { readonly issuer: string; readonly clientId: string; readonly clientSecret?: string; readonly accountClaim: string };
}

export interface ConsoleSignIn {
  readonly sessions: ConsoleSessions;
  readonly oidc: ConsoleOidc | undefined;
  readonly publicUrl: string | undefined;
  close(): void;
}

export function createConsoleAuth(options: ConsoleAuthOptions): ConsoleSignIn {
  const { store, now, logger, publicUrl } = options;
  const sessions = new ConsoleSessions({ store, now, publicUrl });
  let oidc: ConsoleOidc | undefined;
  if (options.oidc && publicUrl === undefined) {
    logger.warn("console OpenID Connect sign-in off: no public URL (set --public-url)", { reason: "public url" });
  } else if (options.oidc && publicUrl !== undefined) {
    oidc = new ConsoleOidc({ ...options.oidc, publicUrl, store });
  }
  const sweep = setInterval(() => {
    Promise.all([sessions.sweep(), store.signInLinks.sweep(now())]).catch(() =>
      logger.warn("console session sweep failed", { reason: "store" }),
    );
  }, SWEEP_MS);
  sweep.unref?.();
  return { sessions, oidc, publicUrl, close: () => clearInterval(sweep) };
}
