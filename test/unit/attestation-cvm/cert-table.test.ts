import { describe, expect, test } from "bun:test";
import { CERT_GUID, encodeCertTable, endorsementsFromCertTable, parseCertTable } from "../../../attestation/cvm/index.ts";
import { checkOf } from "../../fixtures/attestation-cvm/helpers.ts";

const vcek = new Uint8Array([0x30, 1, 2, 3]);
const ask = new Uint8Array([0x30, 4, 5]);
const ark = new Uint8Array([0x30, 6]);

describe("SEV-SNP certificate table", () => {
  test("golden: the VCEK GUID is stored in the byte order of its string form, offsets from the table start", () => {
    const table = encodeCertTable({ vcek });
    expect(Buffer.from(table).toString("hex")).toBe(`63da758de6644564adc5f4b93be8accd${"30000000"}${"04000000"}${"00".repeat(24)}30010203`);
  });

  test("round-trips VCEK, ASK and ARK and yields them in that order", () => {
    const table = encodeCertTable({ ark, vcek, ask });
    expect(parseCertTable(table)).toEqual({ vcek, ask, ark });
    expect(endorsementsFromCertTable(table)).toEqual([vcek, ask, ark]);
  });

  test("an empty auxblob is an empty table", () => {
    expect(endorsementsFromCertTable(new Uint8Array(0))).toEqual([]);
    expect(endorsementsFromCertTable(new Uint8Array(24))).toEqual([]);
  });

  test("accepts PEM entries and returns DER", () => {
    const pem = new TextEncoder().encode(
      `-----BEGIN CERTIFICATE-----\n${Buffer.from(ask).toString("base64")}\n-----END CERTIFICATE-----\n`,
    );
    expect(parseCertTable(encodeCertTable({ vcek, ask: pem }))).toEqual({ vcek, ask });
  });

  test("skips unknown GUIDs", () => {
    const table = encodeCertTable({ vcek });
    const withCrl = new Uint8Array(table.length + 24);
    withCrl.set(Buffer.from("92f81bc358114d3d97ffd19e43a2a1c0", "hex"), 0); // an entry for another GUID
    new DataView(withCrl.buffer).setUint32(16, 72, true);
    new DataView(withCrl.buffer).setUint32(20, 4, true);
    withCrl.set(table.subarray(0, 24), 24); // the VCEK entry, its offset moved by 24
    new DataView(withCrl.buffer).setUint32(24 + 16, 72, true);
    withCrl.set(vcek, 72);
    expect(parseCertTable(withCrl)).toEqual({ vcek });
  });

  test("refuses a table without the terminating entry", async () => {
    const table = encodeCertTable({ vcek });
    expect(await checkOf(() => parseCertTable(table.subarray(0, 30)))).toBe("cert_table");
    expect(await checkOf(() => parseCertTable(new Uint8Array(10).fill(1)))).toBe("cert_table");
  });

  test("refuses entries outside the data", async () => {
    const table = encodeCertTable({ vcek });
    const past = table.slice();
    new DataView(past.buffer).setUint32(20, 100, true);
    expect(await checkOf(() => parseCertTable(past))).toBe("cert_table");
    const intoHeader = table.slice();
    new DataView(intoHeader.buffer).setUint32(16, 0, true);
    expect(await checkOf(() => parseCertTable(intoHeader))).toBe("cert_table");
    const empty = table.slice();
    new DataView(empty.buffer).setUint32(20, 0, true);
    expect(await checkOf(() => parseCertTable(empty))).toBe("cert_table");
  });

  test("refuses a repeated role", async () => {
    const one = encodeCertTable({ vcek });
    const twice = new Uint8Array(24 * 3 + vcek.length);
    twice.set(one.subarray(0, 24), 0);
    twice.set(one.subarray(0, 24), 24);
    new DataView(twice.buffer).setUint32(16, 72, true);
    new DataView(twice.buffer).setUint32(24 + 16, 72, true);
    twice.set(vcek, 72);
    expect(await checkOf(() => parseCertTable(twice))).toBe("cert_table");
  });

  test("refuses a host that only offers a VLEK", async () => {
    expect(CERT_GUID.vlek).toBe("a8074bc2-a25a-483e-aae6-39c045a0b8a1");
    expect(await checkOf(() => endorsementsFromCertTable(encodeCertTable({ vlek: vcek, ask, ark })))).toBe("cert_table");
  });

  test("refuses a malformed PEM entry", async () => {
    const bad = new TextEncoder().encode("-----BEGIN CERTIFICATE-----\n!!!\n");
    expect(await checkOf(() => parseCertTable(encodeCertTable({ vcek: bad })))).toBe("cert_table");
  });
});
