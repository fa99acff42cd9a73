/**
 * The checks that use the device token: the token itself, the catalog and the MDM enrolment. The token goes only to the
 * coordinator it was given for, over the pinned TLS key when --coordinator-image is given, and to no
 * coordinator whose attestation failed. Every level needs them (ok).
 */
import type { PinnableInit, PinnedCoordinator } from "../coordinator-pin.ts";
import { fetchEnrolmentStatus } from "../enrolment-status.ts";
import { fetchProviderMe } from "../provider-me.ts";
import { describeModelWarning } from "../runtime.ts";
import { defineCheck, outcome, SERVICE_NEEDS } from "./check.ts";
import { messageOf, type Probe, within } from "./probe.ts";

const LOGIN_FIX = "run umbra-provider login (or give --token / UMBRA_PROVIDER_TOKEN)";
/** How many catalog builds a failing check lists as examples. */
const BUILDS_SHOWN = 5;

/**
 * The probe's fetch, with the pinned TLS options when the coordinator is pinned; undefined when its
 * attestation did not pass (the token is then sent nowhere).
 */
async function pinnedProbeFetch(
  probe: Probe,
  pinned: Promise<PinnedCoordinator> | undefined,
): Promise<((url: string, init: PinnableInit) => Promise<Response>) | undefined> {
  if (pinned === undefined) return probe.fetch;
  try {
    const { tls } = await pinned;
    return (url, init) => probe.fetch(url, { ...init, tls });
  } catch {
    return undefined;
  }
}

/**
 * Present (--token, UMBRA_PROVIDER_TOKEN[_FILE], or the login's credentials when they are for this
 * coordinator), the credentials file not readable by others, and GET /v1/provider/me with it: 200 pass,
 * 401/403 fail, 404 (older coordinator) or no answer warn. Never printed.
 */
export const deviceToken = defineCheck({
  id: "device_token",
  title: "Device token",
  needs: SERVICE_NEEDS,
  async run({ probe, timeouts, token, tokenProblem, stored, home, coordinator, pinned }) {
    if (stored && (stored.mode & 0o077) !== 0) {
      const mode = stored.mode.toString(8).padStart(4, "0");
      return outcome("fail", `${home.credentialsFile} is readable by other users (mode ${mode})`, `chmod 600 ${home.credentialsFile}`);
    }
    if (token === undefined) return outcome("fail", tokenProblem ?? "no device token", LOGIN_FIX);
    if (!/^[\x21-\x7e]{1,4096}$/.test(token.value)) {
      return outcome("fail", `the token from ${token.source} is not printable ASCII without spaces`, LOGIN_FIX);
    }
    const present = `present (from ${token.source})`;
    if (coordinator.base === undefined) return outcome("warn", `${present}; not verified: no usable coordinator URL`);
    const base = coordinator.base;
    const url = `${base}/v1/provider/me`;
    const fetchPinned = await pinnedProbeFetch(probe, pinned);
    if (fetchPinned === undefined) return outcome("warn", `${present}; not verified: the coordinator's attestation did not pass`);
    try {
      const answer = await within(timeouts.networkMs, (signal) => fetchProviderMe(base, token.value, { signal, fetch: fetchPinned }));
      const status = answer.status;
      const account = answer.account?.account_id.slice(0, 100);
      if (status === 200) return outcome("pass", `${present}; accepted for account ${account ?? stored?.credentials.accountId ?? "?"}`);
      if (status === 401 || status === 403) {
        return outcome("fail", `${present}; the coordinator refused it (HTTP ${status})`, "run umbra-provider login");
      }
      if (status === 404) return outcome("warn", `${present}; not verified: the coordinator has no /v1/provider/me (older version)`);
      return outcome("warn", `${present}; not verified: ${url} answered HTTP ${status}`);
    } catch (error) {
      return outcome("warn", `${present}; not verified: ${messageOf(error)} (offline?)`);
    }
  },
});

/**
 * GET /v1/provider/models with the token: every --model a catalog build passes; an alias fails naming
 * its build (requests are routed by build); an unknown id warns, or fails when no model is a build;
 * not checkable (no model, coordinator, token or answer) warns.
 */
