/**
 * Chat messages as the coordinator forwards them to a provider's runtime (OpenAI's shapes, docs/api.md
 * "Messages"), and the one reader both binaries use: the coordinator on a consumer's request (faults become
 * 400s with `param`), the provider on an inference request (faults become protocol errors).
 *
 * Invariants:
 * - A read message holds exactly the fields OpenAI defines for its role, as sent (`content: null` stays
 *   null, an absent one stays absent); any other field of a message or of a content part is dropped.
 * - A fault names the field (`messages[2].tool_calls[0].function.arguments`) and the rule, never a value.
 * - Image parts are read wherever OpenAI allows them (user messages); whether the model takes images is
 *   the caller's decision (`imageParam`).
 */

export interface TextPart {
  readonly type: "text";
  readonly text: string;
}

export interface ImagePart {
  readonly type: "image_url";
  readonly image_url: { readonly url: string; readonly detail?: ImageDetail };
}

export type ImageDetail = "auto" | "low" | "high";

export interface ToolCall {
  readonly id: string;
  readonly type: "function";
  readonly function: { readonly name: string; readonly arguments: string };
}

export interface SystemMessage {
  readonly role: "system" | "developer";
  readonly content: string | readonly TextPart[];
  readonly name?: string;
}

export interface UserMessage {
  readonly role: "user";
  readonly content: string | readonly (TextPart | ImagePart)[];
  readonly name?: string;
}

export interface AssistantMessage {
  readonly role: "assistant";
  readonly content?: string | readonly TextPart[] | null;
  readonly name?: string;
  readonly refusal?: string | null;
  readonly tool_calls?: readonly ToolCall[];
}

export interface ToolMessage {
  readonly role: "tool";
  readonly content: string | readonly TextPart[];
  readonly tool_call_id: string;
}

export type ChatMessage = SystemMessage | UserMessage | AssistantMessage | ToolMessage;

/** The text of a message: its string content, or its text parts joined with "" (images and tool calls left out). */
export function messageText(message: ChatMessage): string {
  const content = message.content;
  if (typeof content === "string") return content;
  if (!content) return "";
  let text = "";
  for (const part of content) if (part.type === "text") text += part.text;
  return text;
}

/** A message that breaks a rule: the OpenAI error code it maps to, the field, and the rule (never a value). */
export interface MessageFault {
  readonly code: "missing_field" | "invalid_value" | "unsupported_value";
  readonly param: string;
  readonly message: string;
}

