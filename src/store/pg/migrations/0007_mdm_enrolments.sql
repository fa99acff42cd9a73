CREATE TABLE "mdm_chains" (
	"enrolment_id" text PRIMARY KEY NOT NULL,
	"certificates" jsonb NOT NULL,
	"chain_sha256" text NOT NULL,
	"serial" text NOT NULL,
	"udid" text NOT NULL,
	"os_version" text NOT NULL,
	"leaf_not_before" bigint NOT NULL,
	"epoch" bigint NOT NULL,
	"verified_at" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "mdm_commands" (
	"enrolment_id" text PRIMARY KEY NOT NULL,
	"command_uuid" text NOT NULL,
	"epoch" bigint NOT NULL,
	"issued_at" bigint NOT NULL,
	"expires_at" bigint NOT NULL,
	CONSTRAINT "mdm_commands_command_uuid_unique" UNIQUE("command_uuid")
);
--> statement-breakpoint
CREATE TABLE "mdm_enrolments" (
	"id" text PRIMARY KEY NOT NULL,
	"account_id" text NOT NULL,
	"provider_token_id" text NOT NULL,
	"identity_key" text NOT NULL,
	"token_hash" text NOT NULL,
	"created_at" bigint NOT NULL,
	"token_expires_at" bigint NOT NULL,
	"nanomdm_id" text,
	"serial" text,
	"state" text NOT NULL,
	"updated_at" bigint NOT NULL,
	CONSTRAINT "mdm_enrolments_token_hash_unique" UNIQUE("token_hash")
);
--> statement-breakpoint
ALTER TABLE "mdm_chains" ADD CONSTRAINT "mdm_chains_enrolment_id_mdm_enrolments_id_fk" FOREIGN KEY ("enrolment_id") REFERENCES "public"."mdm_enrolments"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "mdm_commands" ADD CONSTRAINT "mdm_commands_enrolment_id_mdm_enrolments_id_fk" FOREIGN KEY ("enrolment_id") REFERENCES "public"."mdm_enrolments"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "mdm_enrolments" ADD CONSTRAINT "mdm_enrolments_account_id_accounts_id_fk" FOREIGN KEY ("account_id") REFERENCES "public"."accounts"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "mdm_enrolments" ADD CONSTRAINT "mdm_enrolments_provider_token_id_provider_tokens_id_fk" FOREIGN KEY ("provider_token_id") REFERENCES "public"."provider_tokens"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "mdm_enrolments_account_idx" ON "mdm_enrolments" USING btree ("account_id");--> statement-breakpoint
CREATE UNIQUE INDEX "mdm_enrolments_live_key_idx" ON "mdm_enrolments" USING btree ("identity_key") WHERE state <> 'checked_out';--> statement-breakpoint
CREATE UNIQUE INDEX "mdm_enrolments_enrolled_serial_idx" ON "mdm_enrolments" USING btree ("serial") WHERE state = 'enrolled';--> statement-breakpoint
CREATE INDEX "mdm_enrolments_nanomdm_idx" ON "mdm_enrolments" USING btree ("nanomdm_id");