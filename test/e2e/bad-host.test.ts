/**
 * A Host header that is not a host name (a space, a slash, an `@` ...) over a real socket: Bun then hands
 * the app a request whose URL is not absolute. Every route answers 400 invalid_value in the envelope
 * (RFC 9112: an invalid Host is a bad request), and the refusal is logged with allowlisted fields only,
 * never the header's value. Before: routes answered as if nothing was wrong, and an unknown route made
 * the error hook itself throw, an unlogged 500.
 */
import { describe, expect, test } from "bun:test";
import { connect } from "node:net";
import { testApp } from "../support/harness.ts";
import { startServer } from "../support/server.ts";

/** One request on its own connection (`Connection: close`); the whole response as text. */
function raw(port: number, head: string, body = ""): Promise<string> {
  const length = body === "" ? "" : `\r\nContent-Length: ${Buffer.byteLength(body)}`;
  return new Promise((resolve, reject) => {
    let received = "";
    const socket = connect(port, "127.0.0.1", () => socket.write(`${head}${length}\r\nConnection: close\r\n\r\n${body}`));
    socket.on("data", (data) => {
      received += data.toString();
    });
    socket.on("error", reject);
    socket.on("close", () => resolve(received));
  });
}

function answer(text: string) {
  const split = text.indexOf("\r\n\r\n");
  return { status: Number(text.split(" ")[1]), body: JSON.parse(text.slice(split + 4)) as unknown };
}

const BAD_HOST = {
  error: { message: "the Host header is not a valid host name", type: "invalid_request_error", code: "invalid_value" },
};

describe("a Host header that is not a host", () => {
  test.each([
    ["a space", "bad host"],
    ["a slash", "bad/host"],
    ["a backslash", "bad\\host"],
    ["an at sign", "user@host"],
    ["a percent escape", "bad%20host"],
    ["two colons", "a:b:c"],
  ])("%s -> 400 on every route, logged without the value", async (_, host) => {
    await using t = await testApp();
    await using server = startServer(t);
    for (const path of ["/nope", "/v1/pricing", "/device", "/v1/models"]) {
      const text = await raw(server.port, `GET ${path} HTTP/1.1\r\nHost: ${host}`);
      expect({ path, ...answer(text) }).toEqual({ path, status: 400, body: BAD_HOST });
    }
    const lines = t.logs
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.msg === "request refused: invalid Host header");
    expect(lines.map(({ time: _time, ...rest }) => rest)).toEqual(
      Array.from({ length: 4 }, () => ({ level: "info", msg: "request refused: invalid Host header", method: "GET", status: 400 })),
    );
    expect(t.logs.join("\n")).not.toContain(host);
    expect(t.logs.filter((l) => l.includes('"level":"error"'))).toEqual([]);
  });

  test("a good Host routes; HTTP/1.0 without one is 400 on every route, not a misrouted path", async () => {
    await using t = await testApp();
    await using server = startServer(t);
    expect(answer(await raw(server.port, "GET /v1/pricing HTTP/1.1\r\nHost: api")).status).toBe(200);
    expect(answer(await raw(server.port, "GET /v1/pricing HTTP/1.0\r\nHost: api")).status).toBe(200);
    const noHost = {
      status: 400,
      body: { error: { message: "a Host header is required", type: "invalid_request_error", code: "invalid_value" } },
    };
    expect(answer(await raw(server.port, "GET /v1/pricing HTTP/1.0"))).toEqual(noHost);
    // Before: Elysia cut the bare path by an absolute URL's length and answered 404 (or a 500 from the
    // device routes, which build the approval page's origin from the URL).
    const body = JSON.stringify({ client_id: "umbra-provider" });
    expect(answer(await raw(server.port, "POST /v1/provider/device/code HTTP/1.0\r\nContent-Type: application/json", body))).toEqual(
      noHost,
    );
    expect(answer(await raw(server.port, "GET /v1/provider/device/preview?user_code=ABCD-EFGH HTTP/1.0"))).toEqual(noHost);
    expect(t.logs.filter((l) => l.includes("request refused: no Host header"))).toHaveLength(3);
    expect(t.logs.filter((l) => l.includes('"level":"error"'))).toEqual([]);
  });
});
