/**
 * docs/operations.md lists every setting: the coordinator's table ("Configuration") holds exactly the
 * entries of src/config/coordinator-settings.ts, the provider's ("Provider") those of
 * src/provider/provider-settings.ts, each row naming the entry's environment variable and flag, and a
 * whole-number setting's row its default.
 */
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { SETTINGS } from "../../../src/config/coordinator-settings.ts";
import type { SettingTable } from "../../../src/config/settings.ts";
import { PROVIDER_SETTINGS } from "../../../src/provider/provider-settings.ts";

const doc = readFileSync(join(import.meta.dir, "..", "..", "..", "docs", "operations.md"), "utf8");

interface Row {
  readonly setting: string;
  readonly default: string;
}

/** The rows of the `| environment | flag | meaning | default |` tables in the `## title` section. */
function documented(title: string): Row[] {
  const section = doc.split(/^## /m).find((s) => s.startsWith(`${title}\n`)) ?? "";
  return section
    .split("\n")
    .filter((line) => /^\| `UMBRA_/.test(line))
    .map((line) => {
      const cells = line.split(" | ");
      const env = /`(UMBRA_[A-Z0-9_]+)`/.exec(cells[0] ?? "")?.[1];
      const flag = /`(--[a-z0-9-]+)`/.exec(cells[1] ?? "")?.[1];
      return { setting: `${env} ${flag}`, default: (cells.at(-1) ?? "").replace(/ \|$/, "").trim() };
    });
}

const entries = (table: SettingTable) => Object.values(table).map((s) => `${s.env} --${s.flag}`);

describe.each([
  { title: "Configuration", table: SETTINGS as SettingTable },
  { title: "Provider (`umbra-provider`)", table: PROVIDER_SETTINGS as SettingTable },
])("docs/operations.md, $title", ({ title, table }) => {
  const rows = documented(title);
  const listed = rows.map((r) => r.setting);

  test("the section has a settings table", () => {
    expect(rows.length).toBeGreaterThan(0);
  });

  test("every setting is documented with its environment variable and flag", () => {
    expect(entries(table).filter((s) => !listed.includes(s))).toEqual([]);
  });

  test("every documented setting exists", () => {
    expect(listed.filter((s) => !entries(table).includes(s))).toEqual([]);
  });

  test("a whole-number setting's documented default is its entry's", () => {
    const ints = Object.values(table).filter((s) => s.kind === "int");
    const byName = new Map(rows.map((r) => [r.setting, r.default]));
    expect(ints.map((s) => [s.flag, byName.get(`${s.env} --${s.flag}`)])).toEqual(ints.map((s) => [s.flag, String(s.default)]));
  });
});