export interface ReadMessages {
  readonly messages: ChatMessage[];
  /** The first image part (`messages[i].content[j]`), if any. */
  readonly imageParam: string | undefined;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const ROLES = ["system", "developer", "user", "assistant", "tool"];
export const DETAILS: readonly string[] = ["auto", "low", "high"];

/**
 * Reads `messages` (at least one). `fail` is called with the first fault and must throw. `param` is the
 * name of the array in faults ("messages", or "request.messages" on the provider's side).
 */
export function readChatMessages(raw: unknown, fail: (fault: MessageFault) => never, param = "messages"): ReadMessages {
  const missing = (p: string): never => fail({ code: "missing_field", param: p, message: `'${p}' is required` });
  const invalid = (p: string, rule: string): never => fail({ code: "invalid_value", param: p, message: `'${p}' ${rule}` });
  const unsupported = (p: string, rule: string): never => fail({ code: "unsupported_value", param: p, message: `'${p}' ${rule}` });
  if (raw === undefined || raw === null) return missing(param);
  if (!Array.isArray(raw)) return invalid(param, "must be an array");
  if (raw.length === 0) return invalid(param, "must hold at least 1 message");
  let imageParam: string | undefined;

  const str = (o: Obj, key: string, p: string, required: boolean, nonEmpty = false): string | undefined => {
    const v = o[key];
    if (v === undefined || v === null) return required ? missing(p) : undefined;
    if (typeof v !== "string") return invalid(p, "must be a string");
    if (nonEmpty && v.length === 0) return invalid(p, "must not be empty");
    return v;
  };

  /** string | parts; `images`: whether image parts are OpenAI-defined here (user messages). */
  const content = (m: Obj, p: string, images: boolean): string | (TextPart | ImagePart)[] => {
    const v = m.content;
    if (typeof v === "string") return v;
    if (!Array.isArray(v)) return invalid(p, "must be a string or an array of content parts");
    if (v.length === 0) return invalid(p, "must hold at least 1 content part");
    const parts: (TextPart | ImagePart)[] = new Array(v.length);
    for (let j = 0; j < v.length; j++) {
      const pp = `${p}[${j}]`;
      const part: unknown = v[j];
      if (!isObj(part)) return invalid(pp, "must be an object");
      const type = part.type;
      if (type === undefined || type === null) return missing(`${pp}.type`);
      if (type === "text") {
        parts[j] = { type: "text", text: str(part, "text", `${pp}.text`, true) as string };
      } else if (type === "image_url" && images) {
        const image = part.image_url;
        if (image === undefined || image === null) return missing(`${pp}.image_url`);
        if (!isObj(image)) return invalid(`${pp}.image_url`, "must be an object");
        const url = str(image, "url", `${pp}.image_url.url`, true, true) as string;
        const detail = image.detail;
        if (detail !== undefined && detail !== null && (typeof detail !== "string" || !DETAILS.includes(detail))) {
          return invalid(`${pp}.image_url.detail`, "must be one of auto, low, high");
        }
        parts[j] = { type: "image_url", image_url: { url, ...(typeof detail === "string" ? { detail: detail as ImageDetail } : {}) } };
        imageParam ??= pp;
      } else if (type === "image_url" || type === "input_audio" || type === "file" || type === "refusal") {
        return unsupported(`${pp}.type`, "is a content part type not supported in this message");
      } else {
        return invalid(`${pp}.type`, "must be 'text' or 'image_url'");
      }
    }
    return parts;
  };
  const textContent = (m: Obj, p: string) => content(m, p, false) as string | TextPart[];

  const toolCalls = (m: Obj, p: string): ToolCall[] | undefined => {
    const v = m.tool_calls;
    if (v === undefined || v === null) return undefined;
    if (!Array.isArray(v)) return invalid(p, "must be an array");
    const calls: ToolCall[] = new Array(v.length);
    for (let k = 0; k < v.length; k++) {
      const cp = `${p}[${k}]`;
      const call: unknown = v[k];
      if (!isObj(call)) return invalid(cp, "must be an object");
      const id = str(call, "id", `${cp}.id`, true, true) as string;
      if (call.type === undefined || call.type === null) return missing(`${cp}.type`);
      if (call.type !== "function") return invalid(`${cp}.type`, "must be 'function'");
      const fn = call.function;
      if (fn === undefined || fn === null) return missing(`${cp}.function`);
      if (!isObj(fn)) return invalid(`${cp}.function`, "must be an object");
      const name = str(fn, "name", `${cp}.function.name`, true, true) as string;
      const args = str(fn, "arguments", `${cp}.function.arguments`, true) as string;
      calls[k] = { id, type: "function", function: { name, arguments: args } };
    }
    return calls;
  };

  const messages: ChatMessage[] = new Array(raw.length);
  for (let i = 0; i < raw.length; i++) {
    const p = `${param}[${i}]`;
    const m: unknown = raw[i];
    if (!isObj(m)) return invalid(p, "must be an object");
    const role = m.role;
    if (role === undefined || role === null) return missing(`${p}.role`);
    if (typeof role !== "string" || !ROLES.includes(role)) {
      if (role === "function") return unsupported(`${p}.role`, "'function' is retired: use 'tool' messages");
      return invalid(`${p}.role`, "must be one of system, developer, user, assistant, tool");
    }
    const cp = `${p}.content`;
    const hasContent = m.content !== undefined && m.content !== null;
    if (role === "tool") {
      if (!hasContent) return missing(cp);
      const tool_call_id = str(m, "tool_call_id", `${p}.tool_call_id`, true, true) as string;
      messages[i] = { role, content: textContent(m, cp), tool_call_id };
      continue;
    }
    const name = str(m, "name", `${p}.name`, false);
    const named = name === undefined ? {} : { name };
    if (role === "assistant") {
      const calls = toolCalls(m, `${p}.tool_calls`);
      const refusal = str(m, "refusal", `${p}.refusal`, false);
      if (!hasContent && (calls === undefined || calls.length === 0) && refusal === undefined) return missing(cp);
      messages[i] = {
        role,
        ...(hasContent ? { content: textContent(m, cp) } : m.content === null ? { content: null } : {}),
        ...named,
        ...(refusal !== undefined ? { refusal } : m.refusal === null ? { refusal: null } : {}),
        ...(calls !== undefined ? { tool_calls: calls } : {}),
      };
      continue;
    }
    if (!hasContent) return missing(cp);
    messages[i] =
      role === "user"
        ? { role, content: content(m, cp, true), ...named }
        : { role: role as SystemMessage["role"], content: textContent(m, cp), ...named };
  }
  return { messages, imageParam };
}
