/**
 * The enrolment profile (src/mdm/profile.ts) and its device identity (src/mdm/device-identity.ts): the
 * plist parsed back (payloads, AccessRights 1041, URLs with the token), stable identifiers per identity
 * key, the PKCS#12 opened with the payload's password holding a certificate the CA issued for its key in
 * the legacy encoding (algorithm OIDs), and the CMS signature checked step by step with node-forge.
 */
import { describe, expect, test } from "bun:test";
import forge from "node-forge";
import { type PlistValue, parse } from "plist";
import { SoftwareIdentity } from "../../../attestation/provider/software-identity.ts";
import { issueDeviceIdentity, loadMdmCa, MdmCaError } from "../../../src/mdm/device-identity.ts";
import {
  ACCESS_RIGHTS,
  buildProfile,
  openSigningIdentity,
  profileIdentifiers,
  SigningIdentityError,
  signProfile,
} from "../../../src/mdm/profile.ts";
import { testCa, testSigningIdentity, verifyCms } from "../../support/mdm-ca.ts";

const ca = testCa();
const mdmCa = loadMdmCa(ca.certificatePem, ca.keyPem);
const SERVER = "https://mdm.umbra.example/mdm";
const TOPIC = "com.apple.mgmt.External.test";
type Dict = { [key: string]: PlistValue };

const binary = (bytes: Uint8Array) => Buffer.from(bytes).toString("binary");

async function profileFor(key = SoftwareIdentity.generate().publicKey(65), token = "tok-123") {
  const identity = await issueDeviceIdentity(mdmCa, "enr_test", Date.now());
  const xml = buildProfile({ identityKey: key, identity, token, serverUrl: SERVER, topic: TOPIC });
  const parsed = parse(new TextDecoder().decode(xml)) as Dict;
  const [pkcs12, mdm] = parsed.PayloadContent as Dict[];
  return { xml, parsed, pkcs12: pkcs12 as Dict, mdm: mdm as Dict, identity, key };
}

/** Every OID in a DER structure, OCTET STRINGs that hold DER included. */
function oidsIn(node: forge.asn1.Asn1): string[] {
  if (node.type === forge.asn1.Type.OID && typeof node.value === "string") return [forge.asn1.derToOid(node.value)];
  if (Array.isArray(node.value)) return node.value.flatMap(oidsIn);
  if (node.type === forge.asn1.Type.OCTETSTRING && typeof node.value === "string" && node.tagClass === forge.asn1.Class.UNIVERSAL) {
    try {
      return oidsIn(forge.asn1.fromDer(node.value));
    } catch {
      return [];
    }
  }
  return [];
}

/** The node at a path of child indices; throws when there is none. */
function child(node: forge.asn1.Asn1, ...path: number[]): forge.asn1.Asn1 {
  let at = node;
  for (const i of path) {
    const next = Array.isArray(at.value) ? at.value[i] : undefined;
    if (next === undefined) throw new Error(`no child ${i}`);
    at = next;
  }
  return at;
}

