import { beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import {
  createConfigfsTsmSource,
  createDevChain,
  createSnpVerifier,
  type DevChain,
  devReportBody,
  encodeCertTable,
  encodeSnpReport,
  signSnpReport,
} from "../../../attestation/cvm/index.ts";
import {
  checkOf,
  FakeTsmKernel,
  type FakeTsmOptions,
  fixedClock,
  MEASUREMENT,
  REPORT_DATA,
  tempDir,
} from "../../fixtures/attestation-cvm/helpers.ts";

let chain: DevChain;
beforeAll(async () => {
  chain = await createDevChain();
});

/** A fake SEV-SNP guest: the report over whatever was written to inblob, and the host's certificate table. */
const sevGuest = (extra: Partial<FakeTsmOptions> = {}): FakeTsmOptions => ({
  provider: "sev_guest",
  respond: async (inblob, privlevel) => ({
    outblob: await signSnpReport(
      encodeSnpReport(devReportBody(chain, MEASUREMENT, inblob, { vmpl: privlevel === null ? 0 : Number(privlevel) })),
      chain.vcekKeys.privateKey,
    ),
    auxblob: encodeCertTable({ vcek: chain.endorsements[0], ask: chain.endorsements[1], ark: chain.endorsements[2] }),
  }),
  ...extra,
});

function setup(options: FakeTsmOptions, platform: "sev-snp" | "tdx" = "sev-snp", privlevel?: number) {
  const dir = tempDir();
  const kernel = new FakeTsmKernel(options);
  const source = createConfigfsTsmSource({ platform, root: dir.path, fs: kernel, ...(privlevel === undefined ? {} : { privlevel }) });
  return { dir, kernel, source };
}

describe("configfs-tsm source", () => {
  test("asks the kernel in order, removes its entry, and its evidence verifies", async () => {
    const { dir, kernel, source } = setup(sevGuest());
    using _ = dir;
    const ev = await source.get(REPORT_DATA);
    expect(ev.platform).toBe("sev-snp");
    expect(ev.endorsements).toEqual([...chain.endorsements]);
    const entry = kernel.calls[0]!.slice("mkdir ".length);
    expect(entry).toMatch(/^umbra-[0-9a-f]{24}$/);
    expect(kernel.calls).toEqual([
      `mkdir ${entry}`,
      "read provider",
      "write inblob",
      "read generation",
      "read outblob",
      "read auxblob",
      "read generation",
      `rmdir ${entry}`,
    ]);
    expect(readdirSync(dir.path)).toEqual([]);
    const verifier = createSnpVerifier({ roots: [chain.root], mode: "development", clock: fixedClock() });
    const result = await verifier.verify(ev.evidence, ev.endorsements, {
      measurement: MEASUREMENT,
      reportData: REPORT_DATA,
      allowSmt: true,
    });
    expect(result.report.reportData).toEqual(REPORT_DATA);
  });

  test("writes privlevel before inblob when a VMPL is configured", async () => {
    const { dir, kernel, source } = setup(sevGuest(), "sev-snp", 2);
    using _ = dir;
    const ev = await source.get(REPORT_DATA);
    expect(kernel.calls.slice(1, 5)).toEqual(["read provider", "write privlevel", "write inblob", "read generation"]);
    const verifier = createSnpVerifier({ roots: [chain.root], mode: "development", clock: fixedClock() });
    const expected = { measurement: MEASUREMENT, reportData: REPORT_DATA, allowSmt: true, vmpl: 2 };
    expect((await verifier.verify(ev.evidence, ev.endorsements, expected)).report.vmpl).toBe(2);
  });

  test("a host without certificates gives no endorsements", async () => {
    const base = sevGuest();
    const { dir, source } = setup({ ...base, respond: async (i, p) => ({ outblob: (await base.respond(i, p)).outblob }) });
    using _ = dir;
    expect((await source.get(REPORT_DATA)).endorsements).toEqual([]);
  });

  test("a TDX guest returns the quote and no auxblob is read", async () => {
    const quote = new Uint8Array([4, 0, 2, 0, 0x81]);
    const { dir, kernel, source } = setup({ provider: "tdx_guest", respond: async () => ({ outblob: quote }) }, "tdx");
    using _ = dir;
    expect(await source.get(REPORT_DATA)).toEqual({ platform: "tdx", evidence: quote, endorsements: [] });
    expect(kernel.calls).not.toContain("read auxblob");
  });

  test("refuses another provider, and still removes its entry", async () => {
    const { dir, kernel, source } = setup({ ...sevGuest(), provider: "tdx_guest" });
    using _ = dir;
    expect(await checkOf(() => source.get(REPORT_DATA))).toBe("configfs_tsm_provider");
    expect(kernel.calls).not.toContain("write inblob");
    expect(kernel.calls.at(-1)).toStartWith("rmdir ");
    expect(readdirSync(dir.path)).toEqual([]);
  });

  test("detects another writer through the generation counter", async () => {
    const { dir, source } = setup(sevGuest({ raceOnRead: true }));
    using _ = dir;
    expect(await checkOf(() => source.get(REPORT_DATA))).toBe("configfs_tsm_race");
    expect(readdirSync(dir.path)).toEqual([]);
  });

  test("reports a failed read as an I/O error and removes its entry", async () => {
    const { dir, source } = setup(sevGuest({ outblobError: "EIO" }));
    using _ = dir;
    expect(await checkOf(() => source.get(REPORT_DATA))).toBe("configfs_tsm_io");
    expect(readdirSync(dir.path)).toEqual([]);
  });

  test("a machine without configfs-tsm says so", async () => {
    using dir = tempDir();
    const source = createConfigfsTsmSource({ platform: "sev-snp", root: join(dir.path, "tsm", "report") });
    expect(await checkOf(() => source.get(REPORT_DATA))).toBe("configfs_tsm_unavailable");
    expect(existsSync(join(dir.path, "tsm"))).toBe(false);
  });

  test.each([0, 32, 63, 65])("refuses %i bytes of report data before touching the kernel", async (n) => {
    const { dir, kernel, source } = setup(sevGuest());
    using _ = dir;
    expect(await checkOf(() => source.get(new Uint8Array(n)))).toBe("report_data_length");
    expect(kernel.calls).toEqual([]);
  });

  test("refuses an out-of-range privlevel", () => {
    expect(() => createConfigfsTsmSource({ platform: "sev-snp", privlevel: 4 })).toThrow(RangeError);
  });
});
