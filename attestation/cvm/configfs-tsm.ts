/**
 * Evidence from real hardware through Linux configfs-tsm (Documentation/ABI/testing/configfs-tsm, Linux 6.7+):
 * one directory per request under /sys/kernel/config/tsm/report.
 *
 * Steps of get(reportData):
 *   1. mkdir <root>/<name> (a fresh, unguessable name per request); a missing root means the kernel has no
 *      configfs-tsm (configfs_tsm_unavailable).
 *   2. Read `provider` ("sev_guest" -> sev-snp, "tdx_guest" -> tdx); another provider than the source's
 *      platform is refused (configfs_tsm_provider).
 *   3. Write `privlevel` (SEV-SNP: the VMPL to request; only when configured), then `inblob` (the 64 bytes).
 *   4. Read `generation`: it counts the writes to this entry, so it must equal ours; read `outblob` (the
 *      report or quote) and `auxblob` (SEV-SNP: the host's certificate table, cert-table.ts; absent or empty
 *      when the host provides none); read `generation` again: unchanged, or another writer raced us
 *      (configfs_tsm_race).
 *   5. rmdir the entry, whatever happened.
 * Any other file-system failure is configfs_tsm_io.
 *
 * The file system is injected (TsmFileSystem) so that tests run against a fake kernel in a temp directory.
 */

import { mkdir, readFile, rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { endorsementsFromCertTable } from "./cert-table.ts";
import { CvmAttestationError, ensure } from "./errors.ts";
import { type CoordinatorEvidence, checkReportDataLength, type EvidenceSource } from "./evidence-source.ts";

export const CONFIGFS_TSM_ROOT = "/sys/kernel/config/tsm/report";

const PROVIDERS: Record<string, "sev-snp" | "tdx"> = { sev_guest: "sev-snp", tdx_guest: "tdx" };

export interface TsmFileSystem {
  mkdir(path: string): Promise<void>;
  rmdir(path: string): Promise<void>;
  readFile(path: string): Promise<Uint8Array>;
  writeFile(path: string, data: Uint8Array | string): Promise<void>;
}

export const nodeTsmFileSystem: TsmFileSystem = {
  mkdir: async (path) => {
    await mkdir(path);
  },
  rmdir: (path) => rmdir(path),
  readFile: async (path) => new Uint8Array(await readFile(path)),
  writeFile: (path, data) => writeFile(path, data),
};

export interface ConfigfsTsmOptions {
  /** The platform this machine must be; the kernel's provider is checked against it. */
  readonly platform: "sev-snp" | "tdx";
  /** Default /sys/kernel/config/tsm/report. */
  readonly root?: string;
  /** SEV-SNP VMPL to request the report from (written to `privlevel`); the kernel default when absent. */
  readonly privlevel?: number;
  readonly fs?: TsmFileSystem;
}

const errorCode = (e: unknown) => (typeof e === "object" && e !== null && "code" in e ? String(e.code) : "");

async function io<T>(what: string, op: () => Promise<T>): Promise<T> {
  try {
    return await op();
  } catch (e) {
    if (e instanceof CvmAttestationError) throw e;
    throw new CvmAttestationError("configfs_tsm_io", `${what}: ${errorCode(e) || (e as Error).message}`);
  }
}

export interface ConfigfsTsmSource extends EvidenceSource {
  readonly platform: "sev-snp" | "tdx";
}

/** Creates the source; nothing is touched until get(). */
export function createConfigfsTsmSource(options: ConfigfsTsmOptions): ConfigfsTsmSource {
  const root = options.root ?? CONFIGFS_TSM_ROOT;
  const fs = options.fs ?? nodeTsmFileSystem;
  const platform = options.platform;
  if (options.privlevel !== undefined && !(Number.isInteger(options.privlevel) && options.privlevel >= 0 && options.privlevel <= 3)) {
    throw new RangeError(`privlevel must be 0..3, got ${options.privlevel}`);
  }
  const text = (b: Uint8Array) => new TextDecoder().decode(b).trim();

  async function readGeneration(dir: string): Promise<number> {
    const raw = text(await io("read generation", () => fs.readFile(join(dir, "generation"))));
    const n = Number(raw);
    ensure(Number.isInteger(n) && n >= 0, "configfs_tsm_io", `generation is not a counter: ${JSON.stringify(raw)}`);
    return n;
  }

  async function readOptional(path: string): Promise<Uint8Array> {
    try {
      return await fs.readFile(path);
    } catch (e) {
      if (errorCode(e) === "ENOENT") return new Uint8Array(0);
      throw new CvmAttestationError("configfs_tsm_io", `read ${path}: ${errorCode(e) || (e as Error).message}`);
    }
  }

  async function request(dir: string, reportData: Uint8Array): Promise<CoordinatorEvidence> {
    const provider = text(await io("read provider", () => fs.readFile(join(dir, "provider"))));
    ensure(
      PROVIDERS[provider] === platform,
      "configfs_tsm_provider",
      `the kernel provider is ${JSON.stringify(provider)}, expected ${platform}`,
    );
    let writes = 0;
    if (options.privlevel !== undefined) {
      const level = String(options.privlevel);
      await io("write privlevel", () => fs.writeFile(join(dir, "privlevel"), level));
      writes++;
    }
    await io("write inblob", () => fs.writeFile(join(dir, "inblob"), reportData));
    writes++;
    const before = await readGeneration(dir);
    ensure(before === writes, "configfs_tsm_race", `generation is ${before} after our ${writes} writes`);
    const evidence = await io("read outblob", () => fs.readFile(join(dir, "outblob")));
    ensure(evidence.length > 0, "configfs_tsm_io", "outblob is empty");
    const aux = platform === "sev-snp" ? await readOptional(join(dir, "auxblob")) : new Uint8Array(0);
    const after = await readGeneration(dir);
    ensure(after === before, "configfs_tsm_race", `generation moved from ${before} to ${after} while reading`);
    return { platform, evidence, endorsements: platform === "sev-snp" ? endorsementsFromCertTable(aux) : [] };
  }

  return {
    platform,
    async get(reportData: Uint8Array): Promise<CoordinatorEvidence> {
      checkReportDataLength(reportData);
      const dir = join(root, `umbra-${Buffer.from(crypto.getRandomValues(new Uint8Array(12))).toString("hex")}`);
      try {
        await fs.mkdir(dir);
      } catch (e) {
        const code = errorCode(e);
        if (code === "ENOENT" || code === "ENOTDIR") {
          throw new CvmAttestationError("configfs_tsm_unavailable", `no configfs-tsm report directory at ${root}`);
        }
        throw new CvmAttestationError("configfs_tsm_io", `mkdir ${dir}: ${code || (e as Error).message}`);
      }
      try {
        return await request(dir, reportData.slice());
      } finally {
        await fs.rmdir(dir).catch(() => undefined);
      }
    },
  };
}
