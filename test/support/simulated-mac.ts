/**
 * A simulated Mac behind the fake NanoMDM (fake-nanomdm.ts): it answers DeviceInformation as Apple's
 * device-management schema says (`information.device.yaml`): QueryResponses with DevicePropertiesAttestation
 * ([leaf, Sub CA] DER, leaf first), SerialNumber, ProvisioningUDID, OSVersion; and obeys Apple's cache rule:
 * an absent nonce, the cached leaf's nonce, or fewer than 7 days since the last mint returns the cached leaf;
 * otherwise it mints a new one with `.11.1` = the requested nonce. Leaves are Apple-shaped, issued by a
 * development root (apple-leaf.ts). A Mac may sleep (no answer until `wake`), answer NotNow or Error, or
 * freeze its cache.
 */
import type { PlistValue } from "plist";
import type { DevelopmentRoot, SecureBootLevel } from "../../attestation/provider/index.ts";
import { issueAppleLeaf } from "./apple-leaf.ts";

const WEEK = 7 * 86_400_000;

export interface SimulatedMacOptions {
  /** The root whose intermediate issues the Mac's leaves (the coordinator's development root, or a test's). */
  readonly issuer: DevelopmentRoot;
  /** The Mac's clock (Unix ms): the test's. */
  readonly now: () => number;
  readonly serial: string;
  /** ProvisioningUDID (the leaf's `.9.2`), not NanoMDM's id. */
  readonly udid: string;
  /** NanoMDM's enrolment id (the hardware UUID). */
  readonly nanomdmId: string;
  readonly osVersion?: string;
}

/** The posture and identity the next minted leaf carries (Apple's view of the device). */
export interface LeafPosture {
  readonly sipOff?: boolean;
  readonly secureBoot?: SecureBootLevel;
  readonly kexts?: boolean;
  /** macOS 14.0/14.1: no posture OIDs. */
  readonly noPosture?: boolean;
  readonly osVersion?: string;
  readonly serial?: string;
}

export class SimulatedMac {
  readonly serial: string;
  readonly udid: string;
  readonly nanomdmId: string;
  readonly osVersion: string;
  awake = true;
  /** How it answers commands. */
  reply: "Acknowledged" | "NotNow" | "Error" = "Acknowledged";
  posture: LeafPosture = {};
  /** The SerialNumber it answers (default: its own). */
  answeredSerial: string | undefined;
  /** A broken cache: the cached leaf is returned whatever the nonce and its age. */
  frozenCache = false;
  mints = 0;
  private cache: { nonce: Uint8Array; chain: Uint8Array[]; mintedAt: number } | undefined;

  constructor(private readonly options: SimulatedMacOptions) {
    this.serial = options.serial;
    this.udid = options.udid;
    this.nanomdmId = options.nanomdmId;
    this.osVersion = options.osVersion ?? "15.5";
  }

  /** The leaf Apple would return for `nonce` now (minting when the cache rule allows). */
  async attestation(nonce: Uint8Array | undefined): Promise<Uint8Array[]> {
    const now = this.options.now();
    const cache = this.cache;
    const same = cache !== undefined && nonce !== undefined && Buffer.from(cache.nonce).equals(Buffer.from(nonce));
    if (cache && (nonce === undefined || same || this.frozenCache || now - cache.mintedAt < WEEK)) return cache.chain;
    if (nonce === undefined) throw new Error("no cached attestation and no nonce");
    const chain = await issueAppleLeaf(this.options.issuer, {
      nonce,
      serialNumber: this.posture.serial ?? this.serial,
      udid: this.udid,
      notBefore: now - 60_000,
      ...(this.posture.osVersion !== undefined ? { osVersion: this.posture.osVersion } : {}),
      ...(this.posture.sipOff ? { sipEnabled: false } : {}),
      ...(this.posture.secureBoot ? { secureBoot: this.posture.secureBoot } : {}),
      ...(this.posture.kexts ? { kexts: true } : {}),
      ...(this.posture.noPosture ? { posture: false } : {}),
    });
    this.mints++;
    this.cache = { nonce: Uint8Array.from(nonce), chain, mintedAt: now };
    return chain;
  }

  /** The command report (the device's plist body) for one queued command. */
  async answer(command: { readonly [key: string]: PlistValue }): Promise<{ [key: string]: PlistValue }> {
    const uuid = typeof command.CommandUUID === "string" ? command.CommandUUID : "";
    const base = { CommandUUID: uuid, UDID: this.nanomdmId };
    if (this.reply !== "Acknowledged") {
      return { ...base, Status: this.reply, ...(this.reply === "Error" ? { ErrorChain: [{ ErrorCode: 12021 }] } : {}) };
    }
    const body = command.Command as { [key: string]: PlistValue };
    if (body.RequestType !== "DeviceInformation") return { ...base, Status: "Error", ErrorChain: [{ ErrorCode: 12001 }] };
    const nonce = body.DeviceAttestationNonce instanceof Uint8Array ? body.DeviceAttestationNonce : undefined;
    const queries = Array.isArray(body.Queries) ? body.Queries : [];
    const responses: { [key: string]: PlistValue } = {};
    if (queries.includes("DevicePropertiesAttestation")) responses.DevicePropertiesAttestation = await this.attestation(nonce);
    if (queries.includes("SerialNumber")) responses.SerialNumber = this.answeredSerial ?? this.serial;
    if (queries.includes("ProvisioningUDID")) responses.ProvisioningUDID = this.udid;
    if (queries.includes("OSVersion")) responses.OSVersion = this.posture.osVersion ?? this.osVersion;
    return { ...base, Status: "Acknowledged", RequestType: "DeviceInformation", QueryResponses: responses };
  }
}
