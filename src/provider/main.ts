#!/usr/bin/env bun
/**
 * umbra-provider: the tool a provider runs on an Apple Silicon Mac (doctor, login, start, status).
 * This build carries the command surface; each subcommand lands with its issue (see docs/).
 */
import { VERSION } from "../version.ts";

const USAGE = `umbra-provider ${VERSION}

usage:
  umbra-provider doctor   check this machine
  umbra-provider login    link this machine to an account
  umbra-provider start    serve models to a coordinator
  umbra-provider status   show the local provider's state`;

const [command] = process.argv.slice(2);
switch (command) {
  case "--version":
  case "version":
    process.stdout.write(`${VERSION}\n`);
    break;
  case undefined:
  case "help":
  case "--help":
  case "-h":
    process.stdout.write(`${USAGE}\n`);
    process.exitCode = command === undefined ? 2 : 0;
    break;
  case "doctor":
  case "login":
  case "start":
  case "status":
    process.stderr.write(`umbra-provider: '${command}' is not available in version ${VERSION} yet\n`);
    process.exitCode = 2;
    break;
  default:
    process.stderr.write(`umbra-provider: unknown command '${command}'\n\n${USAGE}\n`);
    process.exitCode = 2;
}
