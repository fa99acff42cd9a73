-- The money authority's batched functions (src/store/pg/money-authority.ts sends one round trip per
-- batch): each takes many calls of one kind and decides them in one transaction, so a batch costs one
-- commit. No item's outcome rolls back another's: a shortfall is a result row, never a raise. Items are
-- decided in the order given (reserve) or in request id order (settle, release). Every row a batch
-- changes is locked before its first change, in 0002's order: holds (request id, "C" collation) ->
-- usage -> balances (account id, "C") -> api_keys (id, "C"), so batches and single calls on any
-- replica cannot deadlock (umbra_renew, last, now takes its holds in that order too). 0002's
-- single-call functions stay as they are (a batch of one uses them).
CREATE FUNCTION umbra_reserve_batch(p_request_ids text[], p_account_ids text[], p_key_ids text[],
    p_amounts bigint[], p_replica text, p_ttl_ms bigint)
    RETURNS TABLE(item integer, shortfall text, expires timestamptz) LANGUAGE plpgsql AS $$
DECLARE
  v_expires timestamptz := now() + p_ttl_ms * interval '1 millisecond';
  v_n integer := coalesce(array_length(p_request_ids, 1), 0);
  -- Per locked account, what is available (balance - reserved) as the batch goes; per locked key, its
  -- account and its room under the cap (cap - spent - held; NULL without a cap).
  v_accounts text[];
  v_room bigint[];
  v_keys text[];
  v_key_accounts text[];
  v_key_room bigint[];
  v_open text[];
  v_taken text[] := '{}';
  v_inserted text[];
  v_out text[] := array_fill(NULL::text, ARRAY[v_n]);
  v_a integer;
  v_k integer;
  v_amount bigint;
