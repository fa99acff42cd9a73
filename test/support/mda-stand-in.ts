/**
 * Part A's pieces as this branch needs them, until attestation/provider/mda-nonce.ts, mda-answer.ts and
 * test/support/apple-leaf.ts land (MDM-CONTRACT.md part A; replace these then):
 * - `standInNonces(seed)`: 7-day epochs, nonce = HMAC-SHA256(seed, "umbra-mda-v1" || u64be(epoch) || point);
 * - `StandInLeafIssuer`: a development root and Sub CA (P-384) issuing leaves shaped like Apple's (P-384,
 *   ecdsa-with-SHA384, no AKI or EKU, raw-string serial, UDID and OS version, INTEGER posture, `.11.1` the
 *   raw nonce), with SIP off, Reduced Security, kexts, no posture OIDs (macOS 14.0), a given notBefore;
 * - `standInVerifier(...)`: the contract's rules in its order (chain checks with mda-chain.ts, then
 *   mda_freshness, mda_age 21 days, mda_posture_missing, mda_sip, mda_secure_boot, mda_kexts, mda_serial,
 *   mda_udid), throwing an error whose `check` names the rule.
 */
import "reflect-metadata";
import { createHash, createHmac } from "node:crypto";
import { X509Certificate } from "@peculiar/x509";
import { encodeInteger } from "../../attestation/provider/der.ts";
import { caExtensions, generateSigningKeys, type Issuer, issueCertificate, toExtensions } from "../../attestation/provider/dev-root.ts";
import { verifyMdaChain } from "../../attestation/provider/mda-chain.ts";
import { APPLE_OID } from "../../attestation/provider/oids.ts";
import { TrustAnchor } from "../../attestation/provider/roots.ts";
import type { MdaAnswerInput, MdaNonces, VerifiedMdaAnswer } from "../../src/mdm/types.ts";

export const EPOCH_MS = 7 * 86_400_000;
const DAY = 86_400_000;

export function standInNonces(seed: Uint8Array): MdaNonces {
  return {
    epoch: (ms) => Math.floor(ms / EPOCH_MS),
    nonce(epoch, key) {
      const e = Buffer.alloc(8);
      e.writeBigUInt64BE(BigInt(epoch));
      return new Uint8Array(createHmac("sha256", seed).update("umbra-mda-v1").update(e).update(key).digest());
    },
  };
}

export interface LeafOptions {
  readonly nonce: Uint8Array;
  readonly serial: string;
  readonly udid: string;
  readonly notBefore: number;
  readonly osVersion?: string;
  readonly sipOff?: boolean;
  readonly secureBoot?: "Full Security" | "Reduced Security" | "Permissive Security";
  readonly kexts?: boolean;
  /** macOS 14.0/14.1: no SIP, Secure Boot or kext OIDs. */
  readonly noPosture?: boolean;
}

const ascii = (s: string) => new TextEncoder().encode(s);

export class StandInLeafIssuer {
  private constructor(
    readonly anchor: TrustAnchor,
    readonly intermediateDer: Uint8Array,
    private readonly sub: Issuer,
  ) {}

  /** A root and Sub CA valid 400 days either side of `at`. */
  static async create(at: number): Promise<StandInLeafIssuer> {
    const notBefore = new Date(at - 400 * DAY);
    const notAfter = new Date(at + 400 * DAY);
    const rootName = "CN=Stand-in Enterprise Attestation Root CA, O=Umbra (test)";
    const subName = "CN=Stand-in Enterprise Attestation Sub CA 1, O=Umbra (test)";
    const rootKeys = await generateSigningKeys("P-384");
    const rootDer = await issueCertificate({
      subject: rootName,
      publicKey: rootKeys.keys.publicKey,
      self: rootKeys,
      notBefore,
      notAfter,
      extensions: caExtensions(1),
    });
    const subKeys = await generateSigningKeys("P-384");
    const subDer = await issueCertificate({
      subject: subName,
      publicKey: subKeys.keys.publicKey,
      issuer: { name: rootName, signing: rootKeys },
      notBefore,
      notAfter,
      extensions: caExtensions(0),
    });
    return new StandInLeafIssuer(TrustAnchor.development(rootDer), subDer, { name: subName, signing: subKeys });
  }

