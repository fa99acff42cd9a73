/**
 * What a running process holds, read from /proc (Linux): resident memory and open file descriptors.
 * Used by the body-limit cases and the soak to show that input does not stay behind in a coordinator.
 */
import { readdirSync, readFileSync } from "node:fs";

/** Resident set size in bytes (VmRSS of /proc/<pid>/status). */
export function rssBytes(pid: number): number {
  const match = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  if (!match) throw new Error(`no VmRSS for process ${pid}`);
  return Number(match[1]) * 1024;
}

/** Open file descriptors (entries of /proc/<pid>/fd). */
export function openFds(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

export const MiB = 1024 * 1024;

/** Bytes as MiB with one decimal, for reports. */
export const mib = (bytes: number) => `${(bytes / MiB).toFixed(1)} MiB`;