BEGIN
  IF EXISTS (SELECT 1 FROM unnest(p_amounts) a WHERE a IS NULL OR a <= 0) THEN
    RAISE EXCEPTION 'hold amount must be positive' USING ERRCODE = '22023';
  END IF;
  SELECT array_agg(b.account_id), array_agg(b.room) INTO v_accounts, v_room FROM (
    SELECT account_id, balance_micro_usd - reserved_micro_usd AS room FROM balances
      WHERE account_id = ANY(p_account_ids) ORDER BY account_id COLLATE "C" FOR UPDATE) b;
  SELECT array_agg(k.id), array_agg(k.account_id), array_agg(k.room) INTO v_keys, v_key_accounts, v_key_room FROM (
    SELECT id, account_id, spend_cap_micro_usd - spent_micro_usd - held_micro_usd AS room FROM api_keys
      WHERE id = ANY(p_key_ids) ORDER BY id COLLATE "C" FOR UPDATE) k;
  SELECT array_agg(h.request_id) INTO v_open FROM holds h WHERE h.request_id = ANY(p_request_ids);
  -- The decisions, in order, on the locked figures (0002's order of reasons).
  FOR i IN 1 .. v_n LOOP
    v_amount := p_amounts[i];
    v_a := array_position(v_accounts, p_account_ids[i]);
    v_k := CASE WHEN p_key_ids[i] IS NOT NULL THEN array_position(v_keys, p_key_ids[i]) END;
    IF v_a IS NULL THEN v_out[i] := 'unknown';
    ELSIF v_room[v_a] < v_amount THEN v_out[i] := 'funds';
    ELSIF p_key_ids[i] IS NOT NULL AND (v_k IS NULL OR v_key_accounts[v_k] <> p_account_ids[i]) THEN v_out[i] := 'unknown';
    ELSIF v_k IS NOT NULL AND v_key_room[v_k] < v_amount THEN v_out[i] := 'quota';
    ELSIF p_request_ids[i] = ANY(v_open) OR p_request_ids[i] = ANY(v_taken) THEN v_out[i] := 'duplicate';
    ELSE
      v_room[v_a] := v_room[v_a] - v_amount;
      IF v_k IS NOT NULL THEN v_key_room[v_k] := v_key_room[v_k] - v_amount; END IF;
      v_taken := v_taken || p_request_ids[i];
    END IF;
  END LOOP;
  -- A hold another transaction opened under the same id meanwhile makes its item a duplicate here.
  WITH ins AS (
    INSERT INTO holds (request_id, account_id, key_id, amount_micro_usd, owner_replica, expires_at)
      SELECT p_request_ids[g], p_account_ids[g], p_key_ids[g], p_amounts[g], p_replica, v_expires
        FROM generate_series(1, v_n) g WHERE v_out[g] IS NULL
      ON CONFLICT DO NOTHING RETURNING holds.request_id)
  SELECT array_agg(ins.request_id) INTO v_inserted FROM ins;
  FOR i IN 1 .. v_n LOOP
    IF v_out[i] IS NULL AND NOT coalesce(p_request_ids[i] = ANY(v_inserted), false) THEN v_out[i] := 'duplicate'; END IF;
  END LOOP;
  UPDATE balances b SET reserved_micro_usd = b.reserved_micro_usd + t.total
    FROM (SELECT p_account_ids[g] AS account_id, sum(p_amounts[g]) AS total FROM generate_series(1, v_n) g
      WHERE v_out[g] IS NULL GROUP BY 1) t
    WHERE b.account_id = t.account_id;
  UPDATE api_keys k SET held_micro_usd = k.held_micro_usd + t.total
    FROM (SELECT p_key_ids[g] AS key_id, sum(p_amounts[g]) AS total FROM generate_series(1, v_n) g
      WHERE v_out[g] IS NULL AND p_key_ids[g] IS NOT NULL GROUP BY 1) t
    WHERE k.id = t.key_id;
  RETURN QUERY SELECT g, v_out[g], CASE WHEN v_out[g] IS NULL THEN v_expires END FROM generate_series(1, v_n) g;
END $$;
--> statement-breakpoint
-- A batch of settlements as moves of money, in request id order: per settlement with a hold its charge
-- (the hold given back), the provider's earning and the platform's fee; `seq` the settlement's position,
-- `sub` the move's within it. umbra_settle_batch locks, writes the ledger and updates the balances from it.
CREATE FUNCTION umbra_settle_moves(p_platform_account_id text, p_ids text[], p_at bigint[], p_had boolean[],
    p_accounts text[], p_amounts bigint[], p_charges bigint[], p_providers text[], p_earnings bigint[], p_fees bigint[])
    RETURNS TABLE(account_id text, kind text, amount bigint, unheld bigint, request_id text, at_ms bigint, seq bigint,
      sub integer) LANGUAGE sql IMMUTABLE AS $$
  SELECT m.account, 'charge', -m.charge, m.amount, m.id, m.at, m.seq, 1
    FROM unnest(p_accounts, p_charges, p_amounts, p_ids, p_at, p_had) WITH ORDINALITY AS m(account, charge, amount, id, at, had, seq)
    WHERE m.had
  UNION ALL SELECT m.provider, 'earning', m.earn, 0, m.id, m.at, m.seq, 2
    FROM unnest(p_providers, p_earnings, p_ids, p_at) WITH ORDINALITY AS m(provider, earn, id, at, seq) WHERE m.earn > 0
  UNION ALL SELECT p_platform_account_id, 'fee', m.fee, 0, m.id, m.at, m.seq, 3
    FROM unnest(p_fees, p_ids, p_at) WITH ORDINALITY AS m(fee, id, at, seq) WHERE m.fee > 0
$$;
--> statement-breakpoint
-- Settlements as 0002's umbra_settle, many at once. `p_items` is a JSON array of objects, one per
-- settlement, with `item` (its position, returned with its result) and umbra_settle's parameters by name
-- without the p_ prefix (`at_ms` for p_at). In request id order: the holds taken, the usage rows written
-- (only a settlement that writes its usage row charges; a request id twice in a batch counts once, at its
-- first), then, with every balance and key locked in order, one update per balance and key and the
-- ledger entries (each entry's balance_after as if the settlements had run one by one in that order).
CREATE FUNCTION umbra_settle_batch(p_items jsonb, p_platform_account_id text)
    RETURNS TABLE(item integer, applied boolean, had_hold boolean, charged bigint) LANGUAGE plpgsql AS $$
DECLARE
  v_ids text[];
  v_hold_ids text[];
  v_hold_accounts text[];
  v_hold_keys text[];
  v_hold_amounts bigint[];
  v_applied text[];
  -- Per settlement, in request id order: item, request id, hold account, key and amount (had a hold),
  -- whether it wrote its usage row, charge, earning, fee, provider account, time.
  r_item integer[];
  r_id text[];
  r_account text[];
  r_key text[];
  r_amount bigint[];
  r_had boolean[];
  r_applied boolean[];
  r_charge bigint[];
  r_earn bigint[];
  r_fee bigint[];
  r_provider text[];
  r_at bigint[];
BEGIN
  SELECT array_agg(x.request_id) INTO v_ids FROM jsonb_to_recordset(p_items) AS x(request_id text);
  WITH d AS (
    DELETE FROM holds WHERE holds.request_id IN (SELECT h.request_id FROM holds h WHERE h.request_id = ANY(v_ids)
      ORDER BY h.request_id COLLATE "C" FOR UPDATE)
    RETURNING holds.request_id, holds.account_id, holds.key_id, holds.amount_micro_usd)
  SELECT array_agg(d.request_id), array_agg(d.account_id), array_agg(d.key_id), array_agg(d.amount_micro_usd)
    INTO v_hold_ids, v_hold_accounts, v_hold_keys, v_hold_amounts FROM d;
  -- The usage rows first: only the call that writes one charges (a concurrent settlement of the same id
  -- waits here for the first to commit, then finds the row).
  WITH ins AS (
    INSERT INTO usage (request_id, account_id, key_id, model, build_id, provider_id, prompt_tokens, cached_tokens,
        completion_tokens, cost_micro_usd, started_at, first_content_ms, duration_ms, outcome)
      SELECT DISTINCT ON (x.request_id COLLATE "C") x.request_id, coalesce(h.account_id, x.account_id),
          CASE WHEN h.request_id IS NOT NULL THEN h.key_id ELSE x.key_id END, x.model, x.build_id, x.provider_id,
          x.prompt_tokens, x.cached_tokens, x.completion_tokens,
          CASE WHEN h.request_id IS NOT NULL THEN greatest(least(x.charge, h.amount), 0) ELSE 0 END,
          x.started_at, x.first_content_ms, x.duration_ms, x.outcome
        FROM jsonb_to_recordset(p_items) AS x(item integer, request_id text, account_id text, key_id text, charge bigint,
          model text, build_id text, provider_id text, prompt_tokens bigint, cached_tokens bigint,
          completion_tokens bigint, started_at bigint, first_content_ms bigint, duration_ms bigint, outcome text)
        LEFT JOIN unnest(v_hold_ids, v_hold_accounts, v_hold_keys, v_hold_amounts) AS h(request_id, account_id, key_id, amount)
          ON h.request_id = x.request_id
        ORDER BY x.request_id COLLATE "C", x.item
      ON CONFLICT DO NOTHING RETURNING usage.request_id)
  SELECT array_agg(ins.request_id) INTO v_applied FROM ins;
  -- One pass in request id order fills every array (aggregates read the ordered subquery in its order).
  SELECT array_agg(y.item), array_agg(y.request_id), array_agg(y.account), array_agg(y.key), array_agg(y.amount),
      array_agg(y.had), array_agg(y.applied), array_agg(y.charge),
      array_agg(CASE WHEN y.provider_account_id IS NOT NULL THEN greatest(least(y.earning, y.charge - y.fee), 0) ELSE 0 END),
      array_agg(y.fee), array_agg(y.provider_account_id), array_agg(y.at_ms)
    INTO r_item, r_id, r_account, r_key, r_amount, r_had, r_applied, r_charge, r_earn, r_fee, r_provider, r_at
    FROM (SELECT z.*, CASE WHEN z.had THEN greatest(least(z.fee_asked, z.charge), 0) ELSE 0 END AS fee FROM (
      SELECT w.*, CASE WHEN w.had AND w.applied THEN greatest(least(w.charge_asked, w.amount), 0) ELSE 0 END AS charge FROM (
        SELECT x.item, x.request_id, x.charge AS charge_asked, x.fee AS fee_asked, x.earning, x.provider_account_id, x.at_ms,
          h.account_id AS account, h.key_id AS key, h.amount, x.first AND h.request_id IS NOT NULL AS had,
          x.first AND coalesce(x.request_id = ANY(v_applied), false) AS applied,
          row_number() OVER (ORDER BY x.request_id COLLATE "C", x.item) AS seq
        FROM (SELECT x0.*, x0.item = min(x0.item) OVER (PARTITION BY x0.request_id) AS first
          FROM jsonb_to_recordset(p_items) AS x0(item integer, request_id text, charge bigint, fee bigint, earning bigint,
            provider_account_id text, at_ms bigint)) x
        LEFT JOIN unnest(v_hold_ids, v_hold_accounts, v_hold_keys, v_hold_amounts) AS h(request_id, account_id, key_id, amount)
          ON h.request_id = x.request_id AND x.first) w) z ORDER BY z.seq) y;
  IF EXISTS (SELECT 1 FROM unnest(r_fee) f WHERE f > 0) THEN
    INSERT INTO accounts (id, name, jwt_subject, created_at) VALUES (p_platform_account_id, 'Platform', NULL, 0)
      ON CONFLICT DO NOTHING;
    INSERT INTO balances (account_id, balance_micro_usd, reserved_micro_usd, updated_at)
      VALUES (p_platform_account_id, 0, 0, 0) ON CONFLICT DO NOTHING;
  END IF;
  PERFORM 1 FROM balances WHERE account_id IN (SELECT mv.account_id FROM umbra_settle_moves(p_platform_account_id, r_id, r_at, r_had, r_account, r_amount, r_charge, r_provider, r_earn, r_fee) mv)
    ORDER BY account_id COLLATE "C" FOR UPDATE;
  PERFORM 1 FROM api_keys WHERE id = ANY(r_key) ORDER BY id COLLATE "C" FOR UPDATE;
  -- Money for an account without a balance row (a provider account that does not exist) refuses the batch.
  IF EXISTS (SELECT 1 FROM umbra_settle_moves(p_platform_account_id, r_id, r_at, r_had, r_account, r_amount, r_charge, r_provider, r_earn, r_fee) mv WHERE NOT EXISTS (SELECT 1 FROM balances b WHERE b.account_id = mv.account_id)) THEN
    RAISE EXCEPTION 'a settlement moves money to or from an account without a balance' USING ERRCODE = '23503';
  END IF;
  INSERT INTO ledger_entries (account_id, kind, amount_micro_usd, balance_after_micro_usd, request_id, created_at)
    SELECT mv.account_id, mv.kind, mv.amount,
        b.balance_micro_usd + sum(mv.amount) OVER (PARTITION BY mv.account_id ORDER BY mv.seq, mv.sub), mv.request_id, mv.at_ms
      FROM umbra_settle_moves(p_platform_account_id, r_id, r_at, r_had, r_account, r_amount, r_charge, r_provider, r_earn, r_fee) mv JOIN balances b ON b.account_id = mv.account_id
      WHERE mv.amount <> 0 ORDER BY mv.account_id, mv.seq, mv.sub;
  UPDATE balances b SET balance_micro_usd = b.balance_micro_usd + t.delta,
      reserved_micro_usd = b.reserved_micro_usd - t.unheld, updated_at = coalesce(t.at_ms, b.updated_at)
    FROM (SELECT mv.account_id, sum(mv.amount) AS delta, sum(mv.unheld) AS unheld,
        max(mv.at_ms) FILTER (WHERE mv.amount <> 0) AS at_ms FROM umbra_settle_moves(p_platform_account_id, r_id, r_at, r_had, r_account, r_amount, r_charge, r_provider, r_earn, r_fee) mv GROUP BY 1) t
    WHERE b.account_id = t.account_id;
  UPDATE api_keys k SET held_micro_usd = k.held_micro_usd - t.unheld, spent_micro_usd = k.spent_micro_usd + t.spent
    FROM (SELECT m.key, sum(m.amount) AS unheld, sum(m.charge) AS spent
      FROM unnest(r_key, r_amount, r_charge, r_had) AS m(key, amount, charge, had) WHERE m.had AND m.key IS NOT NULL GROUP BY 1) t
    WHERE k.id = t.key;
  RETURN QUERY SELECT m.item, m.applied, m.had, m.charge FROM unnest(r_item, r_applied, r_had, r_charge) AS m(item, applied, had, charge);
END $$;
--> statement-breakpoint
-- Releases holds without charging (the requests never reached a provider), in request id order;
-- `released` is false for a hold already gone (or a request id given twice, after its first).
CREATE FUNCTION umbra_release_batch(p_request_ids text[])
    RETURNS TABLE(item integer, released boolean) LANGUAGE plpgsql AS $$
DECLARE
  s record;
  v_hold holds%ROWTYPE;
  v_gone holds[] := '{}';
BEGIN
  FOR s IN SELECT i, p_request_ids[i] AS id FROM generate_subscripts(p_request_ids, 1) i ORDER BY p_request_ids[i] COLLATE "C", i LOOP
    DELETE FROM holds WHERE holds.request_id = s.id RETURNING * INTO v_hold;
    item := s.i;
    released := FOUND;
    IF released THEN v_gone := v_gone || v_hold; END IF;
    RETURN NEXT;
  END LOOP;
  PERFORM 1 FROM balances WHERE account_id IN (SELECT g.account_id FROM unnest(v_gone) g)
    ORDER BY account_id COLLATE "C" FOR UPDATE;
  PERFORM 1 FROM api_keys WHERE id IN (SELECT g.key_id FROM unnest(v_gone) g) ORDER BY id COLLATE "C" FOR UPDATE;
  FOREACH v_hold IN ARRAY v_gone LOOP
    PERFORM umbra_unhold(v_hold.account_id, v_hold.key_id, v_hold.amount_micro_usd, 0, 0);
  END LOOP;
END $$;
--> statement-breakpoint
-- Renewal as 0002's, but taking its holds in request id order ("C"), as batched settlements and
-- releases do: a renewal and a batch that share holds could otherwise lock them in opposite orders.
CREATE OR REPLACE FUNCTION umbra_renew(p_replica text, p_ttl_ms bigint)
    RETURNS TABLE(request_id text, expires_at timestamptz) LANGUAGE sql AS $$
  UPDATE holds SET expires_at = now() + p_ttl_ms * interval '1 millisecond'
    WHERE holds.request_id IN (SELECT h.request_id FROM holds h WHERE h.owner_replica = p_replica
      ORDER BY h.request_id COLLATE "C" FOR UPDATE)
    RETURNING holds.request_id, holds.expires_at
$$;
