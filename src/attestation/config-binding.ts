/**
 * The start-up check of the configuration binding: the digest of the loaded configuration
 * (src/config/config-digest.ts) must equal the bound one, or the coordinator refuses to start.
 *
 *   none       nothing to compare (development, or a host that is trusted with the configuration); the
 *              attestation document says `bound_by: "none"`, so verifiers see it
 *   cmdline    the digest given by --config-digest: the image's /init hands over the measured kernel
 *              command line's `umbra.config=<hex>` (the command line is hashed into the launch measurement)
 *   host-data  the HOST_DATA field (32 bytes) of the coordinator's own report: chosen by the host at launch,
 *              not measured, signed by the platform; verifiers compare it with the digest they expect
 *
 * Throws ConfigError naming both digests (hex; no secret is in the digest).
 */
import type { Config } from "../config/config.ts";
import { configDigest } from "../config/config-digest.ts";
import { ConfigError } from "../config/settings.ts";
import { ApiError } from "../errors/api-error.ts";
import type { CoordinatorAttestation } from "./coordinator-attestation.ts";

const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");

/** Compares the bound digest with the configuration's. */
export async function checkConfigBinding(config: Config, attestation: CoordinatorAttestation): Promise<void> {
  const digest = configDigest(config);
  let bound: Uint8Array;
  let where: string;
  switch (config.configBinding) {
    case "none":
      return;
    case "cmdline":
      if (config.configDigest === null) throw new ConfigError("--config-binding cmdline needs --config-digest");
      bound = config.configDigest;
      where = "the kernel command line (umbra.config=, via --config-digest)";
      break;
    case "host-data":
      try {
        bound = (await attestation.ownReport()).hostData;
      } catch (e) {
        const why = e instanceof ApiError ? e.message : e instanceof Error ? e.name : "unknown";
        throw new ConfigError(`--config-binding host-data: the report's HOST_DATA cannot be read: ${why}`);
      }
      where = "the report's HOST_DATA";
      break;
  }
  if (hex(bound) !== hex(digest)) {
    throw new ConfigError(
      `the configuration's digest ${hex(digest)} differs from the digest bound by ${where}, ${hex(bound)}: refusing to start (umbra-coordinator config-digest prints the digest of a configuration)`,
    );
  }
}
