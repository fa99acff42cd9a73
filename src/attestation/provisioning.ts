/**
 * Secrets provisioned after boot through the sealed, attested channel (src/crypto/provision-seal.ts has the
 * wire format; docs/operations.md "Provisioning" the operator's side).
 *
 * States: `off` (--provisioning off: secrets come from the configuration), `awaiting` (--provisioning await,
 * until one message opens), `provisioned` (for the rest of this process).
 *
 * Steps (coordinator):
 *   1. GET /v1/provision while awaiting: a fresh nonce (32 random bytes), single use, valid NONCE_TTL_MS; at
 *      most MAX_NONCES outstanding (the oldest is forgotten first).
 *   2. POST /v1/provision: 404 when off, 409 once provisioned; the envelope's shape (400); the nonce must be
 *      outstanding (400 `nonce`: unknown, used or expired; a message replayed to another boot fails here or
 *      at opening); open under this coordinator's own report (measurement, report data) and that nonce
 *      (400 when it does not open); the secrets' JSON (400 naming the field, never quoting a value).
 *   3. Then the nonce is used, every other nonce forgotten, the secrets held in memory only, and the state
 *      is `provisioned`: every route opens (src/api/http.ts gate), POST /v1/provision answers 409.
 *
 * Secrets (the plaintext JSON object; unknown names are refused):
 *   admin_token   required; the bearer of /admin/v1; at least 32 characters in production mode
 *   db_password, redis_password, nats_password   optional; the passwords of Postgres, Redis and NATS (the
 *                 coordinator opens its Postgres store only after provisioning, with them: `accept`)
 * `accept` (the serve command's) takes the secrets before they count: when it throws, its ApiError is the
 * answer and the coordinator stays awaiting (a wrong database password can be provisioned again).
 * Invariants: no secret is logged, written to disk or echoed in an answer; the log says only that
 * provisioning happened and which names it set.
 */
import { randomBytes } from "node:crypto";
import { toBase64url } from "../crypto/encoding.ts";
import { RequestOpenError } from "../crypto/errors.ts";
import { openProvisioning, PROVISION_NONCE_BYTES, readProvisionEnvelope } from "../crypto/provision-seal.ts";
import { Errors } from "../errors/api-error.ts";
import type { Logger } from "../observability/logger.ts";
import type { CoordinatorAttestation, Mode } from "./coordinator-attestation.ts";

export type ProvisioningState = "off" | "awaiting" | "provisioned";

/** How long an issued nonce may be used. */
const NONCE_TTL_MS = 10 * 60_000;
/** Nonces outstanding at once. */
const MAX_NONCES = 32;
/** Paths served while awaiting provisioning; everything else answers 503. */
const OPEN_WHILE_AWAITING: readonly string[] = ["/healthz", "/v1/attestation", "/v1/provision"];
const MAX_SECRET_CHARS = 4096;
const PRODUCTION_MIN_ADMIN_TOKEN = 32;

/** What a provisioning message may set. */
export interface ProvisionedSecrets {
  readonly adminToken: string;
  readonly dbPassword?: string;
  readonly redisPassword?: string;
  readonly natsPassword?: string;
}

const SECRET_NAMES = {
  admin_token: "adminToken",
  db_password: "dbPassword",
  redis_password: "redisPassword",
  nats_password: "natsPassword",
} as const;

export interface ProvisioningOptions {
  readonly mode: Mode;
  /** true for --provisioning await. */
  readonly awaiting: boolean;
  readonly attestation: CoordinatorAttestation;
  readonly logger: Logger;
  /** Unix milliseconds. */
  readonly now: () => number;
  /** Takes the secrets before the coordinator counts as provisioned; throws an ApiError to refuse them. */
  readonly accept?: (secrets: ProvisionedSecrets) => Promise<void>;
}

export class Provisioning {
  private current: ProvisioningState;
  /** base64url nonce -> expiry (unix ms), in issue order. */
  private readonly nonces = new Map<string, number>();
  private secrets: ProvisionedSecrets | undefined;
  /** A message is being accepted: another waits its turn (409). */
  private accepting = false;

  constructor(private readonly options: ProvisioningOptions) {
    this.current = options.awaiting ? "awaiting" : "off";
  }

  get state(): ProvisioningState {
    return this.current;
  }

  /** true when `path` is refused now (503): awaiting, and not one of OPEN_WHILE_AWAITING. */
  refuses(path: string): boolean {
    return this.current === "awaiting" && !OPEN_WHILE_AWAITING.includes(path);
  }

  /** The provisioned admin token (undefined before, and when off). */
  adminToken(): string | undefined {
    return this.secrets?.adminToken;
  }

  /** Step 1. Throws ApiError 404 when off, 409 once provisioned. */
  issueNonce(): { state: "awaiting"; nonce: string; expires_in_seconds: number } {
    this.refuseUnlessAwaiting();
    const now = this.options.now();
    for (const [nonce, expiry] of this.nonces) if (expiry <= now) this.nonces.delete(nonce);
    while (this.nonces.size >= MAX_NONCES) this.nonces.delete(this.nonces.keys().next().value as string);
    const nonce = toBase64url(randomBytes(PROVISION_NONCE_BYTES));
    this.nonces.set(nonce, now + NONCE_TTL_MS);
    return { state: "awaiting", nonce, expires_in_seconds: NONCE_TTL_MS / 1000 };
  }

