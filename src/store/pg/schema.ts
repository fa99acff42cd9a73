/**
 * Drizzle schema for the Postgres store: the same tables, columns and constraints as the SQLite schema
 * (src/store/schema.ts), table for table; test/unit/store/schema-parity.test.ts fails `tsc` when the
 * selected row types of a pair differ. Postgres alone has the money authority's parts (`holds`,
 * `api_keys.held`, the CHECKs that bound them), which that test names as such. drizzle-kit generates src/store/pg/migrations from this file
 * (drizzle.pg.config.ts); the generated SQL is committed and embedded in the binary.
 *
 * Every integer is a 64-bit `bigint` read as a JS number: micro-USD overflow int4 above $2,147 and Unix
 * milliseconds overflow it too. Flags are `boolean`, lists `jsonb`.
 */
import { sql } from "drizzle-orm";
import { bigint, boolean, check, index, jsonb, pgTable, text, timestamp, uniqueIndex } from "drizzle-orm/pg-core";

const int = (name: string) => bigint(name, { mode: "number" });

export const accounts = pgTable("accounts", {
  id: text("id").primaryKey(),
  name: text("name").notNull(),
  jwtSubject: text("jwt_subject").unique(),
  createdAt: int("created_at").notNull(),
});

export const balances = pgTable(
  "balances",
  {
    accountId: text("account_id")
      .primaryKey()
      .references(() => accounts.id),
    balance: int("balance_micro_usd").notNull().default(0),
    reserved: int("reserved_micro_usd").notNull().default(0),
    updatedAt: int("updated_at").notNull(),
  },
  (t) => [
    check("balance_not_negative", sql`${t.balance} >= 0`),
    check("reserved_not_negative", sql`${t.reserved} >= 0`),
    // Postgres only: the money authority (money-authority.ts) holds here; SQLite holds in memory.
    check("reserved_within_balance", sql`${t.reserved} <= ${t.balance}`),
  ],
);

/** Append-only; `amount` is signed (credits, earnings and fees positive, charges negative). */
export const ledgerEntries = pgTable(
  "ledger_entries",
  {
    id: int("id").primaryKey().generatedAlwaysAsIdentity(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    kind: text("kind", { enum: ["credit", "charge", "earning", "fee"] }).notNull(),
    amount: int("amount_micro_usd").notNull(),
    balanceAfter: int("balance_after_micro_usd").notNull(),
    requestId: text("request_id"),
    createdAt: int("created_at").notNull(),
  },
  (t) => [index("ledger_account_idx").on(t.accountId, t.id)],
);

export const apiKeys = pgTable(
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
    allowedModels: jsonb("allowed_models").$type<string[]>(),
    spendCap: int("spend_cap_micro_usd"),
    spent: int("spent_micro_usd").notNull().default(0),
    rpm: int("rpm"),
    tpm: int("tpm"),
    selfRouteOnly: boolean("self_route_only").notNull().default(false),
    linkMachines: boolean("link_machines").notNull().default(false),
    createdAt: int("created_at").notNull(),
    revokedAt: int("revoked_at"),
    /** Postgres only (the parity test lists it): the sum of this key's open holds. */
    held: int("held_micro_usd").notNull().default(0),
  },
  (t) => [
    index("api_keys_account_idx").on(t.accountId),
    check("held_not_negative", sql`${t.held} >= 0`),
    check("spend_cap_covers_held", sql`${t.spendCap} IS NULL OR ${t.spent} + ${t.held} <= ${t.spendCap}`),
  ],
);

export const providerTokens = pgTable(
  "provider_tokens",
  {
    id: text("id").primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    tokenHash: text("token_hash").notNull().unique(),
    hint: text("hint").notNull(),
    name: text("name"),
    createdAt: int("created_at").notNull(),
    expiresAt: int("expires_at"),
    revokedAt: int("revoked_at"),
  },
  (t) => [index("provider_tokens_account_idx").on(t.accountId)],
);

export const modelBuilds = pgTable("model_builds", {
  id: text("id").primaryKey(),
  created: int("created").notNull(),
  ownedBy: text("owned_by").notNull(),
  modelType: text("model_type").notNull(),
  name: text("name"),
  displayName: text("display_name"),
  huggingFaceId: text("hugging_face_id"),
  description: text("description"),
  quantization: text("quantization"),
  deprecationDate: text("deprecation_date"),
  inputModalities: jsonb("input_modalities").$type<string[]>(),
  outputModalities: jsonb("output_modalities").$type<string[]>(),
  supportedSamplingParameters: jsonb("supported_sampling_parameters").$type<string[]>(),
  supportedFeatures: jsonb("supported_features").$type<string[]>(),
  contextLength: int("context_length"),
  maxOutputLength: int("max_output_length"),
  updatedAt: int("updated_at").notNull(),
});

export const modelAliases = pgTable("model_aliases", {
  alias: text("alias").primaryKey(),
  buildId: text("build_id")
    .notNull()
    .references(() => modelBuilds.id),
  updatedAt: int("updated_at").notNull(),
});

