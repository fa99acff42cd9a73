/**
 * `make soak`: the soak of soak-run.ts for SOAK_SECONDS (default 600), run through bun test so that its
 * cases print what they tried and what held (report.ts) and the summary line; exits non-zero on failure.
 *
 *   SOAK_SECONDS=600 node_modules/.bin/bun test ./test/reliability/soak.ts
 *
 * Other knobs: SOAK_WORKERS (6), SOAK_SEED, SOAK_KILL_EVERY_SECONDS (a third of the run, at most 60),
 * SOAK_RSS_GROWTH_MIB (48). Not named *.test.ts: `make test` runs the short soak.test.ts instead.
 */
import { declareSoak, soakSettings } from "./soak-run.ts";

declareSoak("soak", soakSettings(Number(process.env.SOAK_SECONDS ?? 600)));
