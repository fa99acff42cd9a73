/**
 * The cluster and MDM links load only when the configuration turns them on (src/coordinator/links.ts):
 * a coordinator serving on SQLite, opened as the serve command opens it in a fresh process, has none of
 * postgres.js, NATS or the MDM's plist and XML libraries among its modules (the same check finds
 * postgres.js once the Postgres store is imported: it can fail); createApp refuses a configuration whose
 * link was not loaded, naming it.
 */
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadLinks, needLink } from "../../../src/coordinator/links.ts";

const ROOT = join(import.meta.dir, "../../..");
const OPTIONAL = [
  "node_modules/postgres/",
  "node_modules/@nats-io/",
  "node_modules/plist/",
  "node_modules/@xmldom/",
  "node_modules/xmlbuilder/",
];

describe("links", () => {
  test("a coordinator on SQLite loads neither Postgres, NATS nor the MDM's libraries", async () => {
    const dir = mkdtempSync(join(tmpdir(), "umbra-links-"));
    const script = `
      const { loadConfig } = await import(${JSON.stringify(join(ROOT, "src/config/config.ts"))});
      const { openServing } = await import(${JSON.stringify(join(ROOT, "src/coordinator/boot.ts"))});
      const optional = ${JSON.stringify(OPTIONAL)};
      const loaded = () => optional.filter((m) => Object.keys(require.cache).some((k) => k.includes(m)));
      const env = { UMBRA_DB: ${JSON.stringify(join(dir, "umbra.db"))}, UMBRA_ADMIN_TOKEN: "links-test-admin-token-0123456789abcdef" };
      const serving = await openServing(loadConfig({}, env, "development"));
      const served = loaded();
      serving.app.close();
      await import(${JSON.stringify(join(ROOT, "src/store/pg/index.ts"))});
      console.log(JSON.stringify({ served, afterPg: loaded() }));
      process.exit(0);
    `;
    try {
      const proc = Bun.spawn([process.execPath, "-e", script], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
      const [out, err] = [await new Response(proc.stdout).text(), await new Response(proc.stderr).text()];
      expect(await proc.exited, err).toBe(0);
      const result = JSON.parse(out.trim().split("\n").at(-1) ?? "{}") as { served: string[]; afterPg: string[] };
      expect(result.served).toEqual([]);
      expect(result.afterPg).toContain("node_modules/postgres/");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("loadLinks loads what the configuration turns on, and only that", async () => {
    expect(await loadLinks({ cluster: null, mdm: null, mdmEnrolment: null })).toEqual({});
    const cluster = await loadLinks({ cluster: {} as never, mdm: null, mdmEnrolment: null });
    expect(Object.keys(cluster)).toEqual(["cluster"]);
    expect(typeof cluster.cluster?.startCluster).toBe("function");
    const mdm = await loadLinks({ cluster: null, mdm: {} as never, mdmEnrolment: {} as never });
    expect(Object.keys(mdm)).toEqual(["mdm"]);
    expect(typeof mdm.mdm?.startMdm).toBe("function");
  });

  test("a link the configuration needs but nobody loaded is refused, named", () => {
    expect(() => needLink({}, "cluster")).toThrow("the cluster link is not loaded");
    expect(() => needLink({}, "mdm")).toThrow("the mdm link is not loaded");
  });
});
