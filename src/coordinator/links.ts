/**
 * The cluster and MDM links' modules, loaded only when the configuration turns them on (`loadLinks`, which
 * the serve command runs before createApp): NATS, the MDM's plist and XML libraries and the code on them
 * stay out of a coordinator that uses neither. A smaller heap shortens every garbage collection's pause
 * (bench/gc-pause.ts: its fixed part grows with the heap) and the start.
 */
import type { Config } from "../config/config.ts";

export interface Links {
  readonly cluster?: typeof import("./cluster-link.ts");
  readonly mdm?: typeof import("./mdm-link.ts");
}

/** The links `config` needs: cluster mode (config.cluster), MDM mode (config.mdm with config.mdmEnrolment). */
export async function loadLinks(config: Pick<Config, "cluster" | "mdm" | "mdmEnrolment">): Promise<Links> {
  const [cluster, mdm] = await Promise.all([
    config.cluster ? import("./cluster-link.ts") : undefined,
    config.mdm && config.mdmEnrolment ? import("./mdm-link.ts") : undefined,
  ]);
  return { ...(cluster ? { cluster } : {}), ...(mdm ? { mdm } : {}) };
}

/** The loaded module `name`; throws when the configuration needs it and `loadLinks` did not run. */
export function needLink<K extends keyof Links>(links: Links | undefined, name: K): NonNullable<Links[K]> {
  const link = links?.[name];
  if (!link) throw new Error(`the ${name} link is not loaded: await loadLinks(config) and give createApp its links`);
  return link as NonNullable<Links[K]>;
}
