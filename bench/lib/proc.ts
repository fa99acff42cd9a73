/**
 * What a running process holds and has used, read from /proc (Linux): resident memory, open file
 * descriptors, CPU time. Shared by the reliability suite (memory and descriptor bounds, the soak) and
 * the benchmarks (CPU per request, memory per open stream).
 */
import { readdirSync, readFileSync } from "node:fs";

export const MiB = 1024 * 1024;

/** Bytes as MiB with one decimal, for reports. */
export const mib = (bytes: number) => `${(bytes / MiB).toFixed(1)} MiB`;

/** Resident set size in KiB (VmRSS of /proc/<pid>/status). */
export function rssKiB(pid: number): number {
  const match = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  if (!match) throw new Error(`no VmRSS for process ${pid}`);
  return Number(match[1]);
}

/** Resident set size in bytes. */
export const rssBytes = (pid: number) => rssKiB(pid) * 1024;

/** Open file descriptors (entries of /proc/<pid>/fd). */
export function openFds(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

/** CPU time (user + system) a process has used so far, in microseconds (/proc/<pid>/stat, 100 ticks per second). */
export function cpuMicros(pid: number): number {
  // After "pid (comm) ": state is field 0, utime field 11 and stime field 12, in clock ticks.
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
  return ((Number(fields[11]) + Number(fields[12])) * 1_000_000) / 100;
}

/**
 * CPU time a process has used so far, all threads, in ms (/proc/<pid>/task/<tid>/schedstat: run time in
 * ns; finer than cpuMicros's 10 ms ticks, for short-lived processes).
 */
export function threadCpuMs(pid: number): number {
  let ns = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[0]);
    } catch {
      // the thread ended meanwhile
    }
  }
  return ns / 1e6;
}

/** CPU time all cores have spent busy so far (user, nice, system, irq, softirq of /proc/stat), in microseconds. */
export function machineBusyMicros(): number {
  const [, user, nice, system, , , irq, softirq] = (readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "").split(/\s+/).map(Number);
  return (((user ?? 0) + (nice ?? 0) + (system ?? 0) + (irq ?? 0) + (softirq ?? 0)) * 1_000_000) / 100;
}

/** CPU time so far of every process by its command name (/proc/<pid>/comm), per name, in microseconds. */
export function cpuMicrosByName(names: readonly string[]): Map<string, Map<number, number>> {
  const out = new Map(names.map((n) => [n, new Map<number, number>()]));
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const comm = readFileSync(`/proc/${entry}/comm`, "utf8").trim();
      out.get(comm)?.set(Number(entry), cpuMicros(Number(entry)));
    } catch {
      // ended meanwhile
    }
  }
  return out;
}