  /** Steps 2 and 3. Throws ApiError (404, 409, 400, or 503 when this host cannot attest). */
  async provision(body: unknown): Promise<{ state: "provisioned"; secrets: string[] }> {
    this.refuseUnlessAwaiting();
    const envelope = readProvisionEnvelope(body);
    if (!envelope.ok) throw Errors.invalidValue(envelope.message, envelope.param);
    const expiry = this.nonces.get(envelope.nonceText);
    if (expiry === undefined || expiry <= this.options.now()) {
      throw Errors.invalidValue(
        "the nonce was not issued by this coordinator, was used, or expired: ask GET /v1/provision for a fresh one",
        "nonce",
      );
    }
    const own = await this.options.attestation.ownReport();
    const key = await this.options.attestation.sealingKey();
    let plaintext: Uint8Array;
    try {
      plaintext = await openProvisioning(key.privateKey, envelope.enc, envelope.ciphertext, {
        measurement: own.measurement,
        reportData: own.reportData,
        nonce: envelope.nonce,
      });
    } catch (e) {
      if (!(e instanceof RequestOpenError)) throw e;
      this.options.logger.warn("provisioning refused", { reason: "does not open" });
      throw Errors.invalidValue(
        "the provisioning message does not open for this coordinator (sealed for another boot or nonce, or altered)",
        "ciphertext",
      );
    }
    const secrets = this.readSecrets(plaintext);
    plaintext.fill(0);
    // Another message may have opened while this one was being opened.
    this.refuseUnlessAwaiting();
    if (this.accepting) throw Errors.conflict("another provisioning message is being accepted; ask again in a moment");
    this.nonces.delete(envelope.nonceText);
    const names = Object.entries(SECRET_NAMES)
      .filter(([, field]) => secrets[field] !== undefined)
      .map(([name]) => name);
    const unused = names.find((name) => name !== "admin_token");
    if (unused !== undefined && this.options.accept === undefined) {
      throw Errors.invalidValue(
        `'${unused}' is not used by this coordinator: only one on Postgres (cluster mode) awaiting provisioning opens its connections with provisioned passwords`,
        `secrets.${unused}`,
      );
    }
    this.accepting = true;
    try {
      await this.options.accept?.(secrets);
    } catch (e) {
      this.options.logger.warn("provisioning refused", { reason: "secrets not accepted", secrets: names.join(",") });
      throw e;
    } finally {
      this.accepting = false;
    }
    this.secrets = secrets;
    this.nonces.clear();
    this.current = "provisioned";
    this.options.logger.info("coordinator provisioned", { count: names.length, secrets: names.join(",") });
    return { state: "provisioned", secrets: names };
  }

  private refuseUnlessAwaiting(): void {
    if (this.current === "off") throw Errors.notFound("provisioning is off on this coordinator (--provisioning off)");
    if (this.current === "provisioned") throw Errors.conflict("this coordinator is already provisioned; restart it to provision again");
  }

  private readSecrets(plaintext: Uint8Array): ProvisionedSecrets {
    let value: unknown;
    try {
      value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(plaintext));
    } catch {
      throw Errors.invalidValue("the sealed secrets are not a JSON object", "secrets");
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      throw Errors.invalidValue("the sealed secrets are not a JSON object", "secrets");
    }
    const fields = value as Record<string, unknown>;
    const known = Object.keys(SECRET_NAMES);
    for (const name of Object.keys(fields)) {
      if (!known.includes(name)) throw Errors.invalidValue(`unknown secret '${name.slice(0, 64)}'; known: ${known.join(", ")}`, "secrets");
    }
    const text = (name: string): string | undefined => {
      const v = fields[name];
      if (v === undefined) return undefined;
      if (typeof v !== "string" || v.length === 0 || v.length > MAX_SECRET_CHARS) {
        throw Errors.invalidValue(`'${name}' must be a string of 1..${MAX_SECRET_CHARS} characters`, `secrets.${name}`);
      }
      return v;
    };
    const token = text("admin_token");
    if (token === undefined) throw Errors.invalidValue("the secret 'admin_token' is required", "secrets.admin_token");
    if (this.options.mode === "production" && token.length < PRODUCTION_MIN_ADMIN_TOKEN) {
      throw Errors.invalidValue(
        `production mode needs an admin token of at least ${PRODUCTION_MIN_ADMIN_TOKEN} characters`,
        "secrets.admin_token",
      );
    }
    const out: { -readonly [K in keyof ProvisionedSecrets]: ProvisionedSecrets[K] } = { adminToken: token };
    for (const [name, field] of Object.entries(SECRET_NAMES)) {
      const value = field === "adminToken" ? undefined : text(name);
      if (value !== undefined && field !== "adminToken") out[field] = value;
    }
    return out;
  }
}
