/**
 * The console's pages in Chromium against a real coordinator process: the shell and its assets come
 * from the coordinator (CSP, nosniff, no-referrer, caching); the console API's answers are stood in for
 * by the page's request interception (test/browser/fixtures.ts), so every page is exercised before the
 * data routes exist. Each page: no console errors or CSP violations, no serious or critical axe-core
 * violation, names with XSS payloads shown as text, a screenshot. Requests the pages send are checked
 * (CSRF header, filters). Skipped, saying so, without Chromium (test/support/browser.ts).
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Browser, Page, Request as PwRequest, Route } from "playwright-core";
import { axe, browserOrSkip, ensureConsoleBuilt, expectedStatus, launch, screenshot, watch } from "../support/browser.ts";
import { type CoordinatorProcess, startCoordinator } from "../support/processes.ts";
import * as F from "./fixtures.ts";

const run = browserOrSkip();
const CSP =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

let browser: Browser & AsyncDisposable;
let coordinator: CoordinatorProcess;

type Answer = { status?: number; body: unknown };
type Handler = (request: PwRequest) => Answer;

/** Stands in for /console/api/*: `answers` by "METHOD /path" (no query); everything else 404. Records requests. */
async function mockApi(page: Page, answers: Record<string, Answer | Handler>): Promise<PwRequest[]> {
  const seen: PwRequest[] = [];
  await page.route(/\/console\/api\//, async (route: Route) => {
    const request = route.request();
    seen.push(request);
    const path = new URL(request.url()).pathname;
    const entry = answers[`${request.method()} ${path}`];
    const answer: Answer =
      entry === undefined
        ? { status: 404, body: { error: { message: "no such route", type: "not_found_error", code: "not_found" } } }
        : typeof entry === "function"
          ? entry(request)
          : entry;
    await route.fulfill({ status: answer.status ?? 200, contentType: "application/json", body: JSON.stringify(answer.body) });
  });
  return seen;
}

const SIGNED_IN = { "GET /console/api/session": { body: F.session } };

/** A page with its problems watched and the console API stood in for. */
async function open(answers: Record<string, Answer | Handler>) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const problems = watch(page);
  const requests = await mockApi(page, answers);
  return { page, problems, requests };
}

/** The checks every page gets: no XSS ran, no console problems, axe clean, a screenshot. */
async function checkPage(page: Page, problems: ReturnType<typeof watch>, name: string, allow: RegExp[] = []) {
  expect(await page.evaluate("window.__xss === undefined && document.querySelector('img[src=x]') === null")).toBe(true);
  expect(problems.problems(allow)).toEqual([]);
  expect(await axe(page)).toEqual([]);
  await screenshot(page, name);
}

