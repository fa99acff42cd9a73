-- Balance leases (src/store/pg/money-leases.ts): a replica holds part of an account's available money
-- (and of its key's room under the cap) as one hold row of its own, id 'lease:<replica>:...', and admits
-- that key's requests against it in memory; their settlements charge the lease row
-- (umbra_settle_leased_batch) instead of holds of their own. A lease row is renewed, swept and released
-- as any hold (0002, 0003); it may reach 0 while requests drawn on it still run. Locks in 0002's order:
-- holds -> usage -> balances -> api_keys.
ALTER TABLE "holds" DROP CONSTRAINT "hold_positive";--> statement-breakpoint
ALTER TABLE "holds" ADD CONSTRAINT "hold_positive" CHECK ("holds"."amount_micro_usd" > 0 OR ("holds"."request_id" LIKE 'lease:%' AND "holds"."amount_micro_usd" = 0));--> statement-breakpoint
-- Grants a lease (p_existing false: a new row) or tops one up (true: the row must still be there, else
-- 'gone'): min(p_want, room / p_share) where room is the account's available money and, for a capped
-- key, its room under the cap; nothing below p_min ('funds' or 'quota'). 'unknown': no such account or
-- key for it; 'duplicate': a new lease id already taken.
CREATE FUNCTION umbra_lease(p_lease_id text, p_account_id text, p_key_id text, p_want bigint, p_min bigint,
    p_share integer, p_existing boolean, p_replica text, p_ttl_ms bigint)
    RETURNS TABLE(granted bigint, shortfall text, expires timestamptz) LANGUAGE plpgsql AS $$
DECLARE
  v_expires timestamptz := now() + p_ttl_ms * interval '1 millisecond';
  v_found boolean;
  v_room bigint;
  v_key_room bigint;
  v_amount bigint;
BEGIN
  IF p_min <= 0 OR p_want < p_min OR p_share < 1 OR p_lease_id NOT LIKE 'lease:%' THEN
    RAISE EXCEPTION 'a lease needs 0 < min <= want, a share >= 1 and a lease: id' USING ERRCODE = '22023';
  END IF;
  PERFORM 1 FROM holds h WHERE h.request_id = p_lease_id AND h.owner_replica = p_replica
    AND h.account_id = p_account_id AND h.key_id IS NOT DISTINCT FROM p_key_id FOR UPDATE;
  v_found := FOUND;
  IF v_found <> p_existing THEN
    RETURN QUERY SELECT 0::bigint, CASE WHEN p_existing THEN 'gone' ELSE 'duplicate' END, NULL::timestamptz;
    RETURN;
  END IF;
  SELECT b.balance_micro_usd - b.reserved_micro_usd INTO v_room FROM balances b WHERE b.account_id = p_account_id FOR UPDATE;
  IF NOT FOUND THEN RETURN QUERY SELECT 0::bigint, 'unknown', NULL::timestamptz; RETURN; END IF;
  v_key_room := p_want * p_share;
  IF p_key_id IS NOT NULL THEN
    SELECT coalesce(k.spend_cap_micro_usd - k.spent_micro_usd - k.held_micro_usd, p_want * p_share) INTO v_key_room
      FROM api_keys k WHERE k.id = p_key_id AND k.account_id = p_account_id FOR UPDATE;
    IF NOT FOUND THEN RETURN QUERY SELECT 0::bigint, 'unknown', NULL::timestamptz; RETURN; END IF;
  END IF;
  v_amount := least(p_want, v_room / p_share, v_key_room / p_share);
  IF v_amount < p_min THEN
    RETURN QUERY SELECT 0::bigint, CASE WHEN v_room / p_share < p_min THEN 'funds' ELSE 'quota' END, NULL::timestamptz;
    RETURN;
  END IF;
  UPDATE balances SET reserved_micro_usd = reserved_micro_usd + v_amount WHERE account_id = p_account_id;
  IF p_key_id IS NOT NULL THEN
    UPDATE api_keys SET held_micro_usd = held_micro_usd + v_amount WHERE id = p_key_id;
  END IF;
  IF v_found THEN
    UPDATE holds SET amount_micro_usd = amount_micro_usd + v_amount, expires_at = v_expires WHERE request_id = p_lease_id;
  ELSE
    INSERT INTO holds (request_id, account_id, key_id, amount_micro_usd, owner_replica, expires_at)
      VALUES (p_lease_id, p_account_id, p_key_id, v_amount, p_replica, v_expires);
  END IF;
  RETURN QUERY SELECT v_amount, NULL::text, v_expires;
END $$;
--> statement-breakpoint
-- Gives back up to p_amount of a lease (all of it, and the row, with p_close); returns what was given
-- back (0 when the lease is gone).
CREATE FUNCTION umbra_lease_return(p_lease_id text, p_amount bigint, p_close boolean) RETURNS bigint
    LANGUAGE plpgsql AS $$
DECLARE
  v_hold holds%ROWTYPE;
  v_give bigint;
BEGIN
  SELECT * INTO v_hold FROM holds WHERE request_id = p_lease_id AND request_id LIKE 'lease:%' FOR UPDATE;
  IF NOT FOUND THEN RETURN 0; END IF;
  v_give := CASE WHEN p_close THEN v_hold.amount_micro_usd ELSE least(greatest(p_amount, 0), v_hold.amount_micro_usd) END;
  IF p_close THEN
    DELETE FROM holds WHERE request_id = p_lease_id;
  ELSIF v_give > 0 THEN
    UPDATE holds SET amount_micro_usd = amount_micro_usd - v_give WHERE request_id = p_lease_id;
  END IF;
  IF v_give > 0 THEN PERFORM umbra_unhold(v_hold.account_id, v_hold.key_id, v_give, 0, 0); END IF;
  RETURN v_give;
END $$;
--> statement-breakpoint
-- Settlements of requests admitted on leases, many at once: as umbra_settle_batch, but each charge,
-- min(charge, the request's share of the lease, what the lease has left), comes off its lease row (which
-- stays), not a hold of its own. `p_items` as umbra_settle_batch's, plus `lease_id` and `amount` (what the
-- request was admitted for). A lease that is gone charges nothing (`had_hold` false). Per settlement one
-- `charge` ledger entry; earnings and fees one entry per receiving account per batch (request id null, as
-- the SQLite store writes them).
CREATE FUNCTION umbra_settle_leased_batch(p_items jsonb, p_platform_account_id text)
    RETURNS TABLE(item integer, applied boolean, had_hold boolean, charged bigint) LANGUAGE plpgsql AS $$
