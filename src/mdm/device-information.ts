/**
 * The MDM messages the coordinator writes and reads, as Apple property lists (`plist`):
 * - the DeviceInformation command (Apple device-management `information.device.yaml`): Queries
 *   DevicePropertiesAttestation, SerialNumber, ProvisioningUDID, OSVersion; DeviceAttestationNonce <data>
 *   (32 bytes, the epoch nonce); our own CommandUUID;
 * - a command report (the device's HTTP body, base64 in the webhook's `raw_payload`): CommandUUID, Status,
 *   QueryResponses (DevicePropertiesAttestation: array of <data> DER, leaf first);
 * - a check-in message (Authenticate, TokenUpdate, CheckOut): MessageType, SerialNumber, UDID.
 * Readers return undefined for a body that is not a plist dict; fields of the wrong type read as absent.
 */
import { build, type PlistValue, parse } from "plist";

export const DEVICE_INFORMATION_QUERIES = ["DevicePropertiesAttestation", "SerialNumber", "ProvisioningUDID", "OSVersion"] as const;

/** The raw command plist for NanoMDM's PUT /v1/enqueue/{id}. */
export function deviceInformationCommand(commandUuid: string, nonce: Uint8Array): string {
  return build({
    CommandUUID: commandUuid,
    Command: {
      RequestType: "DeviceInformation",
      Queries: [...DEVICE_INFORMATION_QUERIES],
      DeviceAttestationNonce: Uint8Array.from(nonce),
    },
  });
}

type Dict = { readonly [key: string]: PlistValue };

/** XML plists only (what devices send); anything else is refused before the parser (xmldom logs its errors). */
const XML_PLIST = /^\s*(<\?xml[^>]*>\s*)?(<!DOCTYPE[^>]*>\s*)?<plist[\s>][\s\S]*<\/plist>\s*$/;

function readDict(body: Uint8Array): Dict | undefined {
  let value: PlistValue;
  try {
    const text = new TextDecoder("utf-8", { fatal: true }).decode(body);
    if (!XML_PLIST.test(text)) return undefined;
    value = parse(text);
  } catch {
    return undefined;
  }
  return isDict(value) ? value : undefined;
}

const isDict = (v: PlistValue | undefined): v is Dict =>
  typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array) && !(v instanceof Date);
const text = (v: PlistValue | undefined): string | undefined => (typeof v === "string" ? v : undefined);

export interface CommandReport {
  readonly commandUuid: string | undefined;
  /** Acknowledged, Error, CommandFormatError, NotNow, Idle. */
  readonly status: string | undefined;
  readonly requestType: string | undefined;
  /** DevicePropertiesAttestation's certificates; undefined when absent or not an array of data. */
  readonly chain: readonly Uint8Array[] | undefined;
  readonly serialNumber: string | undefined;
  readonly provisioningUdid: string | undefined;
  readonly osVersion: string | undefined;
}

export function readCommandReport(body: Uint8Array): CommandReport | undefined {
  const dict = readDict(body);
  if (!dict) return undefined;
  const responses = isDict(dict.QueryResponses) ? dict.QueryResponses : {};
  const certs = responses.DevicePropertiesAttestation;
  const chain = Array.isArray(certs) && certs.every((c) => c instanceof Uint8Array) ? (certs as Uint8Array[]) : undefined;
  return {
    commandUuid: text(dict.CommandUUID),
    status: text(dict.Status),
    requestType: text(dict.RequestType),
    chain,
    serialNumber: text(responses.SerialNumber),
    provisioningUdid: text(responses.ProvisioningUDID),
    osVersion: text(responses.OSVersion),
  };
}

export interface CheckIn {
  readonly messageType: string | undefined;
  readonly serialNumber: string | undefined;
  readonly udid: string | undefined;
}

export function readCheckIn(body: Uint8Array): CheckIn | undefined {
  const dict = readDict(body);
  if (!dict) return undefined;
  return { messageType: text(dict.MessageType), serialNumber: text(dict.SerialNumber), udid: text(dict.UDID) };
}
