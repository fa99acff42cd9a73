/**
 * attestation/cvm/verify-coordinator.ts without sockets (the document is handed in): the real Milan report
 * against AMD's pinned roots, development reports from the development source, and one negative test per
 * check. The TLS connection itself is tested in test/e2e/verify-attestation.test.ts.
 */
import "reflect-metadata";
import { describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { createDevSource, type DevSource, parseSnpReport, type SnpReportBody } from "../../../attestation/cvm/index.ts";
import type { ExpectedImage } from "../../../attestation/cvm/measurements.ts";
import { type CheckOutcome, type FetchedDocument, verifyCoordinatorAttestation } from "../../../attestation/cvm/verify-coordinator.ts";
import { fixedClock, flipBit, MEASUREMENT, realMilanVector } from "../../fixtures/attestation-cvm/helpers.ts";

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
const sha256 = (b: Uint8Array) => new Uint8Array(createHash("sha256").update(b).digest());
const TLS_SPKI = new Uint8Array(91).fill(7);
const SEALING = new Uint8Array(32).fill(9);

function document(evidence: Uint8Array, endorsements: readonly Uint8Array[], extra: Record<string, unknown>): FetchedDocument {
  const reportData = parseSnpReport(evidence).reportData;
  const body = {
    platform: "sev-snp",
    evidence: b64(evidence),
    endorsements: endorsements.map(b64),
    report_data: { hex: hex(reportData) },
    expected_measurement: null,
    sealing_public_key: Buffer.from(SEALING).toString("base64url"),
    tls_public_key_bound: true,
    ...extra,
  };
  return { status: 200, body: JSON.stringify(body), tlsPublicKeySpki: TLS_SPKI };
}

async function devDocument(overrides: Partial<SnpReportBody> = {}, source?: DevSource): Promise<FetchedDocument> {
  const dev = source ?? (await createDevSource({ measurement: MEASUREMENT, overrides }));
  const reportData = new Uint8Array(64);
  reportData.set(sha256(TLS_SPKI), 0);
  reportData.set(sha256(SEALING), 32);
  const ev = await dev.get(reportData);
  const root = dev.roots[0]!;
  return document(ev.evidence, ev.endorsements, {
    platform: "dev",
    development: true,
    development_root: { name: root.name, ark: b64(new Uint8Array(root.ark.rawData)), ask: b64(new Uint8Array(root.ask.rawData)) },
  });
}

const DEV_IMAGE: ExpectedImage = {
  shapes: [
    { name: "other", measurement: "ab".repeat(48) },
    { name: "dev-shape", measurement: hex(MEASUREMENT) },
  ],
  policy: 0x30000n,
};

const statuses = (checks: readonly CheckOutcome[]) => Object.fromEntries(checks.map((c) => [c.check, c.status]));
const run = (fetched: FetchedDocument, expected: ExpectedImage = DEV_IMAGE, allowDevelopment = true) =>
  verifyCoordinatorAttestation("https://coordinator.test", {
    expected,
    allowDevelopment,
    fetchDocument: async () => fetched,
    now: fixedClock().now,
  });

describe("a development report", () => {
  test("passes every check and names the shape it matched", async () => {
    const result = await run(await devDocument());
    expect({ ...result, checks: statuses(result.checks) }).toEqual({
      url: "https://coordinator.test/v1/attestation",
      ok: true,
      platform: "dev",
      development: true,
      shape: "dev-shape",
      measurement: hex(MEASUREMENT),
      reportData: hex(sha256(TLS_SPKI)) + hex(sha256(SEALING)),
      checks: { document: "pass", signature_chain: "pass", policy: "pass", measurement: "pass", tls_key: "pass", sealing_key: "pass" },
    });
  });

  test("document: a 503 and a body that is not an attestation document", async () => {
    const results = await Promise.all([
      run({ status: 503, body: "{}", tlsPublicKeySpki: null }),
      run({ status: 200, body: "not json", tlsPublicKeySpki: null }),
    ]);
    expect(results.map((r) => [r.ok, r.checks[0], statuses(r.checks)])).toEqual([
      [
        false,
        { check: "document", status: "fail", detail: "https://coordinator.test/v1/attestation answered 503" },
        { document: "fail", signature_chain: "skip", policy: "skip", measurement: "skip", tls_key: "skip", sealing_key: "skip" },
      ],
      [
        false,
        { check: "document", status: "fail", detail: "the answer is not JSON" },
        { document: "fail", signature_chain: "skip", policy: "skip", measurement: "skip", tls_key: "skip", sealing_key: "skip" },
      ],
    ]);
  });

  test("signature_chain: refused without allowDevelopment, and a tampered report", async () => {
    const doc = await devDocument();
    const refused = await run(doc, DEV_IMAGE, false);
    const body = JSON.parse(doc.body) as { evidence: string };
    const tampered = await run({
      ...doc,
      body: JSON.stringify({ ...body, evidence: b64(flipBit(new Uint8Array(Buffer.from(body.evidence, "base64")), 0x90)) }),
    });
    expect([refused.checks[1], tampered.checks[1], statuses(tampered.checks)]).toEqual([
      {
        check: "signature_chain",
        status: "fail",
        detail: "development evidence, signed by a root the coordinator generated itself",
        cause: "dev_root_in_production",
      },
      { check: "signature_chain", status: "fail", detail: expect.any(String), cause: "report_signature" },
      { document: "pass", signature_chain: "fail", policy: "skip", measurement: "skip", tls_key: "skip", sealing_key: "skip" },
    ]);
  });

  test("policy: debugging allowed, a migration agent allowed, or not the published policy", async () => {
    const [debug, migration, other] = await Promise.all([
      run(await devDocument({ policy: 0x30000n | (1n << 19n) })),
      run(await devDocument({ policy: 0x30000n | (1n << 18n) })),
      run(await devDocument(), { ...DEV_IMAGE, policy: 0x30001n }),
    ]);
    expect([debug.checks[2], migration.checks[2], other.checks[2]]).toEqual([
      { check: "policy", status: "fail", detail: "policy_debug: guest policy allows debugging (bit 19)", cause: "policy_debug" },
      {
        check: "policy",
        status: "fail",
        detail: "policy_migration: guest policy allows a migration agent (bit 18)",
        cause: "policy_migration",
      },
      { check: "policy", status: "fail", detail: "policy 0x30000 differs from the published 0x30001" },
    ]);
  });

  test("measurement: no published shape matches, or not the named one", async () => {
    const doc = await devDocument();
    const result = await run(doc, { ...DEV_IMAGE, shapes: [DEV_IMAGE.shapes[0]!] });
    expect([result.ok, result.shape, result.checks[3]]).toEqual([
      false,
      null,
      { check: "measurement", status: "fail", detail: `${hex(MEASUREMENT)} matches no published shape (other)` },
    ]);
  });

  test("tls_key: the connection presented another key", async () => {
    const doc = await devDocument();
    const result = await run({ ...doc, tlsPublicKeySpki: new Uint8Array(91).fill(8) });
    expect(result.checks[4]).toEqual({
      check: "tls_key",
      status: "fail",
      detail: "report data does not bind the key of this TLS connection",
      cause: "report_data",
    });
  });

  test("sealing_key: the document advertises another key", async () => {
    const doc = await devDocument();
    const body = JSON.parse(doc.body) as Record<string, unknown>;
    const swapped = {
      ...doc,
      body: JSON.stringify({ ...body, sealing_public_key: Buffer.from(new Uint8Array(32).fill(1)).toString("base64url") }),
    };
    expect((await run(swapped)).checks[5]).toEqual({
      check: "sealing_key",
      status: "fail",
      detail: "report data does not bind the advertised sealing key",
      cause: "report_data",
    });
  });
});

describe("the real Milan report", () => {
  const milan = realMilanVector();
  const parsed = parseSnpReport(milan.report);
  const image: ExpectedImage = { shapes: [{ name: "milan-real", measurement: hex(parsed.measurement) }], policy: parsed.policy };

  test("chains to AMD's pinned Milan root and matches its shape; its report data binds other keys than ours", async () => {
    const result = await run(document(milan.report, [milan.vcek], {}), image, false);
    expect(result.checks.map((c) => [c.check, c.status, c.detail])).toEqual([
      ["document", "pass", "sev-snp attestation document"],
      ["signature_chain", "pass", "VCEK -> ASK -> ARK (Milan)"],
      ["policy", "pass", `0x${parsed.policy.toString(16)}: no debug, no migration agent, VMPL 0`],
      ["measurement", "pass", "matches shape milan-real"],
      ["tls_key", "fail", "report data does not bind the key of this TLS connection"],
      ["sealing_key", "fail", "report data does not bind the advertised sealing key"],
    ]);
  });

  test("a flipped measurement bit breaks the signature", async () => {
    const result = await run(document(flipBit(milan.report, 0x90), [milan.vcek], {}), image, false);
    expect([result.ok, result.checks[1]?.cause]).toEqual([false, "report_signature"]);
  });
});