describe("the enrolment profile", () => {
  test("payloads: the PKCS#12 identity and com.apple.mdm with the configured URLs, token and rights", async () => {
    const { parsed, pkcs12, mdm, key } = await profileFor(undefined, "tok-123");
    const ids = profileIdentifiers(key);
    const { PayloadContent: _payloads, ...profile } = parsed;
    const { PayloadContent: p12, Password: password, ...identityPayload } = pkcs12;
    expect([p12 instanceof Uint8Array, typeof password]).toEqual([true, "string"]);
    expect(profile).toEqual({
      PayloadType: "Configuration",
      PayloadVersion: 1,
      PayloadIdentifier: ids.profile.identifier,
      PayloadUUID: ids.profile.uuid,
      PayloadDisplayName: "Umbra provider attestation (MDM)",
      PayloadDescription: expect.any(String),
      PayloadOrganization: "Umbra",
      PayloadScope: "System",
      PayloadRemovalDisallowed: false,
    });
    expect(identityPayload).toEqual({
      PayloadType: "com.apple.security.pkcs12",
      PayloadVersion: 1,
      PayloadIdentifier: ids.identity.identifier,
      PayloadUUID: ids.identity.uuid,
      PayloadDisplayName: "Umbra MDM device identity",
    });
    expect(mdm).toEqual({
      PayloadType: "com.apple.mdm",
      PayloadVersion: 1,
      PayloadIdentifier: ids.mdm.identifier,
      PayloadUUID: ids.mdm.uuid,
      PayloadDisplayName: "Umbra MDM",
      IdentityCertificateUUID: ids.identity.uuid,
      Topic: TOPIC,
      ServerURL: `${SERVER}?e=tok-123`,
      CheckInURL: `${SERVER}?e=tok-123`,
      SignMessage: true,
      CheckOutWhenRemoved: true,
      AccessRights: 1041,
      ServerCapabilities: ["com.apple.mdm.per-user-connections"],
    });
    expect(ACCESS_RIGHTS).toBe(1 + 16 + 1024);
  });

  test("identifiers are stable per identity key and differ between keys", async () => {
    const key = SoftwareIdentity.generate().publicKey(65);
    const a = await profileFor(key, "first");
    const b = await profileFor(key, "second");
    const other = await profileFor();
    const idsOf = (p: Awaited<ReturnType<typeof profileFor>>) => [
      p.parsed.PayloadIdentifier,
      p.parsed.PayloadUUID,
      p.pkcs12.PayloadUUID,
      p.mdm.PayloadUUID,
    ];
    expect(idsOf(b)).toEqual(idsOf(a));
    expect(idsOf(other).filter((id, i) => id === idsOf(a)[i])).toEqual([]);
    expect(String(a.parsed.PayloadUUID)).toMatch(/^[0-9A-F]{8}-[0-9A-F]{4}-8[0-9A-F]{3}-[89AB][0-9A-F]{3}-[0-9A-F]{12}$/);
    expect(a.mdm.ServerURL).not.toEqual(b.mdm.ServerURL);
  });

  test("the PKCS#12 opens with the payload's password: a key and the CA-issued certificate for it", async () => {
    const { pkcs12 } = await profileFor();
    const der = binary(pkcs12.PayloadContent as Uint8Array);
    const pfx = forge.pkcs12.pkcs12FromAsn1(forge.asn1.fromDer(der), String(pkcs12.Password));
    const keys = pfx.getBags({ bagType: forge.pki.oids.pkcs8ShroudedKeyBag ?? "" })[forge.pki.oids.pkcs8ShroudedKeyBag ?? ""] ?? [];
    const certs = pfx.getBags({ bagType: forge.pki.oids.certBag ?? "" })[forge.pki.oids.certBag ?? ""] ?? [];
    expect([keys.length, certs.length]).toEqual([1, 1]);
    const key = keys[0]?.key as forge.pki.rsa.PrivateKey;
    const cert = certs[0]?.cert as forge.pki.Certificate;
    expect(ca.certificate.verify(cert)).toBe(true);
    expect(cert.issuer.getField("CN").value).toBe("Umbra Test MDM CA");
    expect((cert.publicKey as forge.pki.rsa.PublicKey).n.compareTo(key.n)).toBe(0);
    expect(cert.getExtension("extKeyUsage")).toMatchObject({ clientAuth: true });
    expect(() => forge.pkcs12.pkcs12FromAsn1(forge.asn1.fromDer(der), "wrong password")).toThrow();
  });

  test("the PKCS#12 is in the legacy encoding: 3DES key bag, certificates in plain data, SHA-1 MAC", async () => {
    const { pkcs12 } = await profileFor();
    const pfx = forge.asn1.fromDer(binary(pkcs12.PayloadContent as Uint8Array));
    const oids = oidsIn(pfx);
    expect(oids).toContain("1.2.840.113549.1.12.1.3"); // pbeWithSHAAnd3-KeyTripleDES-CBC
    expect(oids).toContain("1.2.840.113549.1.12.10.1.2"); // pkcs8ShroudedKeyBag
    expect(oids).not.toContain("1.2.840.113549.1.5.13"); // PBES2 (OpenSSL 3's default, which macOS refuses)
    expect(oids.filter((o) => o.startsWith("2.16.840.1.101.3.4.1."))).toEqual([]); // no AES
    // PFX = {version, authSafe, macData = {DigestInfo = {AlgorithmIdentifier = {OID, ...}, digest}, salt, iterations}}
    expect(forge.asn1.derToOid(String(child(pfx, 2, 0, 0, 0).value))).toBe("1.3.14.3.2.26"); // SHA-1
  });

  test("a profile signed with CMS verifies with node-forge: content, digest, signature, signer", async () => {
    const signing = testSigningIdentity();
    const signer = openSigningIdentity(signing.p12, signing.password);
    const { xml } = await profileFor();
    const cms = signProfile(xml, signer, Date.now());
    expect(verifyCms(cms)).toEqual({ content: Buffer.from(xml).toString("utf8"), signer: "Umbra Test Profile Signer", chain: 2 });
    const tampered = Uint8Array.from(cms);
    const at = Buffer.from(cms).indexOf("AccessRights");
    tampered[at] = "a".charCodeAt(0);
    expect(() => verifyCms(tampered)).toThrow("message digest");
  });

  test("a wrong password or a PKCS#12 without a key is refused; a CA key that does not match its certificate too", () => {
    const signing = testSigningIdentity();
    expect(() => openSigningIdentity(signing.p12, "wrong")).toThrow(SigningIdentityError);
    expect(() => loadMdmCa(ca.certificatePem, testCa().keyPem)).toThrow(MdmCaError);
  });
});