describe.skipIf(!run)("console pages in Chromium", () => {
  beforeAll(async () => {
    await ensureConsoleBuilt();
    browser = await launch();
    coordinator = await startCoordinator();
  });
  afterAll(async () => {
    await browser?.[Symbol.asyncDispose]();
    await coordinator?.[Symbol.asyncDispose]();
  });

  test("the shell and its assets load with the CSP and caching; the CSP refuses inline script", async () => {
    const { page, problems } = await open({
      "GET /console/api/session": {
        status: 401,
        body: { error: { message: "no session", type: "authentication_error", code: "invalid_session" } },
      },
    });
    const assets: { url: string; status: number; cache: string | undefined; csp: string | undefined; nosniff: string | undefined }[] = [];
    page.on("response", (r) => {
      if (r.url().includes("/console/assets/"))
        assets.push({
          url: r.url(),
          status: r.status(),
          cache: r.headers()["cache-control"],
          csp: r.headers()["content-security-policy"],
          nosniff: r.headers()["x-content-type-options"],
        });
    });
    const shell = await page.goto(`${coordinator.url}/console/`);
    const h = shell?.headers() ?? {};
    expect({
      status: shell?.status(),
      cache: h["cache-control"],
      csp: h["content-security-policy"],
      nosniff: h["x-content-type-options"],
      referrer: h["referrer-policy"],
    }).toEqual({
      status: 200,
      cache: "no-store",
      csp: CSP,
      nosniff: "nosniff",
      referrer: "no-referrer",
    });
    await page.getByRole("heading", { name: "Sign in to the Umbra console" }).waitFor();
    // The script and the style sheet, each hashed, immutable, with the CSP and nosniff.
    const asset = { url: true, status: 200, cache: "public, max-age=31536000, immutable", csp: CSP, nosniff: "nosniff" };
    expect(assets.map((a) => ({ ...a, url: /\/console\/assets\/main\.[a-z0-9]+\.(js|css)$/.test(a.url) }))).toEqual([asset, asset]);
    expect(problems.problems([expectedStatus(401)])).toEqual([]);
    // An inline script added to the page (what page.addScriptTag({content}) does) is refused and reported.
    await page.addScriptTag({ content: "window.__inline = 1" }).catch(() => {});
    expect(await page.evaluate("window.__inline === undefined")).toBe(true);
    expect(problems.problems([expectedStatus(401)]).some((p) => /Content Security Policy/.test(p))).toBe(true);
  });

  test("sign-in page when the session is 401 (no identity provider: ask the operator for a link)", async () => {
    const { page, problems } = await open({
      "GET /console/api/session": {
        status: 401,
        body: { error: { message: "no session", type: "authentication_error", code: "invalid_session" } },
      },
    });
    await page.goto(`${coordinator.url}/console/keys`);
    await page.getByRole("heading", { name: "Sign in to the Umbra console" }).waitFor();
    expect(await page.getByText("Ask your operator for a sign-in link").isVisible()).toBe(true);
    await checkPage(page, problems, "sign-in", [expectedStatus(401)]);
  });

  test("sign-in page offers the identity provider when the coordinator has one", async () => {
    const { page, problems } = await open({
      "GET /console/api/session": {
        status: 401,
        body: { error: { message: "no session", type: "authentication_error", code: "invalid_session" } },
      },
    });
    // The shell as a coordinator with OpenID Connect serves it (its umbra-oidc meta tag on), headers kept.
    await page.route(`${coordinator.url}/console/`, async (route) => {
      const real = await route.fetch();
      await route.fulfill({
        response: real,
        body: (await real.text()).replace('name="umbra-oidc" content="off"', 'name="umbra-oidc" content="on"'),
      });
    });
    await page.goto(`${coordinator.url}/console/`);
    const link = page.getByRole("link", { name: "Sign in with your identity provider" });
    await link.waitFor();
    expect(await link.getAttribute("href")).toBe("/console/auth/oidc/start");
    await checkPage(page, problems, "sign-in-oidc", [expectedStatus(401)]);
  });

  test("keyboard: the skip link, focus on the new page's heading, Escape closes a dialog back to its button", async () => {
    const { page, problems } = await open({
      ...SIGNED_IN,
      "GET /console/api/overview": { body: F.overview },
      "GET /console/api/machines": { body: F.machines },
    });
    const focused = () =>
      page.evaluate(
        "document.activeElement.tagName + ' ' + (document.activeElement.getAttribute('aria-label') ?? document.activeElement.textContent)",
      ) as Promise<string>;
    await page.goto(`${coordinator.url}/console/`);
    await page.getByRole("heading", { name: "Spend per day by model" }).waitFor();
    await page.keyboard.press("Tab");
    expect(await focused()).toBe("A Skip to content");
    await page.keyboard.press("Enter");
    expect((await focused()).startsWith("MAIN ")).toBe(true);
    await page.getByRole("link", { name: "Machines" }).click();
    await page.getByRole("table", { name: "Your linked machines" }).waitFor();
    expect(await focused()).toBe("H1 Machines");
    await page.getByRole("button", { name: `Unlink Mac ${F.XSS}` }).focus();
    await page.keyboard.press("Enter");
    await page.getByRole("dialog").waitFor();
    expect(await page.evaluate("document.querySelector('dialog').contains(document.activeElement)")).toBe(true);
    await page.keyboard.press("Escape");
    await page.getByRole("dialog").waitFor({ state: "detached" });
    expect(await focused()).toBe(`BUTTON Unlink Mac ${F.XSS}`);
    expect(problems.problems()).toEqual([]);
  });

  test("overview: balance, two uPlot charts, tables per model and key; names as text", async () => {
    const { page, problems } = await open({ ...SIGNED_IN, "GET /console/api/overview": { body: F.overview } });
    await page.goto(`${coordinator.url}/console/`);
    await page.getByRole("heading", { name: "Spend per day by model" }).waitFor();
    expect(await page.locator(".uplot canvas").count()).toBe(2);
    expect(await page.getByText("$12.345678").isVisible()).toBe(true);
    expect(await page.getByRole("rowheader", { name: F.MODEL_XSS, exact: true }).count()).toBe(1);
    expect(await page.getByText(`Ada ${F.XSS_SCRIPT}`).isVisible()).toBe(true);
    await checkPage(page, problems, "overview");
  });

  test("overview with no requests says what to do", async () => {
    const { page, problems } = await open({ ...SIGNED_IN, "GET /console/api/overview": { body: F.emptyOverview } });
    await page.goto(`${coordinator.url}/console/`);
    await page.getByText("No requests in the last 30 days.").waitFor();
    await checkPage(page, problems, "overview-empty");
  });

  test("an API error shows what failed and a retry", async () => {
    let calls = 0;
    const { page, problems } = await open({
      ...SIGNED_IN,
      "GET /console/api/overview": () =>
        ++calls === 1
          ? { status: 503, body: { error: { message: "database down", type: "service_unavailable", code: "service_unavailable" } } }
          : { body: F.overview },
    });
    await page.goto(`${coordinator.url}/console/`);
    await page
      .getByRole("alert")
      .getByText(/Could not load the overview: database down\. .*Try again in a moment/)
      .waitFor();
    await screenshot(page, "overview-error");
    await page.getByRole("button", { name: "Try again" }).click();
    await page.getByRole("heading", { name: "Spend per day by model" }).waitFor();
    expect(problems.problems([expectedStatus(503)])).toEqual([]);
  });

  test("API keys: list, create (secret shown once, copy button), revoke after confirming, CSRF header sent", async () => {
    const keys = [F.key("key_1", `ci ${F.XSS}`), F.key("key_2", "old", true)];
    const { page, problems, requests } = await open({
      ...SIGNED_IN,
      "GET /console/api/keys": () => ({ body: { data: keys } }),
      "POST /console/api/keys": (r) => {
        const created = { ...F.key("key_3", (r.postDataJSON() as { name: string }).name) };
        keys.unshift(created);
        return { status: 201, body: { key: created, secret: "sk-umbra-secret-shown-once" } };
      },
      "POST /console/api/keys/key_1/revoke": () => {
        keys[keys.findIndex((k) => k.id === "key_1")] = F.key("key_1", `ci ${F.XSS}`, true);
        return { body: { key: keys[1] } };
      },
    });
    await page.goto(`${coordinator.url}/console/keys`);
    await page.getByRole("table", { name: "Your API keys" }).waitFor();
    expect(await page.getByRole("rowheader", { name: `ci ${F.XSS}` }).isVisible()).toBe(true);
    await checkPage(page, problems, "keys");

    await page.getByLabel("Name").fill(`new ${F.XSS}`);
    await page.getByLabel(/Allowed models/).fill(`${F.MODEL_A}, org/other`);
    await page.getByLabel(/Spend cap/).fill("2.5");
    await page.getByLabel(/Requests per minute/).fill("30");
    await page.getByRole("button", { name: "Create key" }).click();
    await page.getByRole("heading", { name: `Your new key new ${F.XSS}` }).waitFor();
    expect(await page.getByLabel("API key", { exact: true }).inputValue()).toBe("sk-umbra-secret-shown-once");
    expect(await page.getByRole("button", { name: "Copy the key" }).isVisible()).toBe(true);
    const create = requests.find((r) => r.method() === "POST" && r.url().endsWith("/console/api/keys"));
    expect({ csrf: create?.headers()["x-csrf-token"], body: create?.postDataJSON() }).toEqual({
      csrf: F.session.csrf_token,
      body: {
        name: `new ${F.XSS}`,
        allowed_models: [F.MODEL_A, "org/other"],
        spend_cap_micro_usd: 2_500_000,
        rpm: 30,
        self_route_only: false,
        link_machines: false,
      },
    });
    await checkPage(page, problems, "keys-created");
    await page.getByRole("button", { name: "I have saved it" }).click();
    expect(await page.getByLabel("API key", { exact: true }).count()).toBe(0);

    await page.getByRole("button", { name: `Revoke key ci ${F.XSS}` }).click();
    await page.getByRole("dialog", { name: `Revoke the key ci ${F.XSS}?` }).waitFor();
    await checkPage(page, problems, "keys-revoke-confirm");
    await page.getByRole("button", { name: "Revoke key", exact: true }).click();
    await page.getByRole("status").getByText(`The key ci ${F.XSS} is revoked.`).waitFor();
    const revoke = requests.find((r) => r.url().endsWith("/key_1/revoke"));
    expect(revoke?.headers()["x-csrf-token"]).toBe(F.session.csrf_token);
    expect(problems.problems()).toEqual([]);
  });

  test("usage: table, filters in the query and the CSV link, more rows by cursor", async () => {
    const { page, problems, requests } = await open({
      ...SIGNED_IN,
      "GET /console/api/keys": { body: { data: [F.key("key_1", `ci ${F.XSS}`)] } },
      "GET /console/api/usage": (r) => ({
        body: new URL(r.url()).searchParams.has("cursor")
          ? { data: [{ ...F.usage.data[0], request_id: "req_more" }], next_cursor: null }
          : F.usage,
      }),
    });
    await page.goto(`${coordinator.url}/console/usage`);
    await page.getByRole("table", { name: "Requests, newest first" }).waitFor();
    expect(await page.locator("tbody tr").count()).toBe(5);
    await checkPage(page, problems, "usage");
    await page.getByLabel("From (UTC day)").fill("2026-11-01");
    await page.getByLabel("To (UTC day, included)").fill("2026-11-26");
    await page.getByLabel("Model").fill(F.MODEL_A);
    await page.getByLabel("Outcome").selectOption("completed");
    await page.getByRole("button", { name: "Apply filters" }).click();
    await page.waitForURL(/\/console\/usage\?from=2026-11-01&to=2026-11-26&model=/);
    await page.getByRole("table", { name: "Requests, newest first" }).waitFor();
    const last = requests.filter((r) => r.url().includes("/console/api/usage?")).pop();
    const expected = `from=${Date.UTC(2026, 10, 1)}&to=${Date.UTC(2026, 10, 27)}&model=${encodeURIComponent(F.MODEL_A)}&outcome=completed`;
    expect(new URL(last?.url() ?? "http://x/").search).toBe(`?${expected}`);
    expect(await page.getByRole("link", { name: "Export these requests as CSV" }).getAttribute("href")).toBe(
      `/console/api/usage.csv?${expected}`,
    );
    await page.getByRole("button", { name: "Show more" }).click();
    await page.locator("tbody tr").nth(5).waitFor();
    expect(await page.locator("tbody tr").count()).toBe(6);
    expect(problems.problems()).toEqual([]);
  });

  test("machines: list with trust and models, unlink after confirming", async () => {
    let unlinked = false;
    const { page, problems, requests } = await open({
      ...SIGNED_IN,
      "GET /console/api/machines": () => ({ body: unlinked ? { data: [] } : F.machines }),
      "POST /console/api/machines/pt_1/unlink": () => {
        unlinked = true;
        return { body: {} };
      },
    });
    await page.goto(`${coordinator.url}/console/machines`);
    await page.getByRole("table", { name: "Your linked machines" }).waitFor();
    expect(await page.getByText("hardware (managed device attestation)").isVisible()).toBe(true);
    // A named machine: its name, then its token hint as secondary text; an unnamed one: the hint alone.
    expect(await page.getByRole("rowheader", { name: `Mac ${F.XSS} umbra-pt-...abcd` }).isVisible()).toBe(true);
    expect(await page.locator("th .sub").allTextContents()).toEqual(["umbra-pt-...abcd"]);
    expect(await page.getByRole("rowheader", { name: "umbra-pt-...wxyz", exact: true }).isVisible()).toBe(true);
    await checkPage(page, problems, "machines");
    await page.getByRole("button", { name: `Unlink Mac ${F.XSS}` }).click();
    await page.getByRole("button", { name: "Unlink machine" }).click();
    await page.getByText("No machines linked.").waitFor();
    expect(requests.find((r) => r.url().endsWith("/unlink"))?.headers()["x-csrf-token"]).toBe(F.session.csrf_token);
    await checkPage(page, problems, "machines-empty");
  });

  test("device approval: the code from the link, the machine's report, approve with the CSRF header", async () => {
    const { page, problems, requests } = await open({
      ...SIGNED_IN,
      "GET /console/api/device/ABCD-EFGH": { body: F.device },
      "POST /console/api/device/ABCD-EFGH/approve": { body: {} },
      "GET /console/api/device/ZZZZ-ZZZZ": {
        status: 404,
        body: { error: { message: "unknown code", type: "not_found_error", code: "device_code_not_found" } },
      },
    });
    await page.goto(`${coordinator.url}/console/device?code=ABCD-EFGH`);
    await page.getByRole("heading", { name: "The machine asking to link" }).waitFor();
    expect(await page.getByText(`Studio ${F.XSS}`).isVisible()).toBe(true);
    expect(await page.getByText("software", { exact: true }).isVisible()).toBe(true);
    await checkPage(page, problems, "device");
    await page.getByRole("button", { name: "Approve and link" }).click();
    await page.getByText(/^Approved\./).waitFor();
    const approve = requests.find((r) => r.url().endsWith("/approve"));
    expect({ csrf: approve?.headers()["x-csrf-token"], body: approve?.postDataJSON() }).toEqual({ csrf: F.session.csrf_token, body: {} });
    await page.goto(`${coordinator.url}/console/device?user_code=ABCD-EFGH`);
    await page.getByRole("heading", { name: "The machine asking to link" }).waitFor();
    await page.getByLabel(/The code umbra-provider login shows/).fill("zzzz-zzzz");
    await page.getByRole("button", { name: "Look up" }).click();
    await page.getByText(/No machine login waits for this code/).waitFor();
    await checkPage(page, problems, "device-unknown", [expectedStatus(404)]);
  });

  test("API reference: the coordinator's /v1/openapi.json rendered, or its error state", async () => {
    const { page, problems } = await open(SIGNED_IN);
    const real = await fetch(`${coordinator.url}/v1/openapi.json`);
    await page.goto(`${coordinator.url}/console/reference`);
    if (real.status === 200) {
      await page.getByRole("heading", { name: "Operations" }).waitFor();
      expect(await page.locator("section.operation").count()).toBeGreaterThan(0);
      await checkPage(page, problems, "reference");
    } else {
      await page.getByText(/does not publish its API document/).waitFor();
      await checkPage(page, problems, "reference-missing", [expectedStatus(real.status)]);
    }
  });

  test("API reference renders operations, parameters and schemas of a document, descriptions as text", async () => {
    const { page, problems } = await open(SIGNED_IN);
    await page.route(/\/v1\/openapi\.json$/, (route) =>
      route.fulfill({ contentType: "application/json", body: JSON.stringify(F.openapi) }),
    );
    await page.goto(`${coordinator.url}/console/reference`);
    await page.getByRole("heading", { name: "POST /v1/chat/completions" }).waitFor();
    expect(await page.getByRole("link", { name: "ChatRequest" }).getAttribute("href")).toBe("#schema-ChatRequest");
    expect(await page.getByText(`Plain text, not HTML: ${F.XSS}`).isVisible()).toBe(true);
    await checkPage(page, problems, "reference-document");
  });
});
