import { beforeAll, describe, expect, test } from "bun:test";
import { createSnpVerifier, loadAmdRoots, parseSnpReport, type SnpExpectations, type SnpVerifier } from "../../../attestation/cvm/index.ts";
import { checkOf, fixedClock, flipBit, realMilanVector } from "../../fixtures/attestation-cvm/helpers.ts";

describe("a real SEV-SNP report from AMD Milan hardware", () => {
  let production: SnpVerifier;
  let milan: { report: Uint8Array; vcek: Uint8Array };
  let real: SnpExpectations;

  beforeAll(async () => {
    production = createSnpVerifier({ roots: await loadAmdRoots(), mode: "production", clock: fixedClock() });
    milan = realMilanVector();
    const parsed = parseSnpReport(milan.report);
    real = { measurement: parsed.measurement, reportData: parsed.reportData, allowSmt: true };
  });

  test("verifies to the pinned ARK-Milan", async () => {
    const result = await production.verify(milan.report, [milan.vcek], real);
    expect(result.chain.root.name).toBe("Milan");
    expect(result.report.reportedTcb).toEqual({ bootloader: 3, tee: 0, snp: 8, microcode: 115 });
  });

  test("a flipped bit is refused", async () => {
    expect(await checkOf(() => production.verify(flipBit(milan.report, 0x90), [milan.vcek], real))).toBe("report_signature");
  });

  test("the VCEK has expired by 2030", async () => {
    const later = createSnpVerifier({
      roots: await loadAmdRoots(),
      mode: "production",
      clock: fixedClock(Date.parse("2030-01-01T00:00:00Z")),
    });
    expect(await checkOf(() => later.verify(milan.report, [milan.vcek], real))).toBe("certificate_validity");
  });

  test("it does not verify under the Genoa root alone", async () => {
    const genoa = (await loadAmdRoots()).filter((r) => r.name === "Genoa");
    const v = createSnpVerifier({ roots: genoa, mode: "production", clock: fixedClock() });
    expect(await checkOf(() => v.verify(milan.report, [milan.vcek], real))).toBe("root_unknown");
  });

  test("it runs with SMT, so a no-SMT policy refuses it", async () => {
    expect(await checkOf(() => production.verify(milan.report, [milan.vcek], { ...real, allowSmt: false }))).toBe("policy_smt");
  });
});
