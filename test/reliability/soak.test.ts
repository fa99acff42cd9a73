/**
 * The soak of soak-run.ts, short (18 s, or SOAK_TEST_SECONDS), so that `make test` runs it: the same
 * mixed traffic, provider kill and restart, and checks as `make soak` (soak.ts).
 */
import { declareSoak, soakSettings } from "./soak-run.ts";

declareSoak("soak (short)", soakSettings(Number(process.env.SOAK_TEST_SECONDS ?? 18)));
