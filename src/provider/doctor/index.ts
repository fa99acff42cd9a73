/**
 * `umbra-provider doctor`: checks this machine (checks.ts lists them; each entry says what it reads and
 * what each trust level needs of it) and prints one line per check, then whether it can serve at the
 * trust level asked for (`--trust`, default hardware). Machine access goes through a Probe (probe.ts).
 *
 * Exit rule: 0 ready, 1 not ready, 2 bad usage. A check a level needs blocks when it failed, warned where
 * the level needs a pass, or was skipped; every other check is advice (verdict.ts). Levels as
 * attestation/README.md defines them: hardware needs the whole posture proven (doctor promises no more
 * than it saw); self_signed needs platform and SIP, and takes an unread Secure Boot level or a software
 * key; none (development) needs only the service checks. hardware and self_signed also need memory and
 * disk for the weights. The token is never printed.
 */
import { ConfigError, processEnv } from "../../config/settings.ts";
import type { Timeouts, TrustLevel } from "./check.ts";
import { runChecks } from "./checks.ts";
import { parseFlags, settingsOf, trustOf, UsageError } from "./context.ts";
import { messageOf, type Probe, realProbe } from "./probe.ts";
import { renderHuman, renderJson } from "./render.ts";
import { assess } from "./verdict.ts";

export type { Status, Timeouts, TrustLevel } from "./check.ts";
export { type CheckId, type CheckResult, REQUIREMENTS } from "./checks.ts";
export { type CommandResult, type Probe, realProbe } from "./probe.ts";

export interface DoctorIO {
  readonly probe: Probe;
  readonly stdout: { write(text: string): unknown; readonly isTTY?: boolean };
  readonly stderr: { write(text: string): unknown };
  readonly timeouts?: Partial<Timeouts>;
}

const DEFAULT_TIMEOUTS: Timeouts = { commandMs: 5_000, profilerMs: 15_000, networkMs: 3_000, helperMs: 10_000 };

const USAGE = `usage: umbra-provider doctor [--trust hardware|self_signed|none] [--json]
                             [--engine echo|openai [--upstream URL]] [--model BUILD[=UPSTREAM_NAME] ...]
                             [--coordinator URL] [--token TOKEN] [--identity-helper PATH] [--models-dir PATH]
                             [--coordinator-image measurements.json [--coordinator-shape NAME]]

Checks this machine and prints one line per check (pass, warn, FAIL, skip) with what to do:
Apple Silicon, macOS version, SIP, Secure Boot, Secure Enclave helper, memory and disk for the models,
engine, coordinator, clock skew, device token, whether each model is a catalog build (not an alias).
The token is never printed.

  --trust LEVEL        the level this machine must serve at (default hardware); none is development
  --json               one JSON object on stdout: {version, trust_required, ready, blocking, checks}
  --models-dir PATH    where the weights live, for the disk check (UMBRA_PROVIDER_MODELS_DIR;
                       default: the provider home folder)
  other flags          as for start, with the same UMBRA_PROVIDER_* environment twins

Exit status: 0 ready to serve at the trust level, 1 not ready, 2 bad usage.`;

/** `umbra-provider doctor` with injected machine access and streams; returns the exit status. */
export async function runDoctor(argv: readonly string[], io: DoctorIO): Promise<number> {
  const timeouts = { ...DEFAULT_TIMEOUTS, ...io.timeouts };
  let flags: ReturnType<typeof parseFlags>;
  let trust: TrustLevel;
  let settings: ReturnType<typeof settingsOf>;
  try {
    flags = parseFlags(argv);
    if (flags.help === true) {
      io.stdout.write(`${USAGE}\n`);
      return 0;
    }
    trust = trustOf(flags);
    settings = settingsOf(flags, io.probe, timeouts);
  } catch (error) {
    const parseError = String((error as { code?: unknown }).code).startsWith("ERR_PARSE_ARGS");
    if (!(error instanceof UsageError || error instanceof ConfigError || parseError)) throw error;
    io.stderr.write(`umbra-provider doctor: ${messageOf(error)}\n(umbra-provider doctor --help lists every flag)\n`);
    return 2;
  }
  const checks = await runChecks(settings);
  const verdict = assess(checks, trust);
  const text =
    flags.json === true
      ? renderJson(checks, verdict, trust)
      : renderHuman(checks, verdict, trust, io.stdout.isTTY === true && !io.probe.env.NO_COLOR);
  // Belt and braces: no check prints the token, and none may by accident.
  const secret = settings.token?.value;
  io.stdout.write(secret !== undefined && secret.length >= 8 ? text.replaceAll(secret, "[redacted]") : text);
  return verdict.ready ? 0 : 1;
}

/** `umbra-provider doctor [flags]`: exit 0 ready, 1 not ready, 2 bad usage. */
export async function doctorCommand(argv: readonly string[]): Promise<number> {
  return runDoctor(argv, { probe: realProbe(processEnv()), stdout: process.stdout, stderr: process.stderr });
}
