/**
 * Which way dependencies run, checked on the source text of src/ and attestation/: every relative import
 * (`import` and `export ... from`, type-only ones included, and `import("...")` with a literal path).
 * - No file-level import cycle.
 * - A folder imports only the folders MAY_IMPORT lists for it: coordinator -> api -> domains -> the
 *   leaves (crypto, store, protocol ...); config/ sits above the domains (it imports their types) and no
 *   domain imports api/ or coordinator/. A new dependency between folders is a deliberate table change.
 * - The coordinator and provider binaries reach neither test-only HPKE suite (WebCrypto, noble:
 *   test/support/hpke-suites.ts): production seals with seal.ts's native suite only.
 */
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const ROOT = resolve(import.meta.dir, "..", "..", "..");
const ROOTS = ["src", "attestation"];

/** Every .ts file under `dir`, repo-relative. */
function sources(dir: string): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(join(ROOT, path)).isDirectory()) return sources(path);
    return name.endsWith(".ts") ? [path] : [];
  });
}

/** Static imports and re-exports at the start of a line, then dynamic imports with a literal path. */
const STATIC = /^\s*(?:import|export)\b[^;"'`]*?\bfrom\s*["']([^"']+)["']/gm;
const SIDE_EFFECT = /^\s*import\s*["']([^"']+)["']/gm;
const DYNAMIC = /\bimport\(\s*["']([^"']+)["']\s*\)/g;

/** The relative specifiers `text` imports. */
function specifiers(text: string): string[] {
  return [...text.matchAll(STATIC), ...text.matchAll(SIDE_EFFECT), ...text.matchAll(DYNAMIC)]
    .map((m) => m[1] ?? "")
    .filter((s) => s.startsWith("."));
}

/** file -> the .ts files it imports (repo-relative); an import of a missing one is an error. Assets (.pem, .sql) are not modules here. */
function importGraph(files: readonly string[], read: (file: string) => string): Map<string, string[]> {
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const targets = specifiers(read(file))
      .filter((s) => s.endsWith(".ts"))
      .map((s) => relative(ROOT, resolve(ROOT, dirname(file), s)));
    const missing = targets.filter((t) => !known.has(t) && !t.startsWith(".."));
    if (missing.length > 0) throw new Error(`${file} imports files not found: ${missing.join(", ")}`);
    graph.set(file, [...new Set(targets.filter((t) => known.has(t)))].sort());
  }
  return graph;
}

/** Each import cycle once, as "a.ts -> b.ts -> a.ts" (one cycle per strongly connected set). */
function cycles(graph: ReadonlyMap<string, readonly string[]>): string[] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[] = [];
  const visit = (v: string) => {
    index.set(v, index.size);
    low.set(v, index.get(v) as number);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) as number, index.get(w) as number));
    }
    if (low.get(v) !== index.get(v)) return;
    const members = new Set<string>();
    for (let w = stack.pop(); w !== undefined; w = w === v ? undefined : stack.pop()) {
      onStack.delete(w);
      members.add(w);
    }
    if (members.size > 1 || (graph.get(v) ?? []).includes(v)) found.push(pathWithin(graph, members, v));
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found.sort();
}

/** One cycle through `start` inside `members` (breadth first: the shortest). */
function pathWithin(graph: ReadonlyMap<string, readonly string[]>, members: ReadonlySet<string>, start: string): string {
  const from = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const v = queue.shift() as string;
    for (const w of graph.get(v) ?? []) {
      if (!members.has(w)) continue;
      if (w === start) {
        const path = [start];
        for (let u = v; u !== start; u = from.get(u) as string) path.splice(1, 0, u);
        return [...path, start].join(" -> ");
      }
      if (!from.has(w)) {
        from.set(w, v);
        queue.push(w);
      }
    }
  }
  return start;
}

/** The folder a file belongs to for the layer rules (subfolders belong to their domain folder). */
function folderOf(file: string): string {
  const parts = file.split("/");
  if (parts[0] === "attestation") return parts.slice(0, 2).join("/");
  return parts.length > 2 ? parts.slice(0, 2).join("/") : "src";
}

const LEAVES = ["src", "src/crypto", "src/errors", "src/protocol", "src/validation", "src/types"];
const DOMAIN_BASE = [...LEAVES, "src/observability", "src/store", "attestation/provider", "attestation/cvm"];

/**
 * Which folders each folder may import (besides itself; `*`: any, `!x`: except x). `src` is the
 * top-level version.ts. Only coordinator/ imports api/, and nothing imports coordinator/. config/
 * imports the domains' types; the only domains that read config/ are the start-up ones (attestation/'s
 * configuration binding, tls/) and the provider tool (the shared setting reader).
 */
