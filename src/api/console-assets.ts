/**
 * The console's pages and assets (issue 22, CONSOLE-CONTRACT.md "Pages"):
 *   GET /console, /console/<page...>   the shell (the app routes in the browser), Cache-Control: no-store
 *   GET /console/assets/<name>         a content-hashed asset, cached for a year (immutable); gzip when asked
 * Unknown assets, and unknown paths under /console/api/ and /console/auth/ (the other console routes'
 * prefixes), are the 404 envelope, never the shell. Every response under /console, the other console
 * routes' and errors included, carries the CSP, nosniff and no-referrer (one request hook; it tests the
 * path's start without parsing the URL, since it runs for every request). Without built assets (a source
 * checkout) the pages are 503 saying how to build them.
 */
import { Elysia } from "elysia";
import { BUILD_HINT, ConsoleAssets, type ConsoleOptions } from "../console/assets.ts";
import { Errors } from "../errors/api-error.ts";
import { errorResponse } from "./errors.ts";

const NO_STORE = "no-store";
const IMMUTABLE = "public, max-age=31536000, immutable";
/** Paths the shell never answers: the other console routes' prefixes. */
const NOT_PAGES = ["/console/api/", "/console/auth/", "/console/assets/"];

function pathOf(url: string): string {
  return new URL(url).pathname;
}

export function consoleAssetRoutes(options: ConsoleOptions = {}) {
  const assets = new ConsoleAssets(options);
  const notBuilt = () => errorResponse(Errors.serviceUnavailable(BUILD_HINT));

  const shell = async (request: Request): Promise<Response> => {
    const path = pathOf(request.url);
    if (NOT_PAGES.some((prefix) => path.startsWith(prefix))) return errorResponse(Errors.notFound("no such route"));
    const bundle = await assets.bundle();
    if (bundle === undefined) return notBuilt();
    return new Response(bundle.shell, { headers: { "content-type": "text/html; charset=utf-8", "cache-control": NO_STORE } });
  };

  return new Elysia({ name: "console-assets" })
    .get("/console", ({ request }) => shell(request))
    .get("/console/*", ({ request }) => shell(request))
    .get("/console/assets/:name", async ({ params, request }) => {
      const bundle = await assets.bundle();
      if (bundle === undefined) return notBuilt();
      const asset = bundle.assets.get(params.name);
      if (asset === undefined) return errorResponse(Errors.notFound("no such console asset"));
      const gzip = /\bgzip\b/.test(request.headers.get("accept-encoding") ?? "");
      const headers: Record<string, string> = { "content-type": asset.type, "cache-control": IMMUTABLE, vary: "accept-encoding" };
      if (gzip) headers["content-encoding"] = "gzip";
      return new Response(gzip ? asset.gzip : asset.body, { headers });
    });
}
