/**
 * Sign-in links made by the operator: `POST /admin/v1/accounts/{id}/sign-in-links` (admin token; 404 for
 * an unknown account), `umbra-coordinator admin accounts sign-in-link --account ID` as a real process on
 * the running app's database, and `umbra-coordinator dev`'s banner link: each signs in once over the socket.
 */
import { expect, test } from "bun:test";
import { postSignIn, sessionCookie } from "../support/console.ts";
import { testApp } from "../support/harness.ts";
import { runCoordinator, startDev } from "../support/processes.ts";
import { startServer } from "../support/server.ts";

const PUBLIC = "https://umbra.example.com/gateway";
const LINK = /^https:\/\/umbra\.example\.com\/gateway\/console\/sign-in\?token=([A-Za-z0-9_-]{43})$/;

test("the admin route makes a 15-minute link on the public URL; it signs in once", async () => {
  const now = 1_795_000_000_000;
  await using t = await testApp({ env: { UMBRA_PUBLIC_URL: `${PUBLIC}/` }, clock: { now: () => now } });
  await using server = startServer(t);
  const account = await t.app.admin.createAccount({ name: "Ada" });
  const made = await t.admin("POST", `/accounts/${account.id}/sign-in-links`);
  expect(made).toEqual({
    status: 200,
    headers: expect.anything(),
    body: { url: expect.stringMatching(LINK), expires_at: (now + 15 * 60_000) / 1000 },
  });
  const token = LINK.exec((made.body as { url: string }).url)?.[1] ?? "";
  expect((await postSignIn(server.url, token)).status).toBe(303);
  expect((await postSignIn(server.url, token)).status).toBe(400);
  const unknown = await t.admin("POST", "/accounts/acct_nobody/sign-in-links");
  expect([unknown.status, (unknown.body as { error: { code: string } }).error.code]).toEqual([404, "not_found"]);
  const anonymous = await t.call("POST", `/admin/v1/accounts/${account.id}/sign-in-links`);
  expect(anonymous.status).toBe(401);
});

test("the CLI prints a link for the running coordinator's database", async () => {
  await using t = await testApp();
  await using server = startServer(t);
  const account = await t.app.admin.createAccount({ name: "Ada" });
  const run = await runCoordinator([
    "admin",
    "--db",
    t.config.db,
    "--public-url",
    PUBLIC,
    "accounts",
    "sign-in-link",
    "--account",
    account.id,
  ]);
  expect(run.code).toBe(0);
  const printed = JSON.parse(run.stdout) as { url: string; expires_at: number };
  expect(printed.url).toMatch(LINK);
  const r = await postSignIn(server.url, LINK.exec(printed.url)?.[1] ?? "");
  expect([r.status, sessionCookie(r) !== undefined]).toEqual([303, true]);
  const missing = await runCoordinator(["admin", "--db", t.config.db, "accounts", "sign-in-link"]);
  expect([missing.code, missing.stderr.includes('"code":"missing_field"')]).toEqual([1, true]);
});

test("umbra-coordinator dev prints a console link that signs in to the demo account", async () => {
  await using t = await testApp();
  t.app.close();
  await using dev = await startDev(t.config.db.replace(/umbra\.db$/, "dev.db"));
  expect(dev.consoleLink.startsWith(`${dev.url}/console/sign-in?token=`)).toBe(true);
  const token = new URL(dev.consoleLink).searchParams.get("token") ?? "";
  const r = await postSignIn(dev.url, token);
  const cookie = (sessionCookie(r) ?? "").split(";")[0] ?? "";
  const me = (await (await fetch(`${dev.url}/console/api/session`, { headers: { cookie } })).json()) as { account: { name: string } };
  expect([r.status, me.account.name]).toEqual([303, "Demo"]);
}, 60_000);
