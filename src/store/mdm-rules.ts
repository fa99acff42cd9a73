/**
 * The MDM store's decisions, shared by both implementations (sqlite/mdm.ts, pg/mdm.ts): each reads the rows
 * in its transaction, asks here what to do, and writes that. Pure: no I/O.
 */
import type { MdmBindResult, MdmEnrolment } from "./mdm-types.ts";

/** What `bind` does with the token's enrolment, given the enrolled enrolments of the same serial or device. */
export type BindPlan =
  | { readonly kind: "refuse"; readonly result: MdmBindResult & { ok: false } }
  | { readonly kind: "same"; readonly enrolment: MdmEnrolment }
  | { readonly kind: "bind"; readonly supersede: readonly string[] };

export function planBind(
  enrolment: MdmEnrolment | undefined,
  others: readonly MdmEnrolment[],
  input: { nanomdmId: string; serial: string; at: number },
): BindPlan {
  const refuse = (reason: (MdmBindResult & { ok: false })["reason"]): BindPlan => ({ kind: "refuse", result: { ok: false, reason } });
  if (enrolment === undefined) return refuse("unknown_token");
  if (enrolment.state === "checked_out") return refuse("checked_out");
  if (enrolment.state === "enrolled") {
    return enrolment.nanomdmId === input.nanomdmId && enrolment.serial === input.serial
      ? { kind: "same", enrolment }
      : refuse("other_device");
  }
  if (enrolment.tokenExpiresAt <= input.at) return refuse("token_expired");
  const rivals = others.filter((o) => o.id !== enrolment.id && o.state === "enrolled");
  // The same Mac (NanoMDM id and serial) enrolling again replaces its earlier enrolment; another Mac's
  // enrolment of this serial, or this Mac under another serial, is refused.
  if (rivals.some((o) => o.nanomdmId !== input.nanomdmId || o.serial !== input.serial)) return refuse("serial_taken");
  return { kind: "bind", supersede: rivals.map((o) => o.id) };
}
