/**
 * umbra-provider: the tool a provider runs on an Apple Silicon Mac to lend it to Umbra.
 *
 *   doctor   check this machine (doctor/)
 *   login    link this machine to an account: device authorization (login.ts)
 *   enroll   enrol this Mac in the coordinator's MDM server, for the hardware trust level (enroll.ts)
 *   start    serve models to a coordinator, in the foreground or --detach (start.ts)
 *   status   the local provider's state, running or not (status.ts)
 *   stop     drain and stop a detached provider (status.ts)
 *
 * Exit codes: 0 ok; 1 refused or failed at run time (see each command); 2 bad usage or configuration.
 */
import { ConfigError } from "../config/config.ts";
import { processEnv } from "../config/settings.ts";
import { VERSION } from "../version.ts";
import { doctorCommand } from "./doctor/index.ts";
import { enrollCommand } from "./enroll.ts";
import { loginCommand } from "./login.ts";
import { startCommand } from "./start.ts";
import { statusCommand, stopCommand } from "./status.ts";

const USAGE = `umbra-provider ${VERSION}

usage:
  umbra-provider doctor   check this machine (doctor --help)
  umbra-provider login    link this machine to an account (login --help)
  umbra-provider enroll   enrol this Mac in the coordinator's MDM server (enroll --help)
  umbra-provider start    serve models to a coordinator (start --help)
  umbra-provider status   show the local provider's state (status --help)
  umbra-provider stop     drain and stop a provider started with start --detach`;

const printErr = (text: string) => process.stderr.write(`${text}\n`);

async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case "--version":
    case "version":
      process.stdout.write(`${VERSION}\n`);
      return 0;
    case undefined:
    case "help":
    case "--help":
    case "-h":
      process.stdout.write(`${USAGE}\n`);
      return command === undefined ? 2 : 0;
    case "start":
      return startCommand(rest, processEnv());
    case "doctor":
      return doctorCommand(rest);
    case "login":
      return loginCommand(rest, processEnv());
    case "enroll":
      return enrollCommand(rest);
    case "status":
      return statusCommand(rest, processEnv());
    case "stop":
      return stopCommand(rest, processEnv());
    default:
      printErr(`umbra-provider: unknown command '${command}'\n\n${USAGE}`);
      return 2;
  }
}

/** Exits once stdout and stderr are flushed: a pipe (`status --json | jq`) must get every byte. */
async function exit(code: number): Promise<never> {
  await Promise.all([process.stdout, process.stderr].map((stream) => new Promise<void>((resolve) => stream.write("", () => resolve()))));
  process.exit(code);
}

main(process.argv.slice(2)).then(
  (code) => exit(code),
  (error: unknown) => {
    if (error instanceof ConfigError) {
      printErr(`umbra-provider: ${error.message}\n(umbra-provider <command> --help lists every flag)`);
      return exit(2);
    }
    printErr(`umbra-provider: internal error (${error instanceof Error ? error.name : "unknown"})`);
    return exit(1);
  },
);
