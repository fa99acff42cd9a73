import "reflect-metadata";
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { sha256 } from "@noble/hashes/sha2.js";
import { X509Certificate } from "@peculiar/x509";
import {
  AMD_ARK_SPKI_SHA256,
  AMD_ROOT_PINS,
  createDevChain,
  isPinnedAmdArk,
  loadAmdRoots,
  loadPinnedRoots,
  type RootPin,
  spkiSha256,
} from "../../../attestation/cvm/index.ts";
import { checkOf } from "../../fixtures/attestation-cvm/helpers.ts";

const ROOTS = join(import.meta.dir, "../../../attestation/cvm/roots");
const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

describe("AMD roots", () => {
  test("load Milan and Genoa, each ARK self-signed and ASK signed by its ARK", async () => {
    const roots = await loadAmdRoots();
    expect(
      roots.map((r) => ({ name: r.name, ark: r.ark.subject, ask: r.ask.subject, askIssuer: r.ask.issuer, development: r.development })),
    ).toEqual([
      {
        name: "Milan",
        ark: "OU=Engineering, C=US, L=Santa Clara, ST=CA, O=Advanced Micro Devices, CN=ARK-Milan",
        ask: "OU=Engineering, C=US, L=Santa Clara, ST=CA, O=Advanced Micro Devices, CN=SEV-Milan",
        askIssuer: "OU=Engineering, C=US, L=Santa Clara, ST=CA, O=Advanced Micro Devices, CN=ARK-Milan",
        development: false,
      },
      {
        name: "Genoa",
        ark: "OU=Engineering, C=US, L=Santa Clara, ST=CA, O=Advanced Micro Devices, CN=ARK-Genoa",
        ask: "OU=Engineering, C=US, L=Santa Clara, ST=CA, O=Advanced Micro Devices, CN=SEV-Genoa",
        askIssuer: "OU=Engineering, C=US, L=Santa Clara, ST=CA, O=Advanced Micro Devices, CN=ARK-Genoa",
        development: false,
      },
    ]);
  });

  test("the PEM files hash to the published ARK fingerprints", () => {
    const digest = (file: string) => hex(sha256(new Uint8Array(new X509Certificate(readFileSync(join(ROOTS, file), "utf8")).rawData)));
    expect({ milan: digest("ark-milan.pem"), genoa: digest("ark-genoa.pem") }).toEqual({
      milan: "69d063b45344d26a2e94e1f4210de49ef555308287d4c174445c95639a540bcd",
      genoa: "4c6598d19c18719c5dfd4a7d335f674e5bfe1d8f800cea2cf270c10d103db2f1",
    });
  });

  test("one family's ASK does not verify under the other family's ARK", async () => {
    const [milan, genoa] = await loadAmdRoots();
    expect(await milan!.ask.verify({ publicKey: genoa!.ark.publicKey, signatureOnly: true })).toBe(false);
    expect(await genoa!.ask.verify({ publicKey: milan!.ark.publicKey, signatureOnly: true })).toBe(false);
  });

  test("pinning is by key: AMD ARKs are pinned, a development ARK is not", async () => {
    const roots = await loadAmdRoots();
    expect(roots.map((r) => isPinnedAmdArk(r.ark))).toEqual([true, true]);
    expect(roots.map((r) => spkiSha256(r.ark))).toEqual([...AMD_ARK_SPKI_SHA256]);
    const dev = await createDevChain();
    expect(isPinnedAmdArk(dev.ark)).toBe(false);
    expect(dev.root.development).toBe(true);
  });

  describe("a root that does not match its pin refuses to load", () => {
    const [milan, genoa] = AMD_ROOT_PINS as [RootPin, RootPin];
    test.each([
      ["a missing certificate", { ...milan, arkPem: "" }],
      ["not a certificate", { ...milan, arkPem: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n" }],
      ["the ASK in the ARK's place", { ...milan, arkPem: milan.askPem }],
      ["another family's ASK", { ...milan, askPem: genoa.askPem }],
      ["another ARK key pin", { ...milan, arkSpkiSha256: genoa.arkSpkiSha256 }],
      ["an ASK pinned but not signed by the ARK", { ...milan, askPem: genoa.askPem, askSha256: genoa.askSha256 }],
    ])("%s", async (_label, pin) => {
      expect(await checkOf(() => loadPinnedRoots([pin]))).toBe("roots_load");
    });

    test("an ARK that is not self-signed", async () => {
      const dev = await createDevChain();
      const other = await createDevChain({ askSigner: dev.arkKeys });
      // other.ask is issued by other's ARK name but signed by dev's ARK key: use it as a pinned "ARK".
      const pem = (c: { toString(f: "pem"): string }) => c.toString("pem");
      const digest = (c: { rawData: ArrayBuffer }) => hex(sha256(new Uint8Array(c.rawData)));
      const pin: RootPin = {
        name: "Broken",
        arkPem: pem(other.ask),
        askPem: pem(other.ask),
        arkSha256: digest(other.ask),
        askSha256: digest(other.ask),
        arkSpkiSha256: spkiSha256(other.ask),
      };
      expect(await checkOf(() => loadPinnedRoots([pin]))).toBe("roots_load");
    });
  });
});
