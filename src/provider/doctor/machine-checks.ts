/**
 * The checks of this machine: platform, macOS, SIP, Secure Boot, Secure Enclave (the posture a trust level
 * needs proven) and memory and disk for the models (a machine that cannot hold the weights cannot serve
 * them). Each reads the machine through the probe only.
 */
import type { ModelMapping } from "../config.ts";
import { estimateModelSize, formatGiB } from "../model-size.ts";
import { defineCheck, outcome } from "./check.ts";
import { messageOf, within } from "./probe.ts";

const GIB = 2 ** 30;
const MIN_MACOS = 14;
const DEV_HINT =
  "In development: `umbra-provider start --engine echo --dev-attestation on` against `umbra-coordinator dev` works on any machine (check it with `umbra-provider doctor --trust none --engine echo ...`).";
const notMac = outcome("skip", "not macOS");

/** darwin/arm64 passes; darwin/x64 fails (Intel, or Rosetta: `sysctl.proc_translated` = 1); else not eligible. */
export const platform = defineCheck({
  id: "platform",
  title: "Apple Silicon",
  needs: { hardware: "pass", self_signed: "pass" },
  async run({ probe, timeouts }) {
    if (probe.platform === "darwin" && probe.arch === "arm64") return outcome("pass", probe.cpuModel() ?? "Apple Silicon (arm64)");
    if (probe.platform === "darwin" && probe.arch === "x64") {
      const translated = await probe.run(["/usr/sbin/sysctl", "-n", "sysctl.proc_translated"], timeouts.commandMs);
      if (translated.exitCode === 0 && translated.stdout.trim() === "1") {
        return outcome(
          "fail",
          "running under Rosetta: an x64 build on an Apple Silicon Mac cannot attest this machine",
          "install and run the arm64 build of umbra-provider",
        );
      }
      return outcome(
        "fail",
        "Intel Mac: not eligible for production: Managed Device Attestation is issued only to Macs with Apple silicon",
        DEV_HINT,
      );
    }
    return outcome(
      "fail",
      `${probe.platform} ${probe.arch} (${probe.osRelease()}): not eligible for production: Umbra providers need an Apple Silicon Mac (Secure Enclave, Managed Device Attestation)`,
      DEV_HINT,
    );
  },
});

/** `sw_vers -productVersion` >= 14: Managed Device Attestation needs it (self_signed has no MDA). */
export const macos = defineCheck({
  id: "macos",
  title: "macOS version",
  needs: { hardware: "pass" },
  async run({ probe, timeouts }) {
    if (probe.platform !== "darwin") return notMac;
    const out = await probe.run(["/usr/bin/sw_vers", "-productVersion"], timeouts.commandMs);
    const version = out.stdout.trim();
    if (out.exitCode !== 0 || !/^\d+(\.\d+){0,2}$/.test(version)) {
      return outcome("warn", `could not read the macOS version (${out.error ?? `sw_vers exit ${out.exitCode}`})`, "run sw_vers");
    }
    if (Number(version.split(".")[0]) >= MIN_MACOS) return outcome("pass", version);
    return outcome(
      "fail",
      `${version}: Managed Device Attestation needs macOS ${MIN_MACOS} or later`,
      `update to macOS ${MIN_MACOS} Sonoma or later (System Settings > General > Software Update)`,
    );
  },
});

/** `csrutil status`: "enabled." passes; disabled or a custom configuration fails. */
export const sip = defineCheck({
  id: "sip",
  title: "SIP",
  needs: { hardware: "pass", self_signed: "pass" },
  async run({ probe, timeouts }) {
    if (probe.platform !== "darwin") return notMac;
    const out = await probe.run(["/usr/bin/csrutil", "status"], timeouts.commandMs);
    const line = /System Integrity Protection status:\s*([^\n]*)/.exec(out.stdout)?.[1]?.trim();
    const fix = "restart into Recovery (hold the power button), open Terminal, run `csrutil enable`, then restart";
    if (line === undefined)
      return outcome("warn", `could not read csrutil status (${out.error ?? `exit ${out.exitCode}`})`, "run csrutil status");
    if (/^enabled\.?$/.test(line)) return outcome("pass", "enabled");
    if (/custom configuration/i.test(line)) return outcome("fail", "custom configuration: some protections are off", fix);
    if (/^disabled/.test(line)) return outcome("fail", "disabled", fix);
    return outcome("warn", `unrecognised csrutil status '${line.slice(0, 80)}'`, "run csrutil status");
  },
});

const LOWER_SECURITY = new Set(["Reduced Security", "Permissive Security", "Medium Security", "No Security"]);

/**
 * `ibridge_secure_boot` of `system_profiler -json SPiBridgeDataType` (readable without root on Apple
 * Silicon): exactly "Full Security" passes, a known lower level fails; missing, unreadable or localised
 * readings warn (self_signed accepts that, hardware does not: doctor promises no more than it saw).
 */
