/**
 * The SEV-SNP certificate table a host hands to the guest with an extended report (GHCB specification,
 * publication 56421, "SNP Extended Guest Request"); Linux configfs-tsm returns it as `auxblob`.
 *
 * Format: a list of 24-byte entries, then the certificate bytes.
 *   entry: GUID (16 bytes, in the byte order of its string form), offset (u32 LE), length (u32 LE)
 *   the list ends with an all-zero entry; offsets count from the start of the table.
 * GUIDs: VCEK 63da758d-e664-4564-adc5-f4b93be8accd, ASK 4ab7b379-bbac-4fe4-a02f-05aef327c782,
 *        ARK c0b406a4-a803-4952-9743-3fb6014cd0ae, VLEK a8074bc2-a25a-483e-aae6-39c045a0b8a1.
 * Other GUIDs (CRLs, vendor data) are skipped. Some hosts store PEM instead of DER: both are accepted and
 * returned as DER.
 *
 * Invariants: every entry must lie inside the table and not overlap the entry list; a table without the
 * terminating entry is refused (cert_table).
 */

import { CvmAttestationError, ensure } from "./errors.ts";

export const CERT_GUID = {
  vcek: "63da758d-e664-4564-adc5-f4b93be8accd",
  ask: "4ab7b379-bbac-4fe4-a02f-05aef327c782",
  ark: "c0b406a4-a803-4952-9743-3fb6014cd0ae",
  vlek: "a8074bc2-a25a-483e-aae6-39c045a0b8a1",
} as const;

export type CertRole = keyof typeof CERT_GUID;

const ENTRY = 24;

const guidString = (b: Uint8Array) => {
  const h = Buffer.from(b).toString("hex");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
};
const guidBytes = (s: string) => Buffer.from(s.replaceAll("-", ""), "hex");

function toDer(data: Uint8Array): Uint8Array {
  const text = new TextDecoder().decode(data.subarray(0, 40));
  if (!text.startsWith("-----BEGIN CERTIFICATE-----")) return data;
  const pem = new TextDecoder().decode(data);
  const m = /-----BEGIN CERTIFICATE-----([A-Za-z0-9+/=\s]+)-----END CERTIFICATE-----/.exec(pem);
  ensure(m !== null, "cert_table", "a PEM certificate in the table is malformed");
  return new Uint8Array(Buffer.from(m[1]!.replace(/\s+/g, ""), "base64"));
}

/**
 * Parses a certificate table into DER certificates by role (VCEK, ASK, ARK, VLEK). An empty buffer is an
 * empty table. Throws CvmAttestationError cert_table on a malformed table or a repeated role.
 */
export function parseCertTable(table: Uint8Array): Partial<Record<CertRole, Uint8Array>> {
  const out: Partial<Record<CertRole, Uint8Array>> = {};
  if (table.length === 0) return out;
  const v = new DataView(table.buffer, table.byteOffset, table.byteLength);
  const entries: { guid: string; offset: number; length: number }[] = [];
  let at = 0;
  for (;;) {
    ensure(at + ENTRY <= table.length, "cert_table", "the entry list has no terminating entry");
    const guid = table.subarray(at, at + 16);
    const offset = v.getUint32(at + 16, true);
    const length = v.getUint32(at + 20, true);
    at += ENTRY;
    if (guid.every((x) => x === 0) && offset === 0 && length === 0) break;
    entries.push({ guid: guidString(guid), offset, length });
  }
  const roles = Object.entries(CERT_GUID) as [CertRole, string][];
  for (const e of entries) {
    ensure(e.length > 0 && e.offset >= at && e.offset + e.length <= table.length, "cert_table", `entry ${e.guid} lies outside the data`);
    const role = roles.find(([, g]) => g === e.guid)?.[0];
    if (!role) continue;
    ensure(out[role] === undefined, "cert_table", `the ${role} appears twice`);
    out[role] = toDer(table.slice(e.offset, e.offset + e.length));
  }
  return out;
}

/** Encodes certificates into a table (the development source and tests). */
export function encodeCertTable(certs: Partial<Record<CertRole, Uint8Array>>): Uint8Array {
  const entries = (Object.keys(CERT_GUID) as CertRole[]).filter((r) => certs[r] !== undefined);
  const headerLength = (entries.length + 1) * ENTRY;
  const total = headerLength + entries.reduce((n, r) => n + certs[r]!.length, 0);
  const out = new Uint8Array(total);
  const v = new DataView(out.buffer);
  let data = headerLength;
  entries.forEach((role, i) => {
    const cert = certs[role]!;
    out.set(guidBytes(CERT_GUID[role]), i * ENTRY);
    v.setUint32(i * ENTRY + 16, data, true);
    v.setUint32(i * ENTRY + 20, cert.length, true);
    out.set(cert, data);
    data += cert.length;
  });
  return out;
}

/** The endorsements a table yields for the verifier: VCEK, ASK, ARK (those present). Throws like parseCertTable. */
export function endorsementsFromCertTable(table: Uint8Array): Uint8Array[] {
  const certs = parseCertTable(table);
  if (certs.vlek && !certs.vcek) {
    throw new CvmAttestationError("cert_table", "the host provides a VLEK; VLEK-signed reports are not supported");
  }
  return [certs.vcek, certs.ask, certs.ark].filter((c): c is Uint8Array => c !== undefined);
}
