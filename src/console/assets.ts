/**
 * The console's embedded assets (issue 22): the table console/build.ts generates (console/dist/assets.js,
 * each file imported `with { type: "file" }`, so `bun build --compile` embeds it), loaded on the first
 * console request, never at start; its files read once into memory with a gzip copy; the shell page that
 * loads them; and the security headers every console response carries, defined here once.
 *
 * Invariants: asset names are content-hashed (`<name>.<hash>.<ext>`), so the bytes behind a name never
 * change (immutable caching) and the shell, which names the current ones, is never cached. The shell has
 * no inline script or style (the CSP forbids both); what it tells the app (the sign-in methods) is in
 * <meta> tags. A source checkout without a built table answers 503 saying how to build it; a compiled
 * binary cannot lack it (`bun build --compile` fails on the missing import).
 */

/** The console's Content-Security-Policy (CONSOLE-CONTRACT.md): same-origin only, no inline code, no framing. */
export const CONSOLE_CSP =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/** On every response under /console. */
export const CONSOLE_HEADERS: Readonly<Record<string, string>> = {
  "content-security-policy": CONSOLE_CSP,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
};

/** What console/build.ts writes: the entry script and style, and every file's path (on disk or in the binary). */
export interface AssetTable {
  readonly script: string;
  readonly style: string;
  readonly files: Readonly<Record<string, string>>;
}

export interface ConsoleAsset {
  readonly type: string;
  readonly body: Uint8Array;
  readonly gzip: Uint8Array;
}

export interface ConsoleBundle {
  /** The shell page (HTML). */
  readonly shell: string;
  readonly assets: ReadonlyMap<string, ConsoleAsset>;
}

export interface ConsoleOptions {
  /** Whether sign-in through the identity provider (OIDC) is configured: the sign-in page offers it. */
  readonly oidc?: boolean;
  /** The table's loader (tests); the built one by default. */
  readonly load?: () => Promise<AssetTable>;
}

export const BUILD_HINT = "the console's assets are not built: run `bun console/build.ts` (make dev, test and build do)";

const TYPES: Readonly<Record<string, string>> = {
  js: "text/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
  svg: "image/svg+xml",
  png: "image/png",
  woff2: "font/woff2",
};

const builtTable = async (): Promise<AssetTable> => (await import("../../console/dist/assets.js")).default;

/** The shell: names the hashed script and style; `oidc` says which sign-in the page offers. */
export function shellHtml(table: Pick<AssetTable, "script" | "style">, oidc: boolean): string {
  const asset = (name: string) => `/console/assets/${encodeURIComponent(name)}`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<meta name="umbra-oidc" content="${oidc ? "on" : "off"}">
<title>Umbra console</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="${asset(table.style)}">
<script type="module" src="${asset(table.script)}"></script>
</head><body><div id="app"><noscript>The Umbra console needs JavaScript.</noscript></div></body></html>
`;
}

/** The console's bundle for one app: loaded on first use; a failed load is tried again on the next request. */
export class ConsoleAssets {
  #bundle: Promise<ConsoleBundle> | undefined;

  constructor(private readonly options: ConsoleOptions = {}) {}

  /** The bundle, or undefined when the table is not built (a source checkout). */
  async bundle(): Promise<ConsoleBundle | undefined> {
    this.#bundle ??= this.#load();
    try {
      return await this.#bundle;
    } catch {
      this.#bundle = undefined;
      return undefined;
    }
  }

  async #load(): Promise<ConsoleBundle> {
    const table = await (this.options.load ?? builtTable)();
    const assets = new Map<string, ConsoleAsset>();
    for (const [name, path] of Object.entries(table.files)) {
      const body = await Bun.file(path).bytes();
      const ext = name.slice(name.lastIndexOf(".") + 1);
      assets.set(name, { type: TYPES[ext] ?? "application/octet-stream", body, gzip: Bun.gzipSync(body, { level: 9 }) });
    }
    return { shell: shellHtml(table, this.options.oidc ?? false), assets };
  }
}