DECLARE
  r_item integer[];
  r_id text[];
  r_lease text[];
  r_amount bigint[];
  r_asked bigint[];
  r_fee_asked bigint[];
  r_earn_asked bigint[];
  r_provider text[];
  r_at bigint[];
  r_account text[];
  r_key text[];
  r_first boolean[];
  r_had boolean[];
  r_applied boolean[];
  r_charge bigint[];
  r_fee bigint[];
  r_earn bigint[];
  l_ids text[];
  l_accounts text[];
  l_keys text[];
  l_left bigint[];
  m_account text[];
  m_kind text[];
  m_amount bigint[];
  m_request text[];
  m_at bigint[];
  l_start bigint[];
  v_retried boolean := false;
  v_applied text[];
  v_n integer;
  v_l integer;
BEGIN
  SELECT array_agg(x.item), array_agg(x.request_id), array_agg(x.lease_id), array_agg(x.amount), array_agg(x.charge),
      array_agg(x.fee), array_agg(x.earning), array_agg(x.provider_account_id), array_agg(x.at_ms), array_agg(x.account_id),
      array_agg(x.key_id)
    INTO r_item, r_id, r_lease, r_amount, r_asked, r_fee_asked, r_earn_asked, r_provider, r_at, r_account, r_key
    FROM (SELECT * FROM jsonb_to_recordset(p_items) AS x0(item integer, request_id text, lease_id text, amount bigint, charge bigint,
      fee bigint, earning bigint, provider_account_id text, at_ms bigint, account_id text, key_id text)
      ORDER BY x0.request_id COLLATE "C", x0.item) x;
  v_n := coalesce(array_length(r_item, 1), 0);
  IF v_n = 0 THEN RETURN; END IF;
  SELECT array_agg(h.request_id), array_agg(h.account_id), array_agg(h.key_id), array_agg(h.amount_micro_usd)
    INTO l_ids, l_accounts, l_keys, l_left FROM (
      SELECT h0.request_id, h0.account_id, h0.key_id, h0.amount_micro_usd FROM holds h0
        WHERE h0.request_id = ANY(r_lease) AND h0.request_id LIKE 'lease:%' ORDER BY h0.request_id COLLATE "C" FOR UPDATE) h;
  l_start := l_left;
  r_first := array_fill(false, ARRAY[v_n]);
  r_had := array_fill(false, ARRAY[v_n]);
  r_charge := array_fill(0::bigint, ARRAY[v_n]);
  FOR i IN 1 .. v_n LOOP
    r_first[i] := i = 1 OR r_id[i] <> r_id[i - 1];
    v_l := array_position(l_ids, r_lease[i]);
    IF v_l IS NOT NULL THEN
      r_account[i] := l_accounts[v_l];
      r_key[i] := l_keys[v_l];
      IF r_first[i] THEN
        r_had[i] := true;
        r_charge[i] := greatest(least(r_asked[i], r_amount[i], l_left[v_l]), 0);
        l_left[v_l] := l_left[v_l] - r_charge[i];
      END IF;
    END IF;
  END LOOP;
  WITH ins AS (
    INSERT INTO usage (request_id, account_id, key_id, model, build_id, provider_id, prompt_tokens, cached_tokens,
        completion_tokens, cost_micro_usd, started_at, first_content_ms, duration_ms, outcome)
      SELECT r.id, r.account, r.key, u.model, u.build_id, u.provider_id, u.prompt_tokens, u.cached_tokens,
          u.completion_tokens, r.charge, u.started_at, u.first_content_ms, u.duration_ms, u.outcome
        FROM unnest(r_item, r_id, r_account, r_key, r_charge, r_first) AS r(item, id, account, key, charge, first)
        JOIN jsonb_to_recordset(p_items) AS u(item integer, model text, build_id text, provider_id text, prompt_tokens bigint,
          cached_tokens bigint, completion_tokens bigint, started_at bigint, first_content_ms bigint, duration_ms bigint,
          outcome text) ON u.item = r.item
        WHERE r.first ORDER BY r.id COLLATE "C"
      ON CONFLICT DO NOTHING RETURNING usage.request_id)
  SELECT array_agg(ins.request_id) INTO v_applied FROM ins;
  r_applied := array_fill(false, ARRAY[v_n]);
  r_fee := array_fill(0::bigint, ARRAY[v_n]);
  r_earn := array_fill(0::bigint, ARRAY[v_n]);
  FOR i IN 1 .. v_n LOOP
    r_applied[i] := r_first[i] AND coalesce(r_id[i] = ANY(v_applied), false);
    IF r_first[i] AND NOT r_applied[i] AND r_charge[i] > 0 THEN v_retried := true; END IF;
    IF NOT r_applied[i] THEN r_charge[i] := 0; END IF;
  END LOOP;
  -- Settled before (a retry whose answer was lost): it charges nothing, so it must take nothing of its
  -- lease from the others in the batch; their charges again, without it, and their usage rows to match.
  -- Rare; each row by its key (a batch on a lease holds its row's lock, so an earlier one has committed).
  IF v_retried THEN
    l_left := l_start;
    FOR i IN 1 .. v_n LOOP
      v_l := array_position(l_ids, r_lease[i]);
      IF r_applied[i] AND r_had[i] THEN
        r_charge[i] := greatest(least(r_asked[i], r_amount[i], l_left[v_l]), 0);
        l_left[v_l] := l_left[v_l] - r_charge[i];
        UPDATE usage SET cost_micro_usd = r_charge[i] WHERE request_id = r_id[i] AND cost_micro_usd <> r_charge[i];
      END IF;
    END LOOP;
  END IF;
  FOR i IN 1 .. v_n LOOP
    IF r_had[i] THEN r_fee[i] := greatest(least(r_fee_asked[i], r_charge[i]), 0); END IF;
    IF r_provider[i] IS NOT NULL THEN r_earn[i] := greatest(least(r_earn_asked[i], r_charge[i] - r_fee[i]), 0); END IF;
  END LOOP;
  -- The ledger's moves, once: a charge entry per settlement (with its request id), then per receiving
  -- account one earning entry and the platform one fee entry for the whole batch (request id null, as
  -- the SQLite store writes them; the usage rows say which requests they cover).
  SELECT array_agg(mv.account_id ORDER BY mv.seq), array_agg(mv.kind ORDER BY mv.seq), array_agg(mv.amount ORDER BY mv.seq),
      array_agg(mv.request_id ORDER BY mv.seq), array_agg(mv.at_ms ORDER BY mv.seq)
    INTO m_account, m_kind, m_amount, m_request, m_at FROM (
      SELECT c.account AS account_id, 'charge'::text AS kind, -c.charge AS amount, c.id AS request_id, c.at AS at_ms, c.seq
        FROM unnest(r_account, r_charge, r_id, r_at) WITH ORDINALITY AS c(account, charge, id, at, seq) WHERE c.charge > 0
      UNION ALL
      SELECT e.provider, 'earning'::text, sum(e.earn)::bigint, NULL::text, max(e.at), v_n + 1
        FROM unnest(r_provider, r_earn, r_at) AS e(provider, earn, at) WHERE e.earn > 0 GROUP BY e.provider
      UNION ALL
      SELECT p_platform_account_id, 'fee'::text, sum(f.fee)::bigint, NULL::text, max(f.at), v_n + 2
        FROM unnest(r_fee, r_at) AS f(fee, at) WHERE f.fee > 0 HAVING count(*) > 0) mv;
  IF m_account IS NULL THEN
    RETURN QUERY SELECT m.item, m.applied, m.had, m.charge FROM unnest(r_item, r_applied, r_had, r_charge) AS m(item, applied, had, charge);
    RETURN;
  END IF;
  IF p_platform_account_id = ANY(m_account) THEN
    INSERT INTO accounts (id, name, jwt_subject, created_at) VALUES (p_platform_account_id, 'Platform', NULL, 0)
      ON CONFLICT DO NOTHING;
    INSERT INTO balances (account_id, balance_micro_usd, reserved_micro_usd, updated_at)
      VALUES (p_platform_account_id, 0, 0, 0) ON CONFLICT DO NOTHING;
  END IF;
  PERFORM 1 FROM balances WHERE account_id = ANY(m_account) ORDER BY account_id COLLATE "C" FOR UPDATE;
  PERFORM 1 FROM api_keys WHERE id = ANY(r_key) ORDER BY id COLLATE "C" FOR UPDATE;
  IF EXISTS (SELECT 1 FROM unnest(m_account) a WHERE NOT EXISTS (SELECT 1 FROM balances b WHERE b.account_id = a)) THEN
    RAISE EXCEPTION 'a settlement moves money to or from an account without a balance' USING ERRCODE = '23503';
  END IF;
  INSERT INTO ledger_entries (account_id, kind, amount_micro_usd, balance_after_micro_usd, request_id, created_at)
    SELECT m.account, m.kind, m.amount, b.balance_micro_usd + sum(m.amount) OVER (PARTITION BY m.account ORDER BY m.ord),
        m.request, m.at
      FROM unnest(m_account, m_kind, m_amount, m_request, m_at) WITH ORDINALITY AS m(account, kind, amount, request, at, ord)
      JOIN balances b ON b.account_id = m.account ORDER BY m.account, m.ord;
  -- A lease's charges leave the balance and its reservation together.
  UPDATE balances b SET balance_micro_usd = b.balance_micro_usd + t.delta, reserved_micro_usd = b.reserved_micro_usd - t.unheld,
      updated_at = t.at
    FROM (SELECT m.account, sum(m.amount) AS delta, sum(CASE WHEN m.kind = 'charge' THEN -m.amount ELSE 0 END) AS unheld,
        max(m.at) AS at FROM unnest(m_account, m_kind, m_amount, m_at) AS m(account, kind, amount, at) GROUP BY 1) t
    WHERE b.account_id = t.account;
  UPDATE api_keys k SET held_micro_usd = k.held_micro_usd - t.charged, spent_micro_usd = k.spent_micro_usd + t.charged
    FROM (SELECT m.key, sum(m.charge) AS charged FROM unnest(r_key, r_charge, r_had) AS m(key, charge, had)
      WHERE m.had AND m.key IS NOT NULL GROUP BY 1 HAVING sum(m.charge) > 0) t
    WHERE k.id = t.key;
  UPDATE holds h SET amount_micro_usd = h.amount_micro_usd - t.charged
    FROM (SELECT m.lease, sum(m.charge) AS charged FROM unnest(r_lease, r_charge, r_had) AS m(lease, charge, had)
      WHERE m.had GROUP BY 1 HAVING sum(m.charge) > 0) t
    WHERE h.request_id = t.lease;
  RETURN QUERY SELECT m.item, m.applied, m.had, m.charge FROM unnest(r_item, r_applied, r_had, r_charge) AS m(item, applied, had, charge);
END $$;
