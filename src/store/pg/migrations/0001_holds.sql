CREATE TABLE "holds" (
	"request_id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"key_id" text,
	"amount_micro_usd" bigint NOT NULL,
	"owner_replica" text NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	CONSTRAINT "hold_positive" CHECK ("holds"."amount_micro_usd" > 0)
);
--> statement-breakpoint
ALTER TABLE "api_keys" ADD COLUMN "held_micro_usd" bigint DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "holds" ADD CONSTRAINT "holds_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "holds" ADD CONSTRAINT "holds_key_id_api_keys_id_fk" FOREIGN KEY ("key_id") REFERENCES "public"."api_keys"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "holds_expires_idx" ON "holds" USING btree ("expires_at");--> statement-breakpoint
CREATE INDEX "holds_owner_idx" ON "holds" USING btree ("owner_replica");--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "held_not_negative" CHECK ("api_keys"."held_micro_usd" >= 0);--> statement-breakpoint
ALTER TABLE "api_keys" ADD CONSTRAINT "spend_cap_covers_held" CHECK ("api_keys"."spend_cap_micro_usd" IS NULL OR "api_keys"."spent_micro_usd" + "api_keys"."held_micro_usd" <= "api_keys"."spend_cap_micro_usd");--> statement-breakpoint
ALTER TABLE "balances" ADD CONSTRAINT "reserved_within_balance" CHECK ("balances"."reserved_micro_usd" <= "balances"."balance_micro_usd");