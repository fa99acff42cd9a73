-- The money authority's functions (src/store/pg/money-authority.ts): one round trip each. Locks are
-- always taken holds -> balances (in account id order, "C" collation) -> api_keys, so no two of them
-- can deadlock. Shortfalls raise SQLSTATE UM001 (funds), UM002 (quota: the key's spend cap) or UM003
-- (no such account or key for that account); the raise rolls back everything the call did.
CREATE FUNCTION umbra_reserve(p_request_id text, p_account_id text, p_key_id text, p_amount bigint,
    p_replica text, p_ttl_ms bigint) RETURNS timestamptz LANGUAGE plpgsql AS $$
DECLARE
  v_expires timestamptz := now() + p_ttl_ms * interval '1 millisecond';
BEGIN
  IF p_amount <= 0 THEN RAISE EXCEPTION 'hold amount must be positive' USING ERRCODE = '22023'; END IF;
  UPDATE balances SET reserved_micro_usd = reserved_micro_usd + p_amount
    WHERE account_id = p_account_id AND balance_micro_usd - reserved_micro_usd >= p_amount;
  IF NOT FOUND THEN
    IF NOT EXISTS (SELECT 1 FROM balances WHERE account_id = p_account_id) THEN
      RAISE EXCEPTION 'no such account' USING ERRCODE = 'UM003';
    END IF;
    RAISE EXCEPTION 'insufficient funds' USING ERRCODE = 'UM001';
  END IF;
  IF p_key_id IS NOT NULL THEN
    UPDATE api_keys SET held_micro_usd = held_micro_usd + p_amount
      WHERE id = p_key_id AND account_id = p_account_id
        AND (spend_cap_micro_usd IS NULL OR spent_micro_usd + held_micro_usd + p_amount <= spend_cap_micro_usd);
    IF NOT FOUND THEN
      IF NOT EXISTS (SELECT 1 FROM api_keys WHERE id = p_key_id AND account_id = p_account_id) THEN
        RAISE EXCEPTION 'no such key for the account' USING ERRCODE = 'UM003';
      END IF;
      RAISE EXCEPTION 'spend cap reached' USING ERRCODE = 'UM002';
    END IF;
  END IF;
  INSERT INTO holds (request_id, account_id, key_id, amount_micro_usd, owner_replica, expires_at)
    VALUES (p_request_id, p_account_id, p_key_id, p_amount, p_replica, v_expires);
  RETURN v_expires;
END $$;
--> statement-breakpoint
-- Takes the hold off its account and key; charges `p_charge` (at most the hold) from both. No ledger.
CREATE FUNCTION umbra_unhold(p_account_id text, p_key_id text, p_amount bigint, p_charge bigint, p_at bigint)
    RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE v_after bigint;
BEGIN
  UPDATE balances SET reserved_micro_usd = reserved_micro_usd - p_amount,
      balance_micro_usd = balance_micro_usd - p_charge,
      updated_at = CASE WHEN p_charge > 0 THEN p_at ELSE updated_at END
    WHERE account_id = p_account_id RETURNING balance_micro_usd INTO v_after;
  IF p_key_id IS NOT NULL THEN
    UPDATE api_keys SET held_micro_usd = held_micro_usd - p_amount, spent_micro_usd = spent_micro_usd + p_charge
      WHERE id = p_key_id;
  END IF;
  RETURN v_after;
END $$;
--> statement-breakpoint
-- Settlement, idempotent on the request id (the usage row's key). With its hold: charges
-- min(charge, hold) (the fee first, the earning cut to fit), writes usage (cost = what was charged) and
-- the ledger, releases the hold. Without one (settled, released or swept) it charges nothing: the usage
-- row is still written once, cost 0, and `had_hold` is false for the caller to report. A usage row
-- already there means settled: nothing is charged, the hold (if any) is released.
CREATE FUNCTION umbra_settle(p_request_id text, p_account_id text, p_key_id text, p_charge bigint,
    p_provider_account_id text, p_earning bigint, p_fee bigint, p_platform_account_id text, p_at bigint,
    p_model text, p_build_id text, p_provider_id text, p_prompt_tokens bigint, p_cached_tokens bigint,
    p_completion_tokens bigint, p_started_at bigint, p_first_content_ms bigint, p_duration_ms bigint,
    p_outcome text)
    RETURNS TABLE(applied boolean, had_hold boolean, charged bigint) LANGUAGE plpgsql AS $$
DECLARE
  v_hold holds%ROWTYPE;
  v_charge bigint := 0;
  v_earn bigint := 0;
  v_fee bigint := 0;
  v_after bigint;
BEGIN
  DELETE FROM holds WHERE request_id = p_request_id RETURNING * INTO v_hold;
  had_hold := FOUND;
  IF had_hold THEN v_charge := greatest(least(p_charge, v_hold.amount_micro_usd), 0); END IF;
  -- The usage row first: only the call that writes it charges (a concurrent settlement of the same id
  -- waits here for the first to commit, then finds the row).
  INSERT INTO usage (request_id, account_id, key_id, model, build_id, provider_id, prompt_tokens, cached_tokens,
      completion_tokens, cost_micro_usd, started_at, first_content_ms, duration_ms, outcome)
    VALUES (p_request_id, coalesce(v_hold.account_id, p_account_id), CASE WHEN had_hold THEN v_hold.key_id ELSE p_key_id END,
      p_model, p_build_id, p_provider_id, p_prompt_tokens, p_cached_tokens, p_completion_tokens, v_charge, p_started_at,
      p_first_content_ms, p_duration_ms, p_outcome)
    ON CONFLICT DO NOTHING;
  applied := FOUND;
  IF NOT applied THEN v_charge := 0; END IF;
  IF had_hold THEN
    v_fee := greatest(least(p_fee, v_charge), 0);
    IF p_provider_account_id IS NOT NULL THEN v_earn := greatest(least(p_earning, v_charge - v_fee), 0); END IF;
    IF v_fee > 0 THEN
      INSERT INTO accounts (id, name, jwt_subject, created_at) VALUES (p_platform_account_id, 'Platform', NULL, 0)
        ON CONFLICT DO NOTHING;
      INSERT INTO balances (account_id, balance_micro_usd, reserved_micro_usd, updated_at)
        VALUES (p_platform_account_id, 0, 0, 0) ON CONFLICT DO NOTHING;
    END IF;
    PERFORM 1 FROM balances WHERE account_id IN (v_hold.account_id,
        CASE WHEN v_earn > 0 THEN p_provider_account_id END, CASE WHEN v_fee > 0 THEN p_platform_account_id END)
      ORDER BY account_id COLLATE "C" FOR UPDATE;
  END IF;
  IF had_hold THEN
    v_after := umbra_unhold(v_hold.account_id, v_hold.key_id, v_hold.amount_micro_usd, v_charge, p_at);
    IF v_charge > 0 THEN
      INSERT INTO ledger_entries (account_id, kind, amount_micro_usd, balance_after_micro_usd, request_id, created_at)
        VALUES (v_hold.account_id, 'charge', -v_charge, v_after, p_request_id, p_at);
    END IF;
    IF v_earn > 0 THEN
      UPDATE balances SET balance_micro_usd = balance_micro_usd + v_earn, updated_at = p_at
        WHERE account_id = p_provider_account_id RETURNING balance_micro_usd INTO v_after;
      INSERT INTO ledger_entries (account_id, kind, amount_micro_usd, balance_after_micro_usd, request_id, created_at)
        VALUES (p_provider_account_id, 'earning', v_earn, v_after, p_request_id, p_at);
    END IF;
    IF v_fee > 0 THEN
      UPDATE balances SET balance_micro_usd = balance_micro_usd + v_fee, updated_at = p_at
        WHERE account_id = p_platform_account_id RETURNING balance_micro_usd INTO v_after;
      INSERT INTO ledger_entries (account_id, kind, amount_micro_usd, balance_after_micro_usd, request_id, created_at)
        VALUES (p_platform_account_id, 'fee', v_fee, v_after, p_request_id, p_at);
    END IF;
  END IF;
  charged := v_charge;
  RETURN NEXT;
END $$;
--> statement-breakpoint
-- Releases a hold without charging (the request never reached a provider). False when it was gone.
CREATE FUNCTION umbra_release(p_request_id text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE v_hold holds%ROWTYPE;
BEGIN
  DELETE FROM holds WHERE request_id = p_request_id RETURNING * INTO v_hold;
  IF NOT FOUND THEN RETURN false; END IF;
  PERFORM umbra_unhold(v_hold.account_id, v_hold.key_id, v_hold.amount_micro_usd, 0, 0);
  RETURN true;
END $$;
--> statement-breakpoint
-- Renews every hold a replica still owns to now() + ttl; returns them (a hold missing was swept).
CREATE FUNCTION umbra_renew(p_replica text, p_ttl_ms bigint)
    RETURNS TABLE(request_id text, expires_at timestamptz) LANGUAGE sql AS $$
  UPDATE holds SET expires_at = now() + p_ttl_ms * interval '1 millisecond'
    WHERE owner_replica = p_replica RETURNING holds.request_id, holds.expires_at
$$;
--> statement-breakpoint
-- Releases up to p_limit expired holds (database clock), skipping rows another call has locked;
-- returns how many it released. Run it again while it returns p_limit.
CREATE FUNCTION umbra_sweep(p_limit integer) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_ids text[];
  v_n integer;
BEGIN
  SELECT array_agg(h.request_id) INTO v_ids FROM (
    SELECT request_id FROM holds WHERE expires_at < now() ORDER BY expires_at LIMIT p_limit FOR UPDATE SKIP LOCKED) h;
  IF v_ids IS NULL THEN RETURN 0; END IF;
  PERFORM 1 FROM balances WHERE account_id IN (SELECT account_id FROM holds WHERE request_id = ANY(v_ids))
    ORDER BY account_id COLLATE "C" FOR UPDATE;
  PERFORM 1 FROM api_keys WHERE id IN (SELECT key_id FROM holds WHERE request_id = ANY(v_ids))
    ORDER BY id COLLATE "C" FOR UPDATE;
  UPDATE balances b SET reserved_micro_usd = b.reserved_micro_usd - s.total
    FROM (SELECT account_id, sum(amount_micro_usd) AS total FROM holds WHERE request_id = ANY(v_ids) GROUP BY account_id) s
    WHERE b.account_id = s.account_id;
  UPDATE api_keys k SET held_micro_usd = k.held_micro_usd - s.total
    FROM (SELECT key_id, sum(amount_micro_usd) AS total FROM holds WHERE request_id = ANY(v_ids) AND key_id IS NOT NULL
      GROUP BY key_id) s
    WHERE k.id = s.key_id;
  DELETE FROM holds WHERE request_id = ANY(v_ids);
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END $$;