const MAY_IMPORT: Readonly<Record<string, readonly string[]>> = {
  "src/coordinator": ["*"],
  "src/api": ["*", "!src/coordinator"],
  "src/config": [...DOMAIN_BASE, "src/attestation", "src/auth", "src/limits", "src/mdm", "src/tls"],
  "src/admin": [...DOMAIN_BASE, "src/auth", "src/billing", "src/catalog", "src/limits"],
  // The console's server side (sessions, sign-in): account holders' view of the domains.
  "src/console": [...DOMAIN_BASE, "src/admin", "src/auth", "src/billing", "src/catalog", "src/fleet", "src/limits"],
  "src/inference": [...DOMAIN_BASE, "src/auth", "src/billing", "src/catalog", "src/fleet", "src/limits"],
  "src/catalog": [...DOMAIN_BASE, "src/billing", "src/fleet"],
  "src/fleet": [...DOMAIN_BASE, "src/billing"],
  // Routing across replicas (NATS): nothing below coordinator/ imports it until dispatch is wired.
  "src/cluster": [...DOMAIN_BASE, "src/billing", "src/fleet"],
  "src/billing": [...DOMAIN_BASE],
  "src/limits": [...DOMAIN_BASE],
  "src/auth": [...DOMAIN_BASE, "src/limits"],
  // MDM enrolment and the MDM server side (issue 23): the store, auth's hashing; the attestation checks
  // it is given as functions.
  "src/mdm": [...DOMAIN_BASE, "src/auth"],
  // The console's server side: account-scoped operations over the admin service, the fleet, the device flow.
  "src/attestation": [...DOMAIN_BASE, "src/config"],
  "src/tls": [...DOMAIN_BASE, "src/config"],
  // The console's server side (issue 22): sessions, sign-in, its API service, the embedded assets.
  "src/observability": [...LEAVES],
  "src/store": [...LEAVES],
  // The provider binary: none of the coordinator's domains.
  "src/provider": [...LEAVES, "src/observability", "src/config", "attestation/provider", "attestation/cvm"],
  "src/crypto": ["src/errors"],
  "src/protocol": [],
  "src/errors": [],
  "src/validation": ["src/errors"],
  "src/types": [],
  src: [],
  "attestation/provider": [],
  "attestation/cvm": ["attestation/provider"],
};

function allowed(from: string, to: string): boolean {
  if (from === to) return true;
  const rule = MAY_IMPORT[from];
  if (rule === undefined) return false;
  if (rule.includes(`!${to}`)) return false;
  return rule.includes("*") || rule.includes(to);
}

/** Every file reachable from `entries` (static and dynamic imports). */
function reachable(graph: ReadonlyMap<string, readonly string[]>, entries: readonly string[]): string[] {
  const seen = new Set<string>();
  const visit = (file: string) => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const next of graph.get(file) ?? []) visit(next);
  };
  for (const entry of entries) visit(entry);
  return [...seen].sort();
}

/** Whether `text` imports a test-only HPKE suite: @hpke/dhkem-x25519 (noble), or @hpke/core's WebCrypto KEM. */
function importsTestOnlySuite(text: string): boolean {
  if (/\bfrom\s*["']@hpke\/dhkem-x25519["']/.test(text)) return true;
  return [...text.matchAll(/\bimport\s*(?:type\s*)?\{([^}]*)\}\s*from\s*["']@hpke\/core["']/g)].some((m) =>
    /(^|[\s,])DhkemX25519HkdfSha256\b/.test(m[1] ?? ""),
  );
}

describe("architecture: imports", () => {
  const files = ROOTS.flatMap(sources).sort();
  const graph = importGraph(files, (file) => readFileSync(join(ROOT, file), "utf8"));

  test("the graph is read (a sanity floor: files, and edges of each kind)", () => {
    const edges = [...graph.values()].flat();
    expect(files.length).toBeGreaterThan(100);
    expect(edges.length).toBeGreaterThan(300);
    expect(graph.get("src/coordinator/main.ts")).toContain("src/coordinator/cli.ts"); // dynamic import
  });

  test("no file-level import cycle", () => {
    expect(cycles(graph)).toEqual([]);
  });

  test("every folder has a row in the table", () => {
    expect([...new Set(files.map(folderOf))].filter((f) => MAY_IMPORT[f] === undefined)).toEqual([]);
  });

  test("folders import only what the table allows (no domain imports api/ or coordinator/)", () => {
    const violations = [...graph].flatMap(([file, targets]) =>
      targets.filter((t) => !allowed(folderOf(file), folderOf(t))).map((t) => `${file} -> ${t}`),
    );
    expect(violations).toEqual([]);
  });

  test("the coordinator and provider binaries reach no test-only HPKE suite", () => {
    const files = reachable(graph, ["src/coordinator/main.ts", "src/provider/main.ts"]);
    expect(files).toContain("src/crypto/seal.ts");
    expect(files.filter((file) => importsTestOnlySuite(readFileSync(join(ROOT, file), "utf8")))).toEqual([]);
  });

  test("the suite check finds both test-only suites where they are imported (the check can fail)", () => {
    expect(importsTestOnlySuite(readFileSync(join(ROOT, "test/support/hpke-suites.ts"), "utf8"))).toBe(true);
    expect(importsTestOnlySuite('import { DhkemX25519HkdfSha256 } from "@hpke/core";')).toBe(true);
    expect(importsTestOnlySuite('import { HkdfSha256 } from "@hpke/dhkem-x25519";')).toBe(true);
    expect(importsTestOnlySuite(readFileSync(join(ROOT, "src/crypto/seal.ts"), "utf8"))).toBe(false);
  });

  test("the cycle finder names a cycle (a -> b -> c -> a) and ignores a diamond", () => {
    const g = new Map([
      ["a", ["b"]],
      ["b", ["c", "d"]],
      ["c", ["a"]],
      ["d", []],
      ["e", ["d", "f"]],
      ["f", ["d"]],
    ]);
    expect(cycles(g)).toEqual(["a -> b -> c -> a"]);
  });

  test("import forms: multi-line, type-only, re-export, side effect, dynamic; not prose", () => {
    const text = [
      'import {\n  a,\n  type B,\n} from "./one.ts";',
      'import type { C } from "../two.ts";',
      'export { d } from "./three.ts";',
      'import "./four.ts";',
      'const m = await import("./five.ts");',
      'import { x } from "node:fs";',
      ' * the words import and from in a comment: "./six.ts"',
    ].join("\n");
    expect(specifiers(text).sort()).toEqual(["../two.ts", "./five.ts", "./four.ts", "./one.ts", "./three.ts"]);
  });
});
