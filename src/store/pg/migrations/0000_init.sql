CREATE TABLE "accounts" (
	"id" text PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"jwt_subject" text,
	"created_at" bigint NOT NULL,
	CONSTRAINT "accounts_jwt_subject_unique" UNIQUE("jwt_subject")
);
--> statement-breakpoint
CREATE TABLE "api_keys" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"key_hash" text NOT NULL,
	"hint" text NOT NULL,
	"name" text,
	"allowed_models" jsonb,
	"spend_cap_micro_usd" bigint,
	"spent_micro_usd" bigint DEFAULT 0 NOT NULL,
	"rpm" bigint,
	"tpm" bigint,
	"self_route_only" boolean DEFAULT false NOT NULL,
	"link_machines" boolean DEFAULT false NOT NULL,
	"created_at" bigint NOT NULL,
	"revoked_at" bigint,
	CONSTRAINT "api_keys_key_hash_unique" UNIQUE("key_hash")
);
--> statement-breakpoint
CREATE TABLE "balances" (
	"account_id" text PRIMARY KEY NOT NULL,
	"balance_micro_usd" bigint DEFAULT 0 NOT NULL,
	"reserved_micro_usd" bigint DEFAULT 0 NOT NULL,
	"updated_at" bigint NOT NULL,
	CONSTRAINT "balance_not_negative" CHECK ("balances"."balance_micro_usd" >= 0),
	CONSTRAINT "reserved_not_negative" CHECK ("balances"."reserved_micro_usd" >= 0)
);
--> statement-breakpoint
CREATE TABLE "ledger_entries" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "ledger_entries_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"account_id" text NOT NULL,
	"kind" text NOT NULL,
	"amount_micro_usd" bigint NOT NULL,
	"balance_after_micro_usd" bigint NOT NULL,
	"request_id" text,
	"created_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "model_aliases" (
	"alias" text PRIMARY KEY NOT NULL,
	"build_id" text NOT NULL,
	"updated_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "model_builds" (
	"id" text PRIMARY KEY NOT NULL,
	"created" bigint NOT NULL,
	"owned_by" text NOT NULL,
	"model_type" text NOT NULL,
	"name" text,
	"display_name" text,
	"hugging_face_id" text,
	"description" text,
	"quantization" text,
	"deprecation_date" text,
	"input_modalities" jsonb,
	"output_modalities" jsonb,
	"supported_sampling_parameters" jsonb,
	"supported_features" jsonb,
	"context_length" bigint,
	"max_output_length" bigint,
	"updated_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "model_prices" (
	"model" text PRIMARY KEY NOT NULL,
	"input_price" bigint NOT NULL,
	"output_price" bigint NOT NULL,
	"cache_read_price" bigint,
	"updated_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "provider_tokens" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"token_hash" text NOT NULL,
	"hint" text NOT NULL,
	"created_at" bigint NOT NULL,
	"expires_at" bigint,
	"revoked_at" bigint,
	CONSTRAINT "provider_tokens_token_hash_unique" UNIQUE("token_hash")
);
--> statement-breakpoint
CREATE TABLE "store_meta" (
	"key" text PRIMARY KEY NOT NULL,
	"value" text NOT NULL
);
--> statement-breakpoint
CREATE TABLE "usage" (
	"request_id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"key_id" text,
	"model" text NOT NULL,
	"build_id" text NOT NULL,
	"provider_id" text,
	"prompt_tokens" bigint NOT NULL,
	"cached_tokens" bigint NOT NULL,
	"completion_tokens" bigint NOT NULL,
	"cost_micro_usd" bigint NOT NULL,
	"started_at" bigint NOT NULL,
	"first_content_ms" bigint,
	"duration_ms" bigint NOT NULL,
	"outcome" text NOT NULL
);
--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "api_keys_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "balances" ADD CONSTRAINT "balances_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "ledger_entries" ADD CONSTRAINT "ledger_entries_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "model_aliases" ADD CONSTRAINT "model_aliases_build_id_model_builds_id_fk" FOREIGN KEY ("build_id") REFERENCES "public"."model_builds"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "provider_tokens" ADD CONSTRAINT "provider_tokens_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "usage" ADD CONSTRAINT "usage_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "api_keys_account_idx" ON "api_keys" USING btree ("account_id");--> statement-breakpoint
CREATE INDEX "ledger_account_idx" ON "ledger_entries" USING btree ("account_id","id");--> statement-breakpoint
CREATE INDEX "provider_tokens_account_idx" ON "provider_tokens" USING btree ("account_id");--> statement-breakpoint
CREATE INDEX "usage_account_idx" ON "usage" USING btree ("account_id","started_at");