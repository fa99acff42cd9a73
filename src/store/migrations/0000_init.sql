CREATE TABLE `accounts` (
	`id` text PRIMARY KEY NOT NULL,
	`name` text NOT NULL,
	`jwt_subject` text,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `accounts_jwt_subject_unique` ON `accounts` (`jwt_subject`);--> statement-breakpoint
CREATE TABLE `api_keys` (
	`id` text PRIMARY KEY NOT NULL,
	`account_id` text NOT NULL,
	`key_hash` text NOT NULL,
	`hint` text NOT NULL,
	`name` text,
	`allowed_models` text,
	`spend_cap_micro_usd` integer,
	`spent_micro_usd` integer DEFAULT 0 NOT NULL,
	`rpm` integer,
	`tpm` integer,
	`self_route_only` integer DEFAULT false NOT NULL,
	`created_at` integer NOT NULL,
	`revoked_at` integer,
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `api_keys_key_hash_unique` ON `api_keys` (`key_hash`);--> statement-breakpoint
CREATE INDEX `api_keys_account_idx` ON `api_keys` (`account_id`);--> statement-breakpoint
CREATE TABLE `balances` (
	`account_id` text PRIMARY KEY NOT NULL,
	`balance_micro_usd` integer DEFAULT 0 NOT NULL,
	`reserved_micro_usd` integer DEFAULT 0 NOT NULL,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE no action,
	CONSTRAINT "balance_not_negative" CHECK("balances"."balance_micro_usd" >= 0),
	CONSTRAINT "reserved_not_negative" CHECK("balances"."reserved_micro_usd" >= 0)
);
--> statement-breakpoint
CREATE TABLE `ledger_entries` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`account_id` text NOT NULL,
	`kind` text NOT NULL,
	`amount_micro_usd` integer NOT NULL,
	`balance_after_micro_usd` integer NOT NULL,
	`request_id` text,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE INDEX `ledger_account_idx` ON `ledger_entries` (`account_id`,`id`);--> statement-breakpoint
CREATE UNIQUE INDEX `ledger_request_kind_idx` ON `ledger_entries` (`request_id`,`kind`,`account_id`);--> statement-breakpoint
CREATE TABLE `model_aliases` (
	`alias` text PRIMARY KEY NOT NULL,
	`build_id` text NOT NULL,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`build_id`) REFERENCES `model_builds`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE TABLE `model_builds` (
	`id` text PRIMARY KEY NOT NULL,
	`created` integer NOT NULL,
	`owned_by` text NOT NULL,
	`model_type` text NOT NULL,
	`name` text,
	`display_name` text,
	`hugging_face_id` text,
	`description` text,
	`quantization` text,
	`deprecation_date` text,
	`input_modalities` text,
	`output_modalities` text,
	`supported_sampling_parameters` text,
	`supported_features` text,
	`context_length` integer,
	`max_output_length` integer,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `model_prices` (
	`model` text PRIMARY KEY NOT NULL,
	`input_price` integer NOT NULL,
	`output_price` integer NOT NULL,
	`cache_read_price` integer,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `provider_tokens` (
	`id` text PRIMARY KEY NOT NULL,
	`account_id` text NOT NULL,
	`token_hash` text NOT NULL,
	`hint` text NOT NULL,
	`created_at` integer NOT NULL,
	`revoked_at` integer,
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `provider_tokens_token_hash_unique` ON `provider_tokens` (`token_hash`);--> statement-breakpoint
CREATE INDEX `provider_tokens_account_idx` ON `provider_tokens` (`account_id`);--> statement-breakpoint
CREATE TABLE `store_meta` (
	`key` text PRIMARY KEY NOT NULL,
	`value` text NOT NULL
);
--> statement-breakpoint
CREATE TABLE `usage` (
	`request_id` text PRIMARY KEY NOT NULL,
	`account_id` text NOT NULL,
	`key_id` text,
	`model` text NOT NULL,
	`build_id` text NOT NULL,
	`provider_id` text,
	`prompt_tokens` integer NOT NULL,
	`cached_tokens` integer NOT NULL,
	`completion_tokens` integer NOT NULL,
	`cost_micro_usd` integer NOT NULL,
	`started_at` integer NOT NULL,
	`first_content_ms` integer,
	`duration_ms` integer NOT NULL,
	`outcome` text NOT NULL,
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE INDEX `usage_account_idx` ON `usage` (`account_id`,`started_at`);