ALTER TABLE `api_keys` ADD `link_machines` integer DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE `provider_tokens` ADD `expires_at` integer;