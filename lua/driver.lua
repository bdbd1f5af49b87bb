-- Driver, protocol v2: a batch of decisions in one atomic call. Each
-- decision covers limits of ONE client; decisions run in order, each seeing
-- the writes of those before it.
--
-- KEYS: per decision, per limit, in order: sliding_window two (current,
--       previous window), every other algorithm one.
-- ARGV: now (the caller's clock, ms), S, then S specs of 4: code (sw, fw,
--       tb, sl, gc), limit, window_ms, burst; then D, then per decision: L,
--       then L limits of 4: spec (1-based index into the specs), op, amount,
--       offset. The test build appends its clock (CLOCK_ARGS).
--       op u: use (consume amount if the whole decision admits);
--       op k: check (allowed iff amount units remain; writes nothing);
--       op g: charge (add amount unconditionally, into debt if need be).
--       A decision is request-time (u and k) or a charge (only g); g on sl
--       is refused. offset (0 <= offset < window) shifts fw windows; 0 elsewhere.
-- Reply: per decision, per limit: allowed (1/0), remaining, reset_ms,
--       retry_after_ms (0 when allowed; -1 when amount can never fit).
--       For g: allowed = at least one unit remains after the charge, and
--       retry_after_ms = until one unit remains.
--
-- All or nothing per request-time decision: its u writes are applied only
-- if every limit allows. Anything invalid is refused before any key is read.
--
-- Redis's cost is per command, so the counters and states (every key but
-- sliding_log's) are read by ONE MGET for the whole batch and written at
-- the end by one command per key, with the batch's last value: a later
-- decision reads an earlier one's write from `val`. A count that existed
-- is raised by INCRBY, which keeps its TTL: sw and fw give a key the same
-- expiry on every write (the end of its window, plus one window for sw),
-- so the first write's stands, and an integer reply costs Redis less than
-- SET's status. New keys, and tb and gc (their TTL moves), are SET with
-- PX. sliding_log reads and writes its sorted set as it goes.
--
-- Debt caps (so every reply is bounded): a token bucket's tokens never go
-- below -capacity and a GCRA's TAT never more than one tolerance past the
-- tolerance (both: at most 2 x burst x window units ahead), and never more
-- than 2^53 - 1 ms from full. Window counts need no cap (a count stops
-- mattering after two windows); they only saturate at 2^53 - 1, where they
-- already deny through both. Bounds: sw reset and retry
-- <= 2 x window; fw and sl <= window; tb and gc <= ceil(2 x burst x window /
-- limit); remaining <= limit (burst for tb and gc); all <= 2^53 - 1.

local MAX_SPECS, MAX_DECISIONS, MAX_LIMITS = 64, 256, 64
local MGET_CHUNK = 4000 -- keys per MGET: unpack stays below the ~8000 of Lua
local SLIDING_LOG_MAX = 10000 -- bounds the work of one call and the memory of one key
local ZADD_CHUNK = 400 -- members per ZADD: unpack stays far below the ~8000 of Lua

local function bad(msg)
  return redis.error_reply('ERR ratelimit: ' .. msg)
end

local function bad_limit(d, i, msg)
  return bad('decision ' .. d .. ' limit ' .. i .. ': ' .. msg)
end

local nargs = #argv - CLOCK_ARGS
local now = tonumber(argv[1])
if now == nil or not (now >= 0 and now < MAX_EXACT) or now % 1 ~= 0 then
  return bad('now must be a non-negative integer')
end
local S = posint(argv[2])
if S == nil or S > MAX_SPECS then
  return bad('the spec count must be an integer from 1 to ' .. MAX_SPECS)
end
if nargs < 3 + 4 * S then
  return bad('too few arguments')
end

