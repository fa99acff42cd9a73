/**
 * Sign-in, shown when GET /console/api/session is 401: through the identity provider when the
 * coordinator has one (the shell's umbra-oidc meta tag), else how to get a sign-in link.
 */

export function oidcConfigured(): boolean {
  return document.querySelector('meta[name="umbra-oidc"]')?.getAttribute("content") === "on";
}

export function SignInPage({ expired }: { expired: boolean }) {
  return (
    <main id="main" class="narrow">
      <h1 tabIndex={-1}>Sign in to the Umbra console</h1>
      {expired && (
        <p role="status" class="note">
          Your session ended. Sign in again to continue.
        </p>
      )}
      {oidcConfigured() ? (
        <p>
          <a class="button" href="/console/auth/oidc/start">
            Sign in with your identity provider
          </a>
        </p>
      ) : (
        <>
          <p>Ask your operator for a sign-in link. Each link works once, for 15 minutes.</p>
          <p class="note">
            Operators make one with <code>umbra-coordinator admin accounts sign-in-link --account ID</code>.
          </p>
        </>
      )}
    </main>
  );
}
