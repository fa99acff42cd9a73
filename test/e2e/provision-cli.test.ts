/**
 * `umbra-coordinator provision` as an operator runs it, against a real `serve --provisioning await`
 * process with development evidence: the expectation from the published measurements.json (`--image`,
 * `--shape`), a shape whose measurement differs (refused, exit 1, nothing sent: still unprovisioned), and
 * bad usage (exit 2). After provisioning the admin API answers with the sealed token, and a second
 * provisioning is refused.
 */
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../support/harness.ts";
import { writeMeasurements } from "../support/measurements.ts";
import { runCoordinator, startCoordinator } from "../support/processes.ts";

const MEASUREMENT = "ab".repeat(48);
const TOKEN = "operator-token-0123456789abcdefghijklmnop";

describe("umbra-coordinator provision", () => {
  test("--image/--shape: a matching shape provisions; another shape is refused before anything is sent", async () => {
    using dir = tempDir();
    const tokenFile = join(dir.path, "token.txt");
    writeFileSync(tokenFile, `${TOKEN}\n`);
    const image = writeMeasurements(dir.path, [
      { name: "other", measurement: "cd".repeat(48) },
      { name: "published", measurement: MEASUREMENT },
    ]);
    await using c = await startCoordinator(
      { UMBRA_PROVISIONING: "await", UMBRA_ADMIN_TOKEN: "", UMBRA_EXPECTED_MEASUREMENT: MEASUREMENT },
      { dir: dir.path },
    );
    const admin = () => fetch(`${c.url}/admin/v1/accounts`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect((await admin()).status).toBe(503);

    const usage = await runCoordinator([
      "provision",
      c.url,
      "--image",
      image,
      "--expected-measurement",
      MEASUREMENT,
      "--admin-token-file",
      tokenFile,
    ]);
    expect(usage.code).toBe(2);

    const wrong = await runCoordinator([
      "provision",
      c.url,
      "--image",
      image,
      "--shape",
      "other",
      "--admin-token-file",
      tokenFile,
      "--allow-development-evidence",
    ]);
    expect([wrong.code, wrong.stderr.includes("attestation check failed: measurement")]).toEqual([1, true]);
    expect((await admin()).status).toBe(503);

    const right = await runCoordinator([
      "provision",
      c.url,
      "--image",
      image,
      "--shape",
      "published",
      "--admin-token-file",
      tokenFile,
      "--allow-development-evidence",
    ]);
    expect([right.code, right.stdout.includes(`measurement   ${MEASUREMENT}`)]).toEqual([0, true]);
    expect((await admin()).status).toBe(200);

    const again = await runCoordinator([
      "provision",
      c.url,
      "--image",
      image,
      "--admin-token-file",
      tokenFile,
      "--allow-development-evidence",
    ]);
    expect([again.code, again.stderr.includes("409")]).toEqual([1, true]);
  });
});