-- The spec table, validated once, with what every decision on a spec
-- shares, computed once: for tb and gc the tolerance (burst x window units)
-- and the debt cap as (whole ms, remainder in 1/limit ms) in p1..p4; for sw
-- the elapsed part of the window and the TTL of its writes (also as text).
local code, lim, win, bur = {}, {}, {}, {}
local p1, p2, p3, p4 = {}, {}, {}, {}
-- A spec by its index as the caller writes it, 1 to S: looked up, not parsed.
local index = {}
local a = 3
for s = 1, S do
  local c, limit, window, burst = argv[a], posint(argv[a + 1]), posint(argv[a + 2]), posint(argv[a + 3])
  if c ~= 'sw' and c ~= 'fw' and c ~= 'tb' and c ~= 'sl' and c ~= 'gc' then
    return bad('spec ' .. s .. ': unknown algorithm')
  elseif limit == nil then
    return bad('spec ' .. s .. ': limit must be a positive integer')
  elseif window == nil then
    return bad('spec ' .. s .. ': window must be a positive integer of ms')
  elseif burst == nil then
    return bad('spec ' .. s .. ': burst must be a positive integer')
  elseif limit * window >= MAX_EXACT or burst * window >= MAX_EXACT then
    return bad('spec ' .. s .. ': limit or burst times window is too large')
  elseif c == 'sl' and limit > SLIDING_LOG_MAX then
    return bad('spec ' .. s .. ': sliding_log limit is at most ' .. SLIDING_LOG_MAX)
  end
  code[s], lim[s], win[s], bur[s] = c, limit, window, burst
  index[fmt('%d', s)] = s
  if c == 'sw' then
    local elapsed = now % window
    -- Until the NEXT window ends this window's key is read as "previous".
    local ttl = 2 * window - elapsed
    if ttl > TOP then
      ttl = TOP
    end
    p1[s], p2[s], p3[s] = elapsed, ttl, fmt('%d', ttl)
  elseif c == 'tb' or c == 'gc' then
    local tol = burst * window
    local q = floor(tol / limit)
    local r = tol - q * limit
    p1[s], p2[s] = q, r
    -- The cap: min(2 x tolerance, 2^53 - 1 ms); past 2^53 only compared.
    -- (2 x tolerance < 2^54 units: at TOP ms its remainder is 0.)
    local c2, r2 = 2 * q, 2 * r
    if r >= limit - r then
      c2, r2 = c2 + 1, r - (limit - r)
    end
    if c2 > TOP then
      c2, r2 = TOP, 0
    end
    p3[s], p4[s] = c2, r2
  end
  a = a + 4
end

-- Every decision and limit, validated before any key is touched.
local D = posint(argv[a])
if D == nil or D > MAX_DECISIONS then
  return bad('the decision count must be an integer from 1 to ' .. MAX_DECISIONS)
end
a = a + 1
local first = a -- where the decisions start: the loop below reads them again
local keys_needed, needs_clock, has_strings = 0, false, false
for d = 1, D do
  -- Cheap on the common path: a count or an amount of '1' and an offset of
  -- '0' are compared, not parsed (tonumber is the costly part here).
  local L = argv[a]
  if L == '1' then
    L = 1
  else
    L = tonumber(L)
    if not (L and L >= 1 and L <= MAX_LIMITS and L % 1 == 0) then
      return bad('decision ' .. d .. ': the limit count must be an integer from 1 to ' .. MAX_LIMITS)
    end
  end
  if a + 4 * L > nargs then
    return bad('too few arguments')
  end
  local charge = argv[a + 2] == 'g'
  for i = 1, L do
    local s = index[argv[a + 1]]
    local c, op, amount, offset = code[s], argv[a + 2], argv[a + 3], argv[a + 4]
    if c == nil then
      return bad_limit(d, i, 'spec must be an index into the specs')
    elseif op ~= 'u' and op ~= 'k' and op ~= 'g' then
      return bad_limit(d, i, 'op must be u, k or g')
    elseif (op == 'g') ~= charge then
      return bad_limit(d, i, 'a decision is either u and k or only g')
    elseif charge and c == 'sl' then
      return bad_limit(d, i, 'g is impossible on sl')
    end
    if amount == '1' then
      amount = 1
    else
      amount = tonumber(amount)
      if not (amount and amount >= 1 and amount * win[s] < MAX_EXACT and amount % 1 == 0) then
        if posint(amount) then
          return bad_limit(d, i, 'amount times window is too large')
        end
        return bad_limit(d, i, 'amount must be a positive integer')
      end
    end
    if offset == '0' then
      offset = 0
    else
      offset = tonumber(offset)
      if offset == nil or not (offset >= 0 and offset < win[s]) or offset % 1 ~= 0 then
        return bad_limit(d, i, 'offset must be an integer from 0 to window - 1')
      elseif offset ~= 0 and c ~= 'fw' then
        return bad_limit(d, i, 'offset applies to fw only')
      end
    end
    if c == 'sw' then
      keys_needed = keys_needed + 2
      has_strings = true
    else
      keys_needed = keys_needed + 1
      if c == 'fw' then
        has_strings = true
      else
        needs_clock = true
        has_strings = has_strings or c ~= 'sl'
      end
    end
    a = a + 4
  end
  a = a + 1