export const secureBoot = defineCheck({
  id: "secure_boot",
  title: "Secure Boot",
  needs: { hardware: "pass", self_signed: "ok" },
  async run({ probe, timeouts }) {
    if (probe.platform !== "darwin") return notMac;
    const out = await probe.run(["/usr/sbin/system_profiler", "-json", "SPiBridgeDataType"], timeouts.profilerMs);
    let level: unknown;
    try {
      level = (JSON.parse(out.stdout) as { SPiBridgeDataType?: { ibridge_secure_boot?: unknown }[] }).SPiBridgeDataType?.[0]
        ?.ibridge_secure_boot;
    } catch {
      level = undefined;
    }
    if (level === "Full Security") return outcome("pass", "Full Security");
    if (typeof level === "string" && LOWER_SECURITY.has(level)) {
      return outcome(
        "fail",
        level,
        "restart into Recovery, open Startup Security Utility and choose Full Security (no third-party kernel extensions)",
      );
    }
    const seen = typeof level === "string" ? `unrecognised reading '${level.slice(0, 80)}'` : "not readable without administrator rights";
    return outcome(
      "warn",
      `${seen}: hardware trust needs a positive Full Security reading`,
      "check with `sudo bputil -d` (look for Full Security) or System Information > Hardware > Controller",
    );
  },
});

/** The identity helper names a P-256 key and signs a probe that verifies; no helper warns (a software key). */
export const secureEnclave = defineCheck({
  id: "secure_enclave",
  title: "Secure Enclave",
  needs: { hardware: "pass", self_signed: "ok" },
  async run({ probe, timeouts, identityHelper }) {
    if (probe.platform !== "darwin") return notMac;
    const readme = "see src/provider/secure-enclave/README.md";
    if (identityHelper === undefined) {
      return outcome(
        "warn",
        "no identity helper: the identity key would be a software key (trust level self_signed at most)",
        `hardware trust needs the Secure Enclave helper: ${readme}, then pass --identity-helper PATH`,
      );
    }
    const starting = probe.identityHelper(identityHelper, timeouts.helperMs);
    try {
      const identity = await within(timeouts.helperMs + 1_000, () => starting);
      identity.close();
      const keyId = new Bun.CryptoHasher("sha256").update(identity.publicKey).digest("hex").slice(0, 16);
      return outcome("pass", `${identityHelper} holds a P-256 key that signs (key id ${keyId}...)`);
    } catch (error) {
      void starting.then((identity) => identity.close()).catch(() => {});
      return outcome("fail", `${identityHelper}: ${messageOf(error)}`, `build and check the helper: ${readme}`);
    }
  },
});

/** The estimated weights of the models (upstream name first: it is what the engine loads). */
function weightsOf(models: readonly ModelMapping[]) {
  let bytes = 0;
  const unknown: string[] = [];
  for (const m of models) {
    const size = estimateModelSize(m.upstreamName) ?? estimateModelSize(m.buildId);
    if (size) bytes += size.bytes;
    else unknown.push(m.buildId);
  }
  return { bytes, unknown };
}

/** The echo engine answers from the prompt alone: it loads no weights. */
const NO_WEIGHTS = "weights: none needed (echo engine)";

/** RAM >= weights x 1.2 + 4 GiB passes, within 10% below warns, else fails (sizes: model-size.ts). */
export const memory = defineCheck({
  id: "memory",
  title: "Memory",
  needs: { hardware: "ok", self_signed: "ok" },
  run({ probe, models, engine }) {
    if (engine === "echo") return outcome("pass", `${formatGiB(probe.totalMemory())} RAM; ${NO_WEIGHTS}`);
    if (models.length === 0) return outcome("skip", "no --model given", "name the models to serve: --model BUILD[=UPSTREAM_NAME]");
    const { bytes, unknown } = weightsOf(models);
    const total = probe.totalMemory();
    const need = bytes * 1.2 + 4 * GIB;
    const against =
      bytes > 0
        ? `${formatGiB(total)} RAM; the models need about ${formatGiB(need)} (weights ${formatGiB(bytes)} x 1.2 + 4 GiB for the system)`
        : `${formatGiB(total)} RAM`;
    const fix = "serve fewer or more quantized models, or use a Mac with more memory";
    if (total < need * 0.9) return outcome("fail", against, fix);
    if (total < need) return outcome("warn", `${against}: within 10%, expect memory pressure`, fix);
    if (unknown.length > 0)
      return outcome("warn", `size unknown for ${unknown.join(", ")}; ${against}`, "make sure the weights fit in memory");
    return outcome("pass", against);
  },
});

/** Free space of --models-dir or the provider home: < 2 GiB fails; less than the weights warns (downloaded?). */
export const disk = defineCheck({
  id: "disk",
  title: "Disk",
  needs: { hardware: "ok", self_signed: "ok" },
  run({ probe, models, modelsDir, home, engine }) {
    const path = modelsDir ?? home.dir;
    const free = probe.freeDisk(path);
    if (free === undefined) return outcome("warn", `could not read the free space of ${path}`, "check with df -h");
    const where = `${formatGiB(free)} free in ${path}`;
    if (free < 2 * GIB) return outcome("fail", `${where}: less than 2 GiB`, "free some space on that volume");
    if (engine === "echo") return outcome("pass", `${where}; ${NO_WEIGHTS}`);
    if (models.length === 0) return outcome("pass", where);
    const { bytes, unknown } = weightsOf(models);
    if (free < bytes) {
      return outcome(
        "warn",
        `${where}; the weights take about ${formatGiB(bytes)} (fine if they are already downloaded)`,
        "free space before downloading the weights",
      );
    }
    if (unknown.length > 0) return outcome("warn", `${where}; size unknown for ${unknown.join(", ")}`, "make sure the weights fit");
    return outcome("pass", `${where}; the weights take about ${formatGiB(bytes)}`);
  },
});
