/**
 * Preloaded into every `bun test` run (bunfig.toml): reflect-metadata first (STACK.md item 1), then a
 * global afterAll that prints the reliability suite's summary once every file has run.
 */
import "../attestation/provider/preload.ts";
import { afterAll } from "bun:test";
import { reliabilitySummary } from "./reliability/report.ts";

afterAll(() => {
  for (const line of reliabilitySummary()) console.log(line);
});
