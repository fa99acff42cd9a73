/**
 * Drizzle schema for the SQLite store. drizzle-kit generates src/store/migrations from this file
 * (`make migrations`); the generated SQL is committed and embedded in the binary.
 *
 * Units: money in integer micro-USD, prices in micro-USD per million tokens, times in Unix milliseconds.
 * No table holds prompt or completion content; api_keys, provider_tokens, console_sessions and
 * sign_in_links hold SHA-256 digests of their secrets only.
 */
import { sql } from "drizzle-orm";
import { check, index, integer, sqliteTable, text, uniqueIndex } from "drizzle-orm/sqlite-core";

export const accounts = sqliteTable("accounts", {
  id: text("id").primaryKey(),
  name: text("name").notNull(),
  jwtSubject: text("jwt_subject").unique(),
  createdAt: integer("created_at").notNull(),
});

export const balances = sqliteTable(
  "balances",
  {
    accountId: text("account_id")
      .primaryKey()
      .references(() => accounts.id),
    balance: integer("balance_micro_usd").notNull().default(0),
    reserved: integer("reserved_micro_usd").notNull().default(0),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [check("balance_not_negative", sql`${t.balance} >= 0`), check("reserved_not_negative", sql`${t.reserved} >= 0`)],
);

/**
 * Append-only. `amount` is signed: credits, earnings and fees positive, charges negative. Ids are the
 * rowid without AUTOINCREMENT: rows are never deleted, so each new id is still the largest yet, and no
 * `sqlite_sequence` page is written by every settlement commit (bench/HISTORY.md).
 */
export const ledgerEntries = sqliteTable(
  "ledger_entries",
  {
    id: integer("id").primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    kind: text("kind", { enum: ["credit", "charge", "earning", "fee"] }).notNull(),
    amount: integer("amount_micro_usd").notNull(),
    balanceAfter: integer("balance_after_micro_usd").notNull(),
    requestId: text("request_id"),
    createdAt: integer("created_at").notNull(),
  },
  // No unique index on request ids: settlement is idempotent through the usage row (its primary key),
  // and every ledger index costs a b-tree update per row on the settlement path.
  (t) => [index("ledger_account_idx").on(t.accountId, t.id)],
);

export const apiKeys = sqliteTable(
  "api_keys",
  {
    id: text("id").primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    keyHash: text("key_hash").notNull().unique(),
    hint: text("hint").notNull(),
    name: text("name"),
    /** JSON array of model ids, or null for every model. */
    allowedModels: text("allowed_models", { mode: "json" }).$type<string[]>(),
    spendCap: integer("spend_cap_micro_usd"),
    spent: integer("spent_micro_usd").notNull().default(0),
    rpm: integer("rpm"),
    tpm: integer("tpm"),
    selfRouteOnly: integer("self_route_only", { mode: "boolean" }).notNull().default(false),
    /** May approve provider device logins (link machines to the account); off unless asked for. */
    linkMachines: integer("link_machines", { mode: "boolean" }).notNull().default(false),
    createdAt: integer("created_at").notNull(),
    revokedAt: integer("revoked_at"),
  },
  (t) => [index("api_keys_account_idx").on(t.accountId)],
);

export const providerTokens = sqliteTable(
  "provider_tokens",
  {
    id: text("id").primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    tokenHash: text("token_hash").notNull().unique(),
    hint: text("hint").notNull(),
    /** The machine name the holder approved at device login (or gave the admin API); null: none. */
    name: text("name"),
    createdAt: integer("created_at").notNull(),
    /** Refused from this time on; null: never expires. */
    expiresAt: integer("expires_at"),
    revokedAt: integer("revoked_at"),
  },
  (t) => [index("provider_tokens_account_idx").on(t.accountId)],
);

export const modelBuilds = sqliteTable("model_builds", {
  id: text("id").primaryKey(),
  created: integer("created").notNull(),
  ownedBy: text("owned_by").notNull(),
  modelType: text("model_type").notNull(),
  name: text("name"),
  displayName: text("display_name"),
  huggingFaceId: text("hugging_face_id"),
  description: text("description"),
  quantization: text("quantization"),
  deprecationDate: text("deprecation_date"),
  inputModalities: text("input_modalities", { mode: "json" }).$type<string[]>(),
  outputModalities: text("output_modalities", { mode: "json" }).$type<string[]>(),
  supportedSamplingParameters: text("supported_sampling_parameters", { mode: "json" }).$type<string[]>(),
  supportedFeatures: text("supported_features", { mode: "json" }).$type<string[]>(),
  contextLength: integer("context_length"),
  maxOutputLength: integer("max_output_length"),
  updatedAt: integer("updated_at").notNull(),
});

export const modelAliases = sqliteTable("model_aliases", {
  alias: text("alias").primaryKey(),
  buildId: text("build_id")
    .notNull()
    .references(() => modelBuilds.id),
  updatedAt: integer("updated_at").notNull(),
});

export const modelPrices = sqliteTable("model_prices", {
  model: text("model").primaryKey(),
  inputPrice: integer("input_price").notNull(),
  outputPrice: integer("output_price").notNull(),
  cacheReadPrice: integer("cache_read_price"),
  updatedAt: integer("updated_at").notNull(),
});

/** One row per chat request outcome: ids, counts, money and timings. Never content. */
export const usage = sqliteTable(
  "usage",
  {
    requestId: text("request_id").primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    keyId: text("key_id"),
    model: text("model").notNull(),
    buildId: text("build_id").notNull(),
    providerId: text("provider_id"),
    promptTokens: integer("prompt_tokens").notNull(),
    cachedTokens: integer("cached_tokens").notNull(),
    completionTokens: integer("completion_tokens").notNull(),
    cost: integer("cost_micro_usd").notNull(),
    startedAt: integer("started_at").notNull(),
    firstContentMs: integer("first_content_ms"),
    durationMs: integer("duration_ms").notNull(),
    outcome: text("outcome").notNull(),
  },
  (t) => [index("usage_account_idx").on(t.accountId, t.startedAt)],
);

/** Small key/value table; also the target of the start-up write probe. */
export const storeMeta = sqliteTable("store_meta", {
  key: text("key").primaryKey(),
  value: text("value").notNull(),
});

/**
 * Console sessions (src/console/sessions.ts): the row is keyed by the SHA-256 (hex) of the session id,
 * never the id. `expires_at` is the absolute end; `idle_expires_at` moves forward on use.
 */
export const consoleSessions = sqliteTable(
  "console_sessions",
  {
    idHash: text("id_hash").primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    createdAt: integer("created_at").notNull(),
    expiresAt: integer("expires_at").notNull(),
    idleExpiresAt: integer("idle_expires_at").notNull(),
  },
  (t) => [index("console_sessions_account_idx").on(t.accountId)],
);

/** Single-use console sign-in links: the SHA-256 (hex) of the token only; `used_at` set once. */
export const signInLinks = sqliteTable(
  "sign_in_links",
  {
    tokenHash: text("token_hash").primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    createdAt: integer("created_at").notNull(),
    expiresAt: integer("expires_at").notNull(),
    usedAt: integer("used_at"),
  },
  (t) => [index("sign_in_links_account_idx").on(t.accountId)],
);

/**
 * MDM enrolments (issue 23; src/store/mdm-types.ts): the enrolment token as SHA-256 (hex) only. Partial
 * unique indexes keep one live enrolment per identity key and one enrolled enrolment per serial.
 */
export const mdmEnrolments = sqliteTable(
  "mdm_enrolments",
  {
    id: text("id").primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    providerTokenId: text("provider_token_id")
      .notNull()
      .references(() => providerTokens.id),
    identityKey: text("identity_key").notNull(),
    tokenHash: text("token_hash").notNull().unique(),
    createdAt: integer("created_at").notNull(),
    tokenExpiresAt: integer("token_expires_at").notNull(),
    nanomdmId: text("nanomdm_id"),
    serial: text("serial"),
    state: text("state", { enum: ["issued", "enrolled", "checked_out"] }).notNull(),
    updatedAt: integer("updated_at").notNull(),
  },
  (t) => [
    index("mdm_enrolments_account_idx").on(t.accountId),
    uniqueIndex("mdm_enrolments_live_key_idx").on(t.identityKey).where(sql`state <> 'checked_out'`),
    uniqueIndex("mdm_enrolments_enrolled_serial_idx").on(t.serial).where(sql`state = 'enrolled'`),
    index("mdm_enrolments_nanomdm_idx").on(t.nanomdmId),
  ],
);

/** The outstanding DeviceInformation command per enrolment (at most one: the key). */
export const mdmCommands = sqliteTable("mdm_commands", {
  enrolmentId: text("enrolment_id")
    .primaryKey()
    .references(() => mdmEnrolments.id),
  commandUuid: text("command_uuid").notNull().unique(),
  epoch: integer("epoch").notNull(),
  issuedAt: integer("issued_at").notNull(),
  expiresAt: integer("expires_at").notNull(),
});

/** The last verified attestation chain per enrolment: public data (DER certificates, base64, leaf first). */
export const mdmChains = sqliteTable("mdm_chains", {
  enrolmentId: text("enrolment_id")
    .primaryKey()
    .references(() => mdmEnrolments.id),
  certificates: text("certificates", { mode: "json" }).$type<string[]>().notNull(),
  chainSha256: text("chain_sha256").notNull(),
  serial: text("serial").notNull(),
  udid: text("udid").notNull(),
  osVersion: text("os_version").notNull(),
  leafNotBefore: integer("leaf_not_before").notNull(),
  epoch: integer("epoch").notNull(),
  verifiedAt: integer("verified_at").notNull(),
});
