CREATE TABLE `mdm_chains` (
	`enrolment_id` text PRIMARY KEY NOT NULL,
	`certificates` text NOT NULL,
	`chain_sha256` text NOT NULL,
	`serial` text NOT NULL,
	`udid` text NOT NULL,
	`os_version` text NOT NULL,
	`leaf_not_before` integer NOT NULL,
	`epoch` integer NOT NULL,
	`verified_at` integer NOT NULL,
	FOREIGN KEY (`enrolment_id`) REFERENCES `mdm_enrolments`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE TABLE `mdm_commands` (
	`enrolment_id` text PRIMARY KEY NOT NULL,
	`command_uuid` text NOT NULL,
	`epoch` integer NOT NULL,
	`issued_at` integer NOT NULL,
	`expires_at` integer NOT NULL,
	FOREIGN KEY (`enrolment_id`) REFERENCES `mdm_enrolments`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `mdm_commands_command_uuid_unique` ON `mdm_commands` (`command_uuid`);--> statement-breakpoint
CREATE TABLE `mdm_enrolments` (
	`id` text PRIMARY KEY NOT NULL,
	`account_id` text NOT NULL,
	`provider_token_id` text NOT NULL,
	`identity_key` text NOT NULL,
	`token_hash` text NOT NULL,
	`created_at` integer NOT NULL,
	`token_expires_at` integer NOT NULL,
	`nanomdm_id` text,
	`serial` text,
	`state` text NOT NULL,
	`updated_at` integer NOT NULL,
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE no action,
	FOREIGN KEY (`provider_token_id`) REFERENCES `provider_tokens`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
CREATE UNIQUE INDEX `mdm_enrolments_token_hash_unique` ON `mdm_enrolments` (`token_hash`);--> statement-breakpoint
CREATE INDEX `mdm_enrolments_account_idx` ON `mdm_enrolments` (`account_id`);--> statement-breakpoint
CREATE UNIQUE INDEX `mdm_enrolments_live_key_idx` ON `mdm_enrolments` (`identity_key`) WHERE state <> 'checked_out';--> statement-breakpoint
CREATE UNIQUE INDEX `mdm_enrolments_enrolled_serial_idx` ON `mdm_enrolments` (`serial`) WHERE state = 'enrolled';--> statement-breakpoint
CREATE INDEX `mdm_enrolments_nanomdm_idx` ON `mdm_enrolments` (`nanomdm_id`);