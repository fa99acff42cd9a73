/**
 * NanoMDM's webhook (MicroMDM-compatible JSON: micromdm/nanomdm `service/webhook/event.json`), received
 * at POST /v1/mdm/webhook (src/api/mdm-webhook.ts):
 *   {topic, event_id?, created_at, checkin_event?: {ids: {id, type}, udid?, raw_payload, url_params?},
 *    acknowledge_event?: {ids, udid?, command_uuid?, status, raw_payload, url_params?}}
 * Authentication: `X-Hmac-Signature` = base64(HMAC-SHA256(webhook key, the raw body)), compared in
 * constant time before anything else is read; a missing or wrong one is 401.
 * - mdm.Authenticate / mdm.TokenUpdate: `url_params.e` (the enrolment token; only its SHA-256 is looked
 *   up) -> the enrolment, bound to NanoMDM's id (`ids.id`) and the check-in's SerialNumber.
 * - mdm.CheckOut: the enrolment of that NanoMDM id is checked out.
 * - mdm.Connect (a command report): accepted only for the CommandUUID outstanding for the enrolment of
 *   that NanoMDM id, consumed once; its chain through the injected verifier (part A), then stored.
 * Every other event is answered 200 and ignored (NanoMDM counts non-200 as a failed delivery).
 */
import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import { Errors } from "../errors/api-error.ts";
import type { Logger } from "../observability/logger.ts";
import type { MdmChain, MdmEnrolment, MdmStore } from "../store/mdm-types.ts";
import { readCheckIn, readCommandReport } from "./device-information.ts";
import { failedCheck, type MdaAnswerVerifier } from "./types.ts";

export interface MdmWebhookDeps {
  /** NanoMDM's -webhook-hmac-key (UTF-8). */
  readonly key: string;
  readonly store: MdmStore;
  readonly verify: MdaAnswerVerifier;
  readonly now: () => number;
  readonly logger: Logger;
  /** Told of every verified chain stored (the fleet's hook, part D). */
  readonly onAttested?: (enrolment: MdmEnrolment, chain: MdmChain) => void;
}

/** What became of one event: `bound`, `checked_out`, `attested`, `pending`, `refused:<check>`, `ignored:<why>`... */
export interface WebhookOutcome {
  readonly topic: string;
  readonly result: string;
}

interface EventBody {
  readonly ids?: { readonly id?: unknown; readonly type?: unknown };
  readonly udid?: unknown;
  readonly command_uuid?: unknown;
  readonly status?: unknown;
  readonly raw_payload?: unknown;
  readonly url_params?: unknown;
}

const str = (v: unknown): string | undefined => (typeof v === "string" && v !== "" ? v : undefined);
const sha256Hex = (text: string) => createHash("sha256").update(text, "utf8").digest("hex");

export class MdmWebhook {
  private readonly key: Buffer;

  constructor(private readonly deps: MdmWebhookDeps) {
    this.key = Buffer.from(deps.key, "utf8");
  }

  /** True when `signature` is base64(HMAC-SHA256(key, body)); constant time in the signature's bytes. */
  signed(body: Uint8Array, signature: string | null): boolean {
    if (signature === null) return false;
    const expected = createHmac("sha256", this.key).update(body).digest();
    const given = Buffer.from(signature.trim(), "base64");
    return given.length === expected.length && timingSafeEqual(given, expected);
  }

  /** Handles one delivery. Throws ApiError 401 (signature) or 400 (not an event). */
  async handle(body: Uint8Array, signature: string | null): Promise<WebhookOutcome> {
    if (!this.signed(body, signature)) throw Errors.invalidToken("the webhook's X-Hmac-Signature is missing or wrong");
    let event: { topic?: unknown; checkin_event?: unknown; acknowledge_event?: unknown };
    try {
      event = JSON.parse(new TextDecoder().decode(body));
    } catch {
      throw Errors.invalidJson("the webhook body is not JSON");
    }
    if (typeof event !== "object" || event === null || typeof event.topic !== "string") {
      throw Errors.invalidValue("the webhook body is not an event (no topic)");
    }
    const topic = event.topic;
    const outcome = (result: string): WebhookOutcome => ({ topic, result });
    const checkin = event.checkin_event as EventBody | undefined;
    const ack = event.acknowledge_event as EventBody | undefined;
    const payload = (e: EventBody) => Buffer.from(str(e.raw_payload) ?? "", "base64");
    const deviceId = (e: EventBody) => str(e.ids?.id) ?? str(e.udid);
    let result: string;
    const channel = (checkin ?? ack)?.ids?.type;
    if (channel !== undefined && channel !== "Device") {
      // A user channel (macOS user enrolments) shares the check-in URL: only the device channel counts.
      result = "ignored:not_device_channel";
    } else if ((topic === "mdm.Authenticate" || topic === "mdm.TokenUpdate") && checkin) {
      result = await this.bind(checkin, deviceId(checkin), readCheckIn(payload(checkin))?.serialNumber);
    } else if (topic === "mdm.CheckOut" && checkin) {
      const enrolment = await this.enrolledAs(deviceId(checkin));
      if (enrolment) await this.deps.store.enrolments.checkOut(enrolment.id, this.deps.now());
      result = enrolment ? "checked_out" : "ignored:unknown_enrolment";
    } else if (topic === "mdm.Connect" && ack) {
      result = await this.report(ack, deviceId(ack), payload(ack));
    } else {
      result = "ignored:topic";
    }
    this.deps.logger.info("mdm webhook", { reason: result, route: topic });
    return outcome(result);
  }

