/**
 * A private PostgreSQL server for tests that stop and start it (the machine's must never be restarted):
 * Debian's binaries (/usr/lib/postgresql/<version>/bin: initdb, pg_ctl), a cluster in a temp folder,
 * trust auth, listening on 127.0.0.1 on a free port and a socket in its own folder. initdb refuses to
 * run as root: as root every command runs as the `postgres` OS user (runuser), the folder owned by it.
 * `privatePostgres(suites)` returns undefined, printing one line naming the suites it skips, when the
 * binaries (Debian's postgresql package) or that user are missing. `restart()` is a fast stop (sessions
 * ended, transactions rolled back) and a start on the same port. `await using` stops it and removes it.
 */
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface PgServer extends AsyncDisposable {
  /** postgres://postgres@127.0.0.1:PORT/postgres */
  readonly url: string;
  readonly port: number;
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Fast stop, then start on the same port. */
  restart(): Promise<void>;
}

const LIB = "/usr/lib/postgresql";

/** The newest installed version's bin folder with initdb and pg_ctl, or undefined. */
function binaries(): string | undefined {
  if (!existsSync(LIB)) return undefined;
  const versions = readdirSync(LIB)
    .filter((v) => existsSync(join(LIB, v, "bin/initdb")) && existsSync(join(LIB, v, "bin/pg_ctl")))
    .sort((a, b) => Number(b) - Number(a));
  return versions[0] && join(LIB, versions[0], "bin");
}

/** The uid and gid of the `postgres` OS user, or undefined. */
function postgresUser(): { uid: number; gid: number } | undefined {
  const id = (flag: string) => Bun.spawnSync(["id", flag, "postgres"], { stdout: "pipe", stderr: "ignore" });
  const [u, g] = [id("-u"), id("-g")];
  if (u.exitCode !== 0 || g.exitCode !== 0) return undefined;
  return { uid: Number(u.stdout.toString().trim()), gid: Number(g.stdout.toString().trim()) };
}

async function freePort(): Promise<number> {
  const probe = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data() {} } });
  const port = probe.port;
  probe.stop(true);
  return port;
}

/** A private server, started; undefined (with the skip line printed) when it cannot be made here. */
export async function privatePostgres(suites: readonly string[]): Promise<PgServer | undefined> {
  const bin = binaries();
  const root = process.getuid?.() === 0;
  const user = root ? postgresUser() : undefined;
  if (bin === undefined || (root && user === undefined)) {
    console.warn(
      `skipped (${bin === undefined ? `no PostgreSQL binaries under ${LIB}` : "no postgres OS user to run initdb as"}): ${suites.join(", ")}; ` +
        "install Debian's postgresql package (.ci/run does) to run them",
    );
    return undefined;
  }
  const dir = mkdtempSync(join(tmpdir(), "umbra-pg-"));
  if (user) chownSync(dir, user.uid, user.gid);
  const data = join(dir, "data");
  const as = (argv: string[]) => (user ? ["runuser", "-u", "postgres", "--", ...argv] : argv);
  const run = async (argv: string[]) => {
    const p = Bun.spawn(as(argv), { stdout: "pipe", stderr: "pipe", env: { PATH: process.env.PATH ?? "", LC_ALL: "C" } });
    const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
    if (code !== 0) throw new Error(`${argv.slice(0, 2).join(" ")} exited ${code}:\n${(out + err).slice(-2000)}`);
  };
  const port = await freePort();
  await run([join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]);
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200`;
  const start = () => run([join(bin, "pg_ctl"), "-D", data, "-l", join(dir, "log"), "-o", options, "-w", "-t", "60", "start"]);
  const stop = (mode: "fast" | "immediate") => run([join(bin, "pg_ctl"), "-D", data, "-m", mode, "-w", "-t", "60", "stop"]);
  await start();
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    stop: () => stop("fast"),
    start,
    async restart() {
      await stop("fast");
      await start();
    },
    async [Symbol.asyncDispose]() {
      await stop("immediate").catch(() => {});
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
