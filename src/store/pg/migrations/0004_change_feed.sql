-- The change feed (src/store/pg/change-feed.ts): every committed change to what replicas cache (API
-- keys, provider tokens, builds, aliases, prices) sends NOTIFY umbra_changes '<table>:<id>', delivered
-- to every listening replica after the commit. The money columns of api_keys (spent, held), which the
-- money authority moves on every request, are left out: an UPDATE setting only those sends nothing.
-- Each trigger's argument names its table's key column.
CREATE FUNCTION umbra_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  v_id text := CASE WHEN TG_OP = 'DELETE' THEN to_jsonb(OLD) ELSE to_jsonb(NEW) END ->> TG_ARGV[0];
BEGIN
  PERFORM pg_notify('umbra_changes', TG_TABLE_NAME || ':' || left(v_id, 200));
  RETURN NULL;
END $$;
--> statement-breakpoint
CREATE TRIGGER api_keys_changed AFTER INSERT OR DELETE OR UPDATE OF id, account_id, key_hash, hint, name,
    allowed_models, spend_cap_micro_usd, rpm, tpm, self_route_only, link_machines, created_at, revoked_at
  ON api_keys FOR EACH ROW EXECUTE FUNCTION umbra_notify_change('id');
--> statement-breakpoint
CREATE TRIGGER provider_tokens_changed AFTER INSERT OR UPDATE OR DELETE ON provider_tokens
  FOR EACH ROW EXECUTE FUNCTION umbra_notify_change('id');
--> statement-breakpoint
CREATE TRIGGER model_builds_changed AFTER INSERT OR UPDATE OR DELETE ON model_builds
  FOR EACH ROW EXECUTE FUNCTION umbra_notify_change('id');
--> statement-breakpoint
CREATE TRIGGER model_aliases_changed AFTER INSERT OR UPDATE OR DELETE ON model_aliases
  FOR EACH ROW EXECUTE FUNCTION umbra_notify_change('alias');
--> statement-breakpoint
CREATE TRIGGER model_prices_changed AFTER INSERT OR UPDATE OR DELETE ON model_prices
  FOR EACH ROW EXECUTE FUNCTION umbra_notify_change('model');
