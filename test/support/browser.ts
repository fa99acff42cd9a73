/**
 * The browser tests' Chromium (test/browser/): Debian's at /usr/bin/chromium (UMBRA_TEST_CHROMIUM to
 * use another), driven headless by playwright-core. Without it, `browserOrSkip` prints one line saying
 * the browser suites are skipped and how to enable them, and the suites register as skipped.
 * `watch(page)` records console errors and warnings, page errors, CSP violations (Chromium reports them
 * as console errors) and dialogs (an XSS payload's alert would open one). `axe(page)` runs axe-core in
 * the page, evaluated over CDP: the console's CSP refuses inline script, which is what a script tag the
 * test adds would be. `screenshot` writes to .tmp/console-screenshots (UMBRA_SCREENSHOTS for another
 * folder; git ignores .tmp) and prints the folder once.
 */
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { type Browser, chromium, type Page } from "playwright-core";
import { BUN, ROOT } from "./processes.ts";

export const CHROMIUM = process.env.UMBRA_TEST_CHROMIUM ?? "/usr/bin/chromium";

let announced = false;

/** Whether the browser exists; prints the skip line once when it does not. */
export function browserOrSkip(): boolean {
  if (existsSync(CHROMIUM)) return true;
  if (!announced)
    console.log(
      `browser tests: skipped the browser suites: no Chromium at ${CHROMIUM} (install Debian's chromium: apt-get install chromium)`,
    );
  announced = true;
  return false;
}

/** Builds the console's assets (console/build.ts) when they are missing: a run outside `make test`. */
export async function ensureConsoleBuilt(): Promise<void> {
  if (existsSync(join(ROOT, "console/dist/assets.js"))) return;
  const proc = Bun.spawn([BUN, join(ROOT, "console/build.ts")], { cwd: ROOT, stdout: "ignore", stderr: "pipe" });
  if ((await proc.exited) !== 0) throw new Error(`console build failed: ${await new Response(proc.stderr).text()}`);
}

export async function launch(): Promise<Browser & AsyncDisposable> {
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
  return Object.assign(browser, { [Symbol.asyncDispose]: () => browser.close() });
}

export interface Watch {
  /** Console errors and page errors so far, minus the expected ones (`allow` patterns). */
  problems(allow?: readonly RegExp[]): string[];
  /** Records another problem (a dialog that opened). */
  add(problem: string): void;
}

export function watch(page: Page): Watch {
  const seen: string[] = [];
  page.on("console", (m) => {
    // A failed resource's message names no URL; its location does.
    if (m.type() === "error" || m.type() === "warning") seen.push(`${m.type()}: ${m.text()} at ${m.location().url}`);
  });
  page.on("pageerror", (e) => seen.push(`pageerror: ${e.message}`));
  page.on("dialog", (d) => {
    seen.push(`dialog: ${d.message()}`);
    void d.dismiss();
  });
  return { problems: (allow = []) => seen.filter((s) => !allow.some((a) => a.test(s))), add: (p) => seen.push(p) };
}

/** A resource answer the page expects (a 401 or 404 it handles): Chromium logs it as a console error. */
export const expectedStatus = (status: number) => new RegExp(`Failed to load resource: the server responded with a status of ${status}`);

const AXE_SOURCE = readFileSync(join(ROOT, "node_modules/axe-core/axe.min.js"), "utf8");

export interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: number;
}

/** axe-core's serious and critical violations on the page as it is now. */
export async function axe(page: Page): Promise<AxeViolation[]> {
  if (!(await page.evaluate("typeof window.axe === 'object'"))) await page.evaluate(AXE_SOURCE);
  const result = (await page.evaluate(
    "window.axe.run(document, { resultTypes: ['violations'] }).then((r) => r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.length })))",
  )) as AxeViolation[];
  return result.filter((v) => v.impact === "serious" || v.impact === "critical");
}

let shots: string | undefined;

/** Writes the page's full screenshot as `<name>.png` in this run's folder (printed once). */
export async function screenshot(page: Page, name: string): Promise<string> {
  if (shots === undefined) {
    shots = process.env.UMBRA_SCREENSHOTS ?? join(ROOT, ".tmp/console-screenshots");
    mkdirSync(shots, { recursive: true });
    console.log(`browser tests: screenshots in ${shots}`);
  }
  const path = join(shots, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}
