/**
 * The shared rate limits' Lua scripts: GCRA over a subject's two keys (`:req`, `:tok`, one hash tag, so
 * one Redis Cluster slot), on the server's clock (TIME, in whole ms) unless the caller passes one (tests).
 * Each key holds "tat_ms rem limit": the theoretical arrival time (when the bucket is full again) as
 * tat_ms + rem / limit exactly, and the limit it was written under. In units of limits/rate-limiter.ts
 * (a request or token is UNIT; a limit L refills L units per ms) the level is L x UNIT - (tat - now) x L,
 * so the answers equal the in-process bucket's. A missing key is a full bucket; a key expires when full.
 * CHECK admits and debits both dimensions or neither; a cost above the whole capacity needs a full
 * bucket and leaves debt; a changed limit clamps the level. TRUE_UP moves the token TAT by
 * (actual - estimate) x emission (never below now).
 */

const PRELUDE = `
local UNIT = 60000
local SLACK = 3600000
local function clock(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function num(x) return string.format('%.17g', x) end
-- A key's state at now: its debt (units until full, <= 0 when full) and the limit it was written
-- under; nil when missing.
local function read(key, now)
  local s = redis.call('GET', key)
  if not s then return nil end
  local ms, rem, old = string.match(s, '^(%S+) (%S+) (%S+)$')
  ms, rem, old = tonumber(ms), tonumber(rem), tonumber(old)
  return {debt = (ms - now) * old + rem, limit = old}
end
local function full(st) return st == nil or st.debt <= 0 end
-- The level (units) under limit: a missing state is full, a changed limit clamps the level.
local function level(st, limit)
  if st == nil then return limit * UNIT end
  return math.min(st.limit * UNIT - math.max(0, st.debt), limit * UNIT)
end
-- Time (ms) until a level is full again, 0 when full. A caller's clock is not the server's: its keys
-- then live an hour longer, so that real time cannot expire them before test time does.
local function ttl(limit, lvl, fixed)
  local debt = limit * UNIT - lvl
  if debt <= 0 then return 0 end
  local t = math.floor(debt / limit) + 1
  if fixed then t = t + SLACK end
  return t
end
-- Writes a level as its TAT (tat_ms, rem) and limit, to expire after ms.
local function put(key, limit, lvl, now, ms)
  local debt = limit * UNIT - lvl
  if debt < 0 then debt = 0 end
  local q = math.floor(debt / limit)
  redis.call('SET', key, num(now + q) .. ' ' .. num(debt - q * limit) .. ' ' .. num(limit), 'PX', ms)
end
`;

/**
 * KEYS: req, tok. ARGV: rpm, tpm (0 = no limit: that key is dropped), tokens, now ('' = TIME), and the
 * true-ups not sent yet (actual - estimated tokens, summed; '' or 0 = none), applied first as TRUE_UP
 * would. Both keys live until the later is full (a subject is forgotten whole, as the in-process one is).
 */
export const CHECK_SCRIPT = `${PRELUDE}
local rpm, tpm, tokens = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local fixed = ARGV[4] ~= ''
local now = clock(ARGV[4])
local rs, ts = read(KEYS[1], now), read(KEYS[2], now)
-- A subject full in every dimension is one never seen (its keys expire then; a caller's clock may
-- get there first).
if full(rs) and full(ts) then rs, ts = nil, nil end
local rl, tl = 0, 0
if rpm > 0 then rl = level(rs, rpm) else redis.call('DEL', KEYS[1]) end
if tpm > 0 then tl = level(ts, tpm) else redis.call('DEL', KEYS[2]) end
local owed = tonumber(ARGV[5]) or 0
if tpm > 0 and owed ~= 0 then tl = math.min(tpm * UNIT, tl - owed * UNIT) end
local ok = (rpm == 0 or rl >= math.min(UNIT, rpm * UNIT)) and (tpm == 0 or tl >= math.min(tokens * UNIT, tpm * UNIT))
if ok then
  if rpm > 0 then rl = rl - UNIT end
  if tpm > 0 then tl = tl - tokens * UNIT end
end
local ms = 0
if rpm > 0 then ms = ttl(rpm, rl, fixed) end
if tpm > 0 then ms = math.max(ms, ttl(tpm, tl, fixed)) end
if ms == 0 then
  redis.call('DEL', KEYS[1], KEYS[2])
else
  if rpm > 0 then put(KEYS[1], rpm, rl, now, ms) end
  if tpm > 0 then put(KEYS[2], tpm, tl, now, ms) end
end
return {ok and 1 or 0, num(rl), num(tl)}
`;

/**
 * KEYS: req, tok. ARGV: actual - estimated tokens, tpm at the check, now ('' = TIME). No token key but a
 * request key: tpm was removed since the check (nothing to do). Neither: the subject was forgotten full.
 */
export const TRUE_UP_SCRIPT = `${PRELUDE}
local delta, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local fixed = ARGV[3] ~= ''
local now = clock(ARGV[3])
local rs, ts = read(KEYS[1], now), read(KEYS[2], now)
if ts == nil and not full(rs) then return 0 end
if full(rs) and full(ts) then rs, ts = nil, nil end
local limit = tpm
if ts ~= nil then limit = ts.limit end
local lvl = math.min(limit * UNIT, level(ts, limit) - delta * UNIT)
local rms = redis.call('PTTL', KEYS[1])
local ms = math.max(ttl(limit, lvl, fixed), rms)
if ms <= 0 then
  redis.call('DEL', KEYS[2])
  return 1
end
put(KEYS[2], limit, lvl, now, ms)
if rms > 0 and rms < ms then redis.call('PEXPIRE', KEYS[1], ms) end
return 1
`;
