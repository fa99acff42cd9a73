PRAGMA foreign_keys=OFF;--> statement-breakpoint
CREATE TABLE `__new_ledger_entries` (
	`id` integer PRIMARY KEY NOT NULL,
	`account_id` text NOT NULL,
	`kind` text NOT NULL,
	`amount_micro_usd` integer NOT NULL,
	`balance_after_micro_usd` integer NOT NULL,
	`request_id` text,
	`created_at` integer NOT NULL,
	FOREIGN KEY (`account_id`) REFERENCES `accounts`(`id`) ON UPDATE no action ON DELETE no action
);
--> statement-breakpoint
INSERT INTO `__new_ledger_entries`("id", "account_id", "kind", "amount_micro_usd", "balance_after_micro_usd", "request_id", "created_at") SELECT "id", "account_id", "kind", "amount_micro_usd", "balance_after_micro_usd", "request_id", "created_at" FROM `ledger_entries`;--> statement-breakpoint
DROP TABLE `ledger_entries`;--> statement-breakpoint
ALTER TABLE `__new_ledger_entries` RENAME TO `ledger_entries`;--> statement-breakpoint
PRAGMA foreign_keys=ON;--> statement-breakpoint
CREATE INDEX `ledger_account_idx` ON `ledger_entries` (`account_id`,`id`);