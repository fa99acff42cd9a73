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
  const r = new MessageReader(fail);
  if (raw === undefined || raw === null) return r.missing(param);
  if (!Array.isArray(raw)) return r.invalid(param, "must be an array");
  if (raw.length === 0) return r.invalid(param, "must hold at least 1 message");
  const messages: ChatMessage[] = new Array(raw.length);
  for (let i = 0; i < raw.length; i++) messages[i] = r.message(raw[i], param, i);
  return { messages, imageParam: r.imageParam };
}

/**
 * The reading of one `messages` array: its fault callback and the first image part. Field paths are
 * built only for a fault (a valid request makes no path strings).
 */
class MessageReader {
  imageParam: string | undefined;

  constructor(private readonly fail: (fault: MessageFault) => never) {}

  missing(p: string): never {
    return this.fail({ code: "missing_field", param: p, message: `'${p}' is required` });
  }

  invalid(p: string, rule: string): never {
    return this.fail({ code: "invalid_value", param: p, message: `'${p}' ${rule}` });
  }

  unsupported(p: string, rule: string): never {
    return this.fail({ code: "unsupported_value", param: p, message: `'${p}' ${rule}` });
  }

  /** `o[key]` as a string (undefined when absent and not `required`); faults name `${at}.${key}`. */
  str(o: Obj, key: string, at: string, required: boolean, nonEmpty = false): string | undefined {
    const v = o[key];
    if (v === undefined || v === null) return required ? this.missing(`${at}.${key}`) : undefined;
    if (typeof v !== "string") return this.invalid(`${at}.${key}`, "must be a string");
    if (nonEmpty && v.length === 0) return this.invalid(`${at}.${key}`, "must not be empty");
    return v;
  }

  /** Message `i` of the array `param`. */
  message(m: unknown, param: string, i: number): ChatMessage {
    if (!isObj(m)) return this.invalid(`${param}[${i}]`, "must be an object");
    const role = m.role;
    if (role === undefined || role === null) return this.missing(`${param}[${i}].role`);
    if (typeof role !== "string" || !ROLES.includes(role)) {
      if (role === "function") return this.unsupported(`${param}[${i}].role`, "'function' is retired: use 'tool' messages");
      return this.invalid(`${param}[${i}].role`, "must be one of system, developer, user, assistant, tool");
    }
    const hasContent = m.content !== undefined && m.content !== null;
    if (role === "tool") {
      if (!hasContent) return this.missing(`${param}[${i}].content`);
      const tool_call_id = this.str(m, "tool_call_id", `${param}[${i}]`, true, true) as string;
      return { role, content: this.content(m, param, i, false) as string | TextPart[], tool_call_id };
    }
    const name = typeof m.name === "string" ? m.name : this.str(m, "name", `${param}[${i}]`, false);
    if (role === "assistant") {
      const calls = this.toolCalls(m, param, i);
      const refusal = typeof m.refusal === "string" ? m.refusal : this.str(m, "refusal", `${param}[${i}]`, false);
      if (!hasContent && (calls === undefined || calls.length === 0) && refusal === undefined)
        return this.missing(`${param}[${i}].content`);
      return {
        role,
        ...(hasContent
          ? { content: this.content(m, param, i, false) as string | TextPart[] }
          : m.content === null
            ? { content: null }
            : {}),
        ...(name !== undefined ? { name } : {}),
        ...(refusal !== undefined ? { refusal } : m.refusal === null ? { refusal: null } : {}),
        ...(calls !== undefined ? { tool_calls: calls } : {}),
      };
    }
    if (!hasContent) return this.missing(`${param}[${i}].content`);
    if (role === "user") {
      const content = this.content(m, param, i, true);
      return name === undefined ? { role, content } : { role, content, name };
    }
    const content = this.content(m, param, i, false) as string | TextPart[];
    const r = role as SystemMessage["role"];
    return name === undefined ? { role: r, content } : { role: r, content, name };
  }

  /** string | parts; `images`: whether image parts are OpenAI-defined here (user messages). */
  content(m: Obj, param: string, i: number, images: boolean): string | (TextPart | ImagePart)[] {
    const v = m.content;
    if (typeof v === "string") return v;
    const p = `${param}[${i}].content`;
    if (!Array.isArray(v)) return this.invalid(p, "must be a string or an array of content parts");
    if (v.length === 0) return this.invalid(p, "must hold at least 1 content part");
    const parts: (TextPart | ImagePart)[] = new Array(v.length);
    for (let j = 0; j < v.length; j++) {
      const pp = `${p}[${j}]`;
      const part: unknown = v[j];
      if (!isObj(part)) return this.invalid(pp, "must be an object");
      const type = part.type;
      if (type === undefined || type === null) return this.missing(`${pp}.type`);
      if (type === "text") {
        parts[j] = { type: "text", text: this.str(part, "text", pp, true) as string };
      } else if (type === "image_url" && images) {
        const image = part.image_url;
        if (image === undefined || image === null) return this.missing(`${pp}.image_url`);
        if (!isObj(image)) return this.invalid(`${pp}.image_url`, "must be an object");
        const url = this.str(image, "url", `${pp}.image_url`, true, true) as string;
        const detail = image.detail;
        if (detail !== undefined && detail !== null && (typeof detail !== "string" || !DETAILS.includes(detail))) {
          return this.invalid(`${pp}.image_url.detail`, "must be one of auto, low, high");
        }
        parts[j] = { type: "image_url", image_url: { url, ...(typeof detail === "string" ? { detail: detail as ImageDetail } : {}) } };
        this.imageParam ??= pp;
      } else if (type === "image_url" || type === "input_audio" || type === "file" || type === "refusal") {
        return this.unsupported(`${pp}.type`, "is a content part type not supported in this message");
      } else {
        return this.invalid(`${pp}.type`, "must be 'text' or 'image_url'");
      }
    }
    return parts;
  }

  toolCalls(m: Obj, param: string, i: number): ToolCall[] | undefined {
    const v = m.tool_calls;
    if (v === undefined || v === null) return undefined;
    const p = `${param}[${i}].tool_calls`;
    if (!Array.isArray(v)) return this.invalid(p, "must be an array");
    const calls: ToolCall[] = new Array(v.length);
    for (let k = 0; k < v.length; k++) {
      const cp = `${p}[${k}]`;
      const call: unknown = v[k];
      if (!isObj(call)) return this.invalid(cp, "must be an object");
      const id = this.str(call, "id", cp, true, true) as string;
      if (call.type === undefined || call.type === null) return this.missing(`${cp}.type`);
      if (call.type !== "function") return this.invalid(`${cp}.type`, "must be 'function'");
      const fn = call.function;
      if (fn === undefined || fn === null) return this.missing(`${cp}.function`);
      if (!isObj(fn)) return this.invalid(`${cp}.function`, "must be an object");
      const name = this.str(fn, "name", `${cp}.function`, true, true) as string;
      const args = this.str(fn, "arguments", `${cp}.function`, true) as string;
      calls[k] = { id, type: "function", function: { name, arguments: args } };
    }
    return calls;
  }
}
