/** Protocol frames that several protocol tests start from. */

/** A valid `welcome` (protocol v2) with no capabilities; spread and override fields per test. */
export const WELCOME = {
  type: "welcome",
  protocol_version: 2,
  provider_id: "prov_1",
  trust_level: "none",
  heartbeat_interval_ms: 1000,
  liveness_timeout_ms: 3000,
} as const;