export const modelPrices = pgTable("model_prices", {
  model: text("model").primaryKey(),
  inputPrice: int("input_price").notNull(),
  outputPrice: int("output_price").notNull(),
  cacheReadPrice: int("cache_read_price"),
  updatedAt: int("updated_at").notNull(),
});

/** One row per chat request outcome: ids, counts, money and timings. Never content. */
export const usage = pgTable(
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
    promptTokens: int("prompt_tokens").notNull(),
    cachedTokens: int("cached_tokens").notNull(),
    completionTokens: int("completion_tokens").notNull(),
    cost: int("cost_micro_usd").notNull(),
    startedAt: int("started_at").notNull(),
    firstContentMs: int("first_content_ms"),
    durationMs: int("duration_ms").notNull(),
    outcome: text("outcome").notNull(),
  },
  (t) => [index("usage_account_idx").on(t.accountId, t.startedAt)],
);

/** Small key/value table; also the target of the start-up write probe. */
export const storeMeta = pgTable("store_meta", {
  key: text("key").primaryKey(),
  value: text("value").notNull(),
});

/**
 * Console sessions (src/console/sessions.ts): the row is keyed by the SHA-256 (hex) of the session id,
 * never the id. `expires_at` is the absolute end; `idle_expires_at` moves forward on use.
 */
export const consoleSessions = pgTable(
  "console_sessions",
  {
    idHash: text("id_hash").primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    createdAt: int("created_at").notNull(),
    expiresAt: int("expires_at").notNull(),
    idleExpiresAt: int("idle_expires_at").notNull(),
  },
  (t) => [index("console_sessions_account_idx").on(t.accountId)],
);

/** Single-use console sign-in links: the SHA-256 (hex) of the token only; `used_at` set once. */
export const signInLinks = pgTable(
  "sign_in_links",
  {
    tokenHash: text("token_hash").primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    createdAt: int("created_at").notNull(),
    expiresAt: int("expires_at").notNull(),
    usedAt: int("used_at"),
  },
  (t) => [index("sign_in_links_account_idx").on(t.accountId)],
);

/**
 * Postgres only: one open reservation per request (the money authority, money-authority.ts). Its amount
 * is counted in the account's `reserved` and the key's `held`; `expires_at` is on the database clock, and
 * the sweeper releases what its replica stopped renewing.
 */
export const holds = pgTable(
  "holds",
  {
    requestId: text("request_id").primaryKey(),
    accountId: text("account_id")
      .notNull()
      .references(() => accounts.id),
    keyId: text("key_id").references(() => apiKeys.id),
    amount: int("amount_micro_usd").notNull(),
    ownerReplica: text("owner_replica").notNull(),
    expiresAt: timestamp("expires_at", { withTimezone: true }).notNull(),
  },
  (t) => [
    index("holds_expires_idx").on(t.expiresAt),
    index("holds_owner_idx").on(t.ownerReplica),
    // A balance lease's row (money-leases.ts) may reach 0 while requests drawn on it still run.
    check("hold_positive", sql`${t.amount} > 0 OR (${t.requestId} LIKE 'lease:%' AND ${t.amount} = 0)`),
  ],
);

/**
 * MDM enrolments (issue 23; src/store/mdm-types.ts): the enrolment token as SHA-256 (hex) only. Partial
 * unique indexes keep one live enrolment per identity key and one enrolled enrolment per serial.
 */
export const mdmEnrolments = pgTable(
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
    createdAt: int("created_at").notNull(),
    tokenExpiresAt: int("token_expires_at").notNull(),
    nanomdmId: text("nanomdm_id"),
    serial: text("serial"),
    state: text("state", { enum: ["issued", "enrolled", "checked_out"] }).notNull(),
    updatedAt: int("updated_at").notNull(),
  },
  (t) => [
    index("mdm_enrolments_account_idx").on(t.accountId),
    uniqueIndex("mdm_enrolments_live_key_idx").on(t.identityKey).where(sql`state <> 'checked_out'`),
    uniqueIndex("mdm_enrolments_enrolled_serial_idx").on(t.serial).where(sql`state = 'enrolled'`),
    index("mdm_enrolments_nanomdm_idx").on(t.nanomdmId),
  ],
);

/** The outstanding DeviceInformation command per enrolment (at most one: the key). */
export const mdmCommands = pgTable("mdm_commands", {
  enrolmentId: text("enrolment_id")
    .primaryKey()
    .references(() => mdmEnrolments.id),
  commandUuid: text("command_uuid").notNull().unique(),
  epoch: int("epoch").notNull(),
  issuedAt: int("issued_at").notNull(),
  expiresAt: int("expires_at").notNull(),
});

/** The last verified attestation chain per enrolment: public data (DER certificates, base64, leaf first). */
export const mdmChains = pgTable("mdm_chains", {
  enrolmentId: text("enrolment_id")
    .primaryKey()
    .references(() => mdmEnrolments.id),
  certificates: jsonb("certificates").$type<string[]>().notNull(),
  chainSha256: text("chain_sha256").notNull(),
  serial: text("serial").notNull(),
  udid: text("udid").notNull(),
  osVersion: text("os_version").notNull(),
  leafNotBefore: int("leaf_not_before").notNull(),
  epoch: int("epoch").notNull(),
  verifiedAt: int("verified_at").notNull(),
});