  /** [leaf, Sub CA], the leaf valid 90 days from its notBefore. */
  async chain(o: LeafOptions): Promise<Uint8Array[]> {
    const values = new Map<string, Uint8Array>([
      [APPLE_OID.serialNumber, ascii(o.serial)],
      [APPLE_OID.udid, ascii(o.udid)],
      [APPLE_OID.osVersion, ascii(o.osVersion ?? (o.noPosture ? "14.0" : "15.5"))],
      [APPLE_OID.freshnessCode, Uint8Array.from(o.nonce)],
    ]);
    if (!o.noPosture) {
      values.set(APPLE_OID.sipStatus, encodeInteger(o.sipOff ? 1n : 0n));
      values.set(APPLE_OID.secureBoot, ascii(o.secureBoot ?? "Full Security"));
      values.set(APPLE_OID.kernelExtensions, encodeInteger(o.kexts ? 1n : 0n));
    }
    const leafKeys = await generateSigningKeys("P-384");
    const leaf = await issueCertificate({
      subject: `CN=${o.udid}`,
      publicKey: leafKeys.keys.publicKey,
      issuer: this.sub,
      notBefore: new Date(o.notBefore),
      notAfter: new Date(o.notBefore + 90 * DAY),
      extensions: toExtensions(values),
    });
    return [leaf, this.intermediateDer];
  }
}

export class StandInCheckError extends Error {
  constructor(readonly check: string) {
    super(check);
  }
}

/** The contract's verifyMdaAnswer, bound to a seed, anchor and clock. */
export function standInVerifier(options: { seed: Uint8Array; anchor: TrustAnchor; now: () => number }) {
  const nonces = standInNonces(options.seed);
  return async (input: MdaAnswerInput): Promise<VerifiedMdaAnswer> => {
    const fail = (check: string): never => {
      throw new StandInCheckError(check);
    };
    const leaf = new X509Certificate(Uint8Array.from(input.chain[0] ?? new Uint8Array()));
    const ext = (oid: string) => {
      const e = leaf.extensions.find((x) => x.type === oid);
      return e ? new Uint8Array(e.value) : undefined;
    };
    const text = (oid: string) => {
      const v = ext(oid);
      return v ? new TextDecoder().decode(v) : undefined;
    };
    const posture = [APPLE_OID.sipStatus, APPLE_OID.secureBoot, APPLE_OID.kernelExtensions].every((oid) => ext(oid) !== undefined);
    // Before the chain rules here: mda-chain.ts would refuse a posture-less leaf as `sip`.
    if (!posture) fail("mda_posture_missing");
    const { claims, leaf: verifiedLeaf } = await verifyMdaChain(input.chain, {
      anchor: options.anchor,
      mode: "development",
      now: options.now,
    });
    const now = options.now();
    const current = nonces.epoch(now);
    const epoch = [current, current - 1, current - 2].find((e) =>
      Buffer.from(nonces.nonce(e, input.identityKey)).equals(Buffer.from(claims.freshnessCode)),
    );
    if (epoch === undefined) fail("mda_freshness");
    if (now - verifiedLeaf.notBefore.getTime() > 21 * DAY) fail("mda_age");
    if (claims.sipStatus !== 0n) fail("mda_sip");
    if (claims.secureBoot !== "Full Security") fail("mda_secure_boot");
    if (claims.kernelExtensions !== 0n) fail("mda_kexts");
    const serial = text(APPLE_OID.serialNumber);
    if (serial === undefined || serial !== input.serialNumber || serial !== input.enrolmentSerial) fail("mda_serial");
    if (text(APPLE_OID.udid) !== input.provisioningUdid) fail("mda_udid");
    return {
      claims: { osVersion: claims.osVersion },
      leafNotBefore: verifiedLeaf.notBefore.getTime(),
      freshnessEpoch: epoch as number,
      chainSha256: createHash("sha256")
        .update(Buffer.concat(input.chain.map((c) => Buffer.from(c))))
        .digest("hex"),
    };
  };
}
