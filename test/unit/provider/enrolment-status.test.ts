/**
 * The tool's read of GET /v1/provider/enroll/status (src/provider/enrolment-status.ts), as `status` and
 * `doctor` show it: a coordinator without MDM enrolment (404: not offered), one with it (none, then
 * issued after a profile), and a refused token.
 */
import { describe, expect, test } from "bun:test";
import { SoftwareIdentity } from "../../../attestation/provider/software-identity.ts";
import { enrolMessage } from "../../../src/mdm/enrolment.ts";
import { describeEnrolment, fetchEnrolmentStatus } from "../../../src/provider/enrolment-status.ts";
import { seedAccount, tempDir, testApp } from "../../support/harness.ts";
import { mdmEnv, NANOMDM_ENV, testCa } from "../../support/mdm-ca.ts";
import { providerToken, startServer } from "../../support/server.ts";

const read = (base: string, token: string) => fetchEnrolmentStatus(base, token, { signal: AbortSignal.timeout(5_000) });
const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64");

describe("enrolment status for status and doctor", () => {
  test("a coordinator without MDM enrolment: not offered", async () => {
    await using t = await testApp();
    await using server = startServer(t);
    const token = await providerToken(t, (await seedAccount(t)).accountId);
    const answer = await read(server.url, token);
    expect([answer, describeEnrolment(answer)]).toEqual([
      { offered: false },
      "not offered by this coordinator (no MDM enrolment: hardware trust only through --dev-attestation)",
    ]);
  });

  test("with MDM enrolment: none, then issued once a profile was made; a refused token is its HTTP status", async () => {
    using dir = tempDir();
    await using t = await testApp({ env: { ...NANOMDM_ENV, ...mdmEnv(dir.path, testCa()) } });
    await using server = startServer(t);
    const token = await providerToken(t, (await seedAccount(t)).accountId);
    const before = await read(server.url, token);
    const identity = SoftwareIdentity.generate();
    const auth = { authorization: `Bearer ${token}` };
    const c = await fetch(`${server.url}/v1/provider/enroll/challenge`, { method: "POST", headers: auth });
    const challenge = new Uint8Array(Buffer.from(((await c.json()) as { challenge: string }).challenge, "base64"));
    const enrolled = await fetch(`${server.url}/v1/provider/enroll`, {
      method: "POST",
      headers: { ...auth, "content-type": "application/json" },
      body: JSON.stringify({
        challenge: b64(challenge),
        identity_key: b64(identity.publicKey(65)),
        signature: b64(identity.sign(enrolMessage(challenge))),
      }),
    });
    expect(enrolled.status).toBe(200);
    const after = await read(server.url, token);
    expect([before, after, await read(server.url, "umbra-pt-not-a-token")]).toEqual([
      { offered: true, state: "none", attested_at: null },
      { offered: true, state: "issued", attested_at: null },
      { offered: true, status: 401 },
    ]);
    expect(describeEnrolment(after)).toBe(
      "profile issued, not installed yet: approve it in System Settings -> Privacy & Security -> Profiles",
    );
  });
});
