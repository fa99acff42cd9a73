/**
 * What a request carries, read within bounds: its body (size and time: 413, and 504 with the connection
 * closed; a body that breaks off is 400), its JSON (exact digits for named fields) and the path's id.
 */
import { Errors } from "../errors/api-error.ts";
import { parseJsonExact } from "../validation/fields.ts";

/** Whole decodes hold no state, so one decoder serves every body (invalid UTF-8 becomes U+FFFD, as JSON.parse then sees it). */
const UTF8 = new TextDecoder();

/** How much of a request body a route accepts, and how long its client may take to send it. */
export interface BodyLimits {
  readonly maxBytes: number;
  /**
   * The whole body must arrive within this many ms of the route starting to read it. The server's idle
   * timeout closes a body that stalls; this closes one trickled a byte at a time, which the idle timeout
   * never sees idle (a connection held for as long as the client likes).
   */
  readonly timeoutMs: number;
}

/**
 * Reads a JSON body within `limits` (readBody), then parses it (parseJson). Throws 413
 * request_too_large, 400 invalid_json or 504 timeout.
 */
export async function readJsonBody(request: Request, limits: BodyLimits): Promise<unknown> {
  return parseJson(await readBody(request, limits));
}

/**
 * Reads a body of at most `limits.maxBytes` without holding more than that in memory: a declared length
 * over the limit is refused before reading, and a stream that grows past it is cancelled. No body reads
 * as empty. Throws 413 request_too_large, 400 invalid_json when the body breaks off (the client went away
 * or its framing broke before the end), or 504 timeout when it is not all there within
 * `limits.timeoutMs`; that answer carries `connection: close`, so the server closes the connection
 * after it instead of reading the rest.
 */
export async function readBody(request: Request, limits: BodyLimits): Promise<Uint8Array> {
  const { maxBytes, timeoutMs } = limits;
  const declared = request.headers.get("content-length");
  if (declared !== null && Number(declared) > maxBytes) {
    throw Errors.requestTooLarge(`the request body exceeds ${maxBytes} bytes`);
  }
  // A declared length within the limit is read in one call (the server reads exactly that many bytes),
  // without asking for `request.body` (which makes a stream object); only a body of unknown length is
  // counted as it streams.
  const stream = declared === null ? request.body : undefined;
  if (declared === null && !stream) return new Uint8Array(0);
  const reader = stream?.getReader();
  const read: Promise<Uint8Array> = reader ? readCounted(reader, maxBytes) : request.bytes();
  // One timer beside the read (no race of promises): whichever settles first decides.
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      void reader?.cancel().catch(() => {});
      reject(Errors.timeout(`the request body did not arrive within ${timeoutMs} ms`, undefined, { connection: "close" }));
    }, timeoutMs);
    read.then(
      (body) => {
        clearTimeout(timer);
        resolve(body);
      },
      (e: unknown) => {
        clearTimeout(timer);
        // A stream that broke off is a body that ended early; readCounted's own refusals (413) stand.
        reject(reader ? e : Errors.invalidJson("the request body ended before it was complete"));
      },
    );
  });
}

/** What readCounted needs of a body stream's reader. */
interface BodyReader {
  read(): Promise<{ done: true; value?: undefined } | { done: false; value: Uint8Array }>;
  cancel(): Promise<void>;
}

/** Reads a body of unknown length, cancelling it once it grows past `maxBytes` (413). */
async function readCounted(reader: BodyReader, maxBytes: number): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await intact(reader.read());
    if (done) break;
    size += value.byteLength;
    if (size > maxBytes) {
      await reader.cancel().catch(() => {});
      throw Errors.requestTooLarge(`the request body exceeds ${maxBytes} bytes`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks, size);
}

/** A read of the body that fails means the body broke off: a 400, not a server error. */
async function intact<T>(read: Promise<T>): Promise<T> {
  try {
    return await read;
  } catch {
    throw Errors.invalidJson("the request body ended before it was complete");
  }
}

/**
 * A JSON body's value (undefined when empty); the top-level fields `exact` are read from their digits
 * where doubles cannot hold them exactly (parseJsonExact). Throws 400 invalid_json.
 */
export function parseJson(bytes: Uint8Array, exact: readonly string[] = []): unknown {
  if (bytes.byteLength === 0) return undefined;
  try {
    const text = UTF8.decode(bytes);
    return exact.length === 0 ? (JSON.parse(text) as unknown) : parseJsonExact(text, exact);
  } catch {
    throw Errors.invalidJson("the body is not valid JSON");
  }
}

/** The wildcard path parameter as an id: percent-decoded once; undefined when the encoding is broken. */
export function pathId(raw: string | undefined): string | undefined {
  if (raw === undefined || raw === "") return undefined;
  try {
    return decodeURIComponent(raw);
  } catch {
    return undefined;
  }
}