end
if a - 1 ~= nargs then
  return bad('expected ' .. (a - 1) .. ' arguments for these decisions')
end
if #keys ~= keys_needed then
  return bad('expected ' .. keys_needed .. ' keys for these decisions')
end

-- sw and fw run on the caller's clock (the window index is in their keys);
-- the others on Redis TIME, read once.
local store_now = 0
if needs_clock then
  store_now = clock_ms()
end

-- Every key read at once. got[i]: the value of keys[i], or false (absent,
-- or not a string: a sliding_log's sorted set, which nothing reads here).
local got = {}
if has_strings then
  local nk = #keys
  if nk <= MGET_CHUNK then
    got = call('MGET', unpack(keys))
  else
    for first = 1, nk, MGET_CHUNK do
      local last = first + MGET_CHUNK - 1
      if last > nk then
        last = nk
      end
      local part = call('MGET', unpack(keys, first, last))
      for i = first, last do
        got[i] = part[i - first + 1]
      end
    end
  end
end

local reply = {}
-- A decision's queued writes: key, value, and for string keys how to write
-- it (below); sl sets wz (its clock), its amount and window.
local wk, wv, wt, wz = {}, {}, {}, {}
-- The batch's writes to string keys, applied at the end: per key its last
-- value, and how: a PX as text (SET), or the count the key held (INCRBY by
-- the difference; only a number from an existing count).
local val, how = {}, {}
local k, r = 1, 0
a = first
for _ = 1, D do
  -- Read again as validated above (a valid count of '1' is the same 1).
  local L = argv[a]
  if L == '1' then
    L = 1
  else
    L = tonumber(L)
  end
  local nw, all, charge = 0, true, argv[a + 2] == 'g'
  for _ = 1, L do
    local s, op, amount, offset = index[argv[a + 1]], argv[a + 2], argv[a + 3], argv[a + 4]
    if amount == '1' then
      amount = 1
    else
      amount = tonumber(amount)
    end
    if offset == '0' then
      offset = 0
    else
      offset = tonumber(offset)
    end
    a = a + 4
    local c, limit, window = code[s], lim[s], win[s]
    local allowed, remaining, reset, retry
    if c == 'sw' then
      --@include sliding_window.lua
      k = k + 2
    else
      if c == 'fw' then
        --@include fixed_window.lua
      elseif c == 'sl' then
        --@include sliding_log.lua
      else
        --@include tat.lua
      end
      k = k + 1
    end
    all = all and allowed
    reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = allowed and 1 or 0, remaining, reset, retry
    r = r + 4
  end
  a = a + 1
  if all or charge then
    for w = 1, nw do
      local key = wk[w]
      if wz[w] then
        --@include sliding_log_write.lua
      else
        -- A count's first base stands; a PX is always the latest.
        local t = wt[w]
        if how[key] == nil or type(t) == 'string' then
          how[key] = t
        end
        val[key] = wv[w]
      end
    end
  end
end
-- Any order: the call is atomic.
for key, v in pairs(val) do
  local t = how[key]
  if type(t) == 'number' then
    local by = v - t
    if by == 1 then
      by = '1'
    else
      by = fmt('%d', by)
    end
    -- Fails only on what this script never writes (not an integer, another
    -- type): then SET replaces it, keeping its TTL.
    if try('INCRBY', key, by) ~= v then
      call('SET', key, fmt('%d', v), 'KEEPTTL')
    end
  else
    if type(v) == 'number' then
      v = fmt('%d', v)
    end
    call('SET', key, v, 'PX', t)
  end
end
return reply