  private async enrolledAs(nanomdmId: string | undefined): Promise<MdmEnrolment | undefined> {
    return nanomdmId === undefined ? undefined : this.deps.store.enrolments.byNanomdmId(nanomdmId);
  }

  private async bind(event: EventBody, nanomdmId: string | undefined, serial: string | undefined): Promise<string> {
    const params = event.url_params;
    const token = typeof params === "object" && params !== null ? str((params as Record<string, unknown>).e) : undefined;
    if (token === undefined) return "ignored:no_token";
    if (nanomdmId === undefined) return "ignored:no_device_id";
    const tokenHash = sha256Hex(token);
    if (serial === undefined) {
      // A TokenUpdate carries no SerialNumber: it confirms a binding made at Authenticate.
      const enrolment = await this.deps.store.enrolments.findByTokenHash(tokenHash);
      return enrolment?.state === "enrolled" && enrolment.nanomdmId === nanomdmId ? "bound" : "ignored:no_serial";
    }
    const bound = await this.deps.store.enrolments.bind({ tokenHash, nanomdmId, serial, at: this.deps.now() });
    if (!bound.ok) {
      this.deps.logger.warn("mdm enrolment not bound", { reason: bound.reason });
      return `bind_refused:${bound.reason}`;
    }
    return "bound";
  }

  private async report(event: EventBody, nanomdmId: string | undefined, payload: Uint8Array): Promise<string> {
    const status = str(event.status);
    if (status === "Idle") return "ignored:idle";
    const report = readCommandReport(payload);
    const commandUuid = str(event.command_uuid) ?? report?.commandUuid;
    if (commandUuid === undefined || report === undefined) return "ignored:no_command";
    if (report.commandUuid !== undefined && report.commandUuid !== commandUuid) return "ignored:command_mismatch";
    const enrolment = await this.enrolledAs(nanomdmId);
    if (!enrolment?.serial) return "ignored:unknown_enrolment";
    const now = this.deps.now();
    if (status === "NotNow") {
      const outstanding = await this.deps.store.commands.outstanding(enrolment.id, now);
      return outstanding?.commandUuid === commandUuid ? "pending" : "ignored:unsolicited";
    }
    // Our command, for this enrolment, still outstanding: consumed here, so a replay finds nothing.
    const command = await this.deps.store.commands.consume(commandUuid, enrolment.id, now);
    if (!command) return "ignored:unsolicited";
    if (status !== "Acknowledged") return "command_error";
    if (!report.chain || report.chain.length === 0) return "refused:no_chain";
    let verified: Awaited<ReturnType<MdaAnswerVerifier>>;
    try {
      verified = await this.deps.verify({
        chain: report.chain,
        serialNumber: report.serialNumber,
        provisioningUdid: report.provisioningUdid,
        enrolmentSerial: enrolment.serial,
        identityKey: new Uint8Array(Buffer.from(enrolment.identityKey, "base64")),
      });
    } catch (e) {
      const check = failedCheck(e);
      this.deps.logger.warn("mdm attestation refused", { check, account_id: enrolment.accountId });
      return `refused:${check}`;
    }
    const chain: MdmChain = {
      enrolmentId: enrolment.id,
      certificates: report.chain.map((c) => Buffer.from(c).toString("base64")),
      chainSha256: verified.chainSha256,
      serial: enrolment.serial,
      udid: report.provisioningUdid ?? "",
      osVersion: verified.claims.osVersion ?? report.osVersion ?? "",
      leafNotBefore: verified.leafNotBefore instanceof Date ? verified.leafNotBefore.getTime() : verified.leafNotBefore,
      epoch: verified.freshnessEpoch,
      verifiedAt: now,
    };
    await this.deps.store.chains.put(chain);
    this.deps.onAttested?.(enrolment, chain);
    return "attested";
  }
}