export const catalog = defineCheck({
  id: "catalog",
  title: "Catalog",
  needs: SERVICE_NEEDS,
  async run({ probe, timeouts, token, coordinator, models, pinned }) {
    const base = coordinator.base;
    if (models.length === 0 || base === undefined || token === undefined) {
      return outcome("warn", "not checked: needs --model, a coordinator and a device token");
    }
    const fetchPinned = await pinnedProbeFetch(probe, pinned);
    if (fetchPinned === undefined) return outcome("warn", "not checked: the coordinator's attestation did not pass");
    const url = `${base}/v1/provider/models`;
    let catalog: { id: string; aliases: string[] }[];
    try {
      catalog = await within(timeouts.networkMs, async (signal) => {
        const headers = { authorization: `Bearer ${token.value}`, accept: "application/json" };
        // The token goes to this coordinator only, never to where a redirect points.
        const response = await fetchPinned(url, { signal, redirect: "manual", headers });
        if (response.status === 404) throw new Error("the coordinator has no /v1/provider/models (older version)");
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        const body = (await response.json()) as { data?: { id?: unknown; aliases?: unknown }[] };
        return (body.data ?? []).flatMap((m) =>
          typeof m?.id === "string"
            ? [{ id: m.id, aliases: Array.isArray(m.aliases) ? m.aliases.filter((a) => typeof a === "string") : [] }]
            : [],
        );
      });
    } catch (error) {
      return outcome("warn", `not checked: ${url}: ${messageOf(error)}`);
    }
    const builds = new Set(catalog.map((b) => b.id));
    const aliasOf = new Map(catalog.flatMap((b) => b.aliases.map((a) => [a, b.id] as const)));
    const served = models.filter((m) => builds.has(m.buildId)).map((m) => m.buildId);
    const aliases = models.filter((m) => !builds.has(m.buildId) && aliasOf.has(m.buildId));
    const unknown = models.filter((m) => !builds.has(m.buildId) && !aliasOf.has(m.buildId)).map((m) => m.buildId);
    const fix = "give --model BUILD[=UPSTREAM_NAME] with the build id: requests are routed by build";
    if (aliases.length > 0) {
      const lines = aliases.map((m) =>
        describeModelWarning({ model: m.buildId, reason: "alias", build_id: aliasOf.get(m.buildId) ?? "?" }),
      );
      return outcome("fail", lines.join("; "), fix);
    }
    if (unknown.length > 0) {
      const shown = catalog.slice(0, BUILDS_SHOWN).map((b) => b.id);
      const more = catalog.length > BUILDS_SHOWN ? ` and ${catalog.length - BUILDS_SHOWN} more` : "";
      const list = shown.length > 0 ? `the catalog's builds: ${shown.join(", ")}${more}` : "the catalog has no builds yet";
      const detail = `${unknown.join(", ")}: not a build in the coordinator's catalog (it gets no requests)`;
      return outcome(served.length > 0 ? "warn" : "fail", detail, `check the id; ${list}`);
    }
    return outcome("pass", `catalog builds: ${served.join(", ")}`);
  },
});

const ENROL_FIX = "run umbra-provider enroll --identity-helper PATH on this Mac, then approve the profile in System Settings";

/**
 * GET /v1/provider/enroll/status with the token (the latest enrolment made with it): attested passes
 * (a stored Apple chain gives hardware); enrolled warns (the chain is asked for when the provider connects);
 * none or a profile not installed fail; a coordinator without MDM enrolment (404), no token or no answer
 * warn. Hardware needs it ok; the other levels take it as advice.
 */
export const enrolment = defineCheck({
  id: "mdm_enrolment",
  title: "MDM enrolment",
  needs: { hardware: "ok" },
  async run({ probe, timeouts, token, coordinator, pinned }) {
    if (token === undefined || coordinator.base === undefined) return outcome("warn", "not checked: no device token or coordinator");
    const base = coordinator.base;
    const fetchPinned = await pinnedProbeFetch(probe, pinned);
    if (fetchPinned === undefined) return outcome("warn", "not checked: the coordinator's attestation did not pass");
    try {
      const answer = await within(timeouts.networkMs, (signal) => fetchEnrolmentStatus(base, token.value, { signal, fetch: fetchPinned }));
      if (!answer.offered) {
        return outcome("warn", "this coordinator offers no MDM enrolment: hardware trust only through --dev-attestation (development)");
      }
      if ("status" in answer) return outcome("warn", `not checked: ${base}/v1/provider/enroll/status answered HTTP ${answer.status}`);
      switch (answer.state) {
        case "attested":
          return outcome("pass", "attested: Apple's attestation of this Mac is stored and passes (hardware)");
        case "enrolled":
          return outcome(
            "warn",
            "enrolled; Apple's attestation is asked for when the provider connects (it serves at self_signed until then)",
          );
        case "issued":
          return outcome("fail", "a profile was issued but this Mac has not checked in (not approved yet?)", ENROL_FIX);
        default:
          return outcome("fail", "not enrolled in the coordinator's MDM server: hardware trust needs it", ENROL_FIX);
      }
    } catch (error) {
      return outcome("warn", `not checked: ${messageOf(error)} (offline?)`);
    }
  },
});
