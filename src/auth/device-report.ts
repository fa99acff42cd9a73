/**
 * What `umbra-provider login` reports of its machine when it starts a device login (docs/api.md,
 * "Provider device login"): its name, the build ids it is configured to serve and the trust level it
 * expects. Untrusted input: read and bounded here (400 with `param`), shown to the approver as
 * "reported", and verified only when the machine connects (its hello and evidence).
 */
import { isTrustLevel, TRUST_LEVELS, type TrustLevel } from "../../attestation/provider/levels.ts";
import { Errors } from "../errors/api-error.ts";
import { MAX_MODELS_PER_HELLO } from "../protocol/frames.ts";
import { type JsonObject, MODEL_ID, optionalStringArray } from "../validation/fields.ts";
import type { ReportedMachine } from "./device-flow.ts";

/** Control, format (bidi overrides, zero-width), lone surrogate, and line or paragraph separator characters. */
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}]/u;

/**
 * `models`: absent, or the build ids the machine is configured to serve: a JSON array, or in a form body
 * one field of ids separated by spaces; at most MAX_MODELS_PER_HELLO ids of the model id form.
 */
function reportedModels(fields: JsonObject): string[] | null {
  const v = fields.models;
  if (v === undefined || v === null) return null;
  const list = typeof v === "string" ? v.split(" ").filter((id) => id !== "") : v;
  return optionalStringArray({ models: list }, "models", { ...MODEL_ID, maxItems: MAX_MODELS_PER_HELLO }) ?? null;
}

/** `trust_level`: absent, or the level the machine expects to earn (`none`, `self_signed`, `hardware`). */
function reportedTrust(fields: JsonObject): TrustLevel | null {
  const v = fields.trust_level;
  if (v === undefined || v === null) return null;
  if (!isTrustLevel(v)) throw Errors.invalidValue(`'trust_level' must be one of ${TRUST_LEVELS.join(", ")}`, "trust_level");
  return v;
}

/**
 * A machine's name in field `param` (`machine_name` here; `name` of an admin-made device token): absent,
 * or 1..64 printable characters (code points), not only spaces.
 */
export function machineNameField(fields: JsonObject, param: string): string | null {
  const v = fields[param];
  if (v === undefined || v === null) return null;
  const ok = typeof v === "string" && v.length <= 256 && [...v].length <= 64 && v.trim() !== "" && !UNPRINTABLE.test(v);
  if (!ok) throw Errors.invalidValue(`'${param}' must be 1 to 64 printable characters`, param);
  return v;
}

/** The report of a device authorization request's fields. */
export function reportedMachine(fields: JsonObject): ReportedMachine {
  return { machineName: machineNameField(fields, "machine_name"), models: reportedModels(fields), trustLevel: reportedTrust(fields) };
}
