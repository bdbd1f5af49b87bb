-- Driver, protocol v5: a batch of decisions in one atomic call. Each
-- decision covers limits of ONE client; decisions run in order, each seeing
-- the writes of those before it.
--
-- THE CALL: its layout is written here and nowhere else. Rust's encoder
-- (filter/src/store/script_call.rs) writes it; the tests in
-- filter/src/store/script_call/layout.rs read the three @ lines and check
-- the encoder and the decoder against them; README and the Rust docs
-- point here. `N*(...)`: N times what the parentheses hold; a name in
-- capitals is a count, read before what it counts.
--
-- @keys  per decision, per limit: sw 2, fw 1, tb 1, sl 1, gc 1, cc 1
-- @argv  now S S*(code limit window_ms burst) H H*(L L*(spec op amount offset)) D D*(shape)
-- @reply per decision, per limit: allowed remaining reset_ms retry_after_ms
-- @overrides keys: one per rule, before the limits' | shape: a rule's first op in capitals | reply: first allowed + 2 x state; limits last if state is not 0
--
-- KEYS: sliding_window's two are the current and the previous window's
--   counter; the caller's clock picks them (filter/src/keys.rs).
-- now: the caller's clock (ms): sw and fw decide on it; the others read
--   Redis TIME.
-- S specs (1 to MAX_SPECS): code (sw, fw, tb, sl, gc, cc), limit, window_ms,
--   burst. cc (concurrency): limit streams in flight; window_ms is how long
--   a slot lives unrenewed (max_hold); burst 1.
-- H shapes (1 to MAX_DECISIONS): what a decision does with which limits,
--   written once however many decisions do the same: L limits (1 to
--   MAX_LIMITS), each its spec (1-based index into the specs), op, amount
--   and offset.
--   op u: use (consume amount if the whole decision admits);
--   op v: reserve (tb and gc only): u, and its reply, if allowed, is the
--   reservation's mark instead of remaining, reset and retry (see tat.lua);
--   op k: check (allowed iff amount units remain; writes nothing);
--   op g: charge (add amount unconditionally, into debt if need be);
--   op f: refund (a reservation's unused part: see refund.lua; its keys
--   are those of the window the reservation went into).
--   op r: release the stream's slot (cc only);
--   op n: renew it (cc only).
--   A shape is request-time (u, v and k) or after the fact (only g, f, r
--   and n); g and f on sl and cc are refused, and cc takes amount 1 (u: 1 and the
--   streams the proxy holds outside the store, counted, not written). offset
--   (0 <= offset < window) shifts fw windows; for cc it is the stream's
--   slot id (decimal digits, at most 20; 0 for k only); for f on tb and gc
--   the reservation's mark, born:count (born < 2^53, count < COUNT); 0
--   elsewhere.
-- D decisions (1 to MAX_DECISIONS): each its shape (1-based index into the
--   shapes). The test build appends its clock (CLOCK_ARGS).
-- Overrides (the @overrides line): a shape whose limits start each rule's
--   run with its op in capitals (U k, then V: two rules) reads the
--   operator's overrides of its client: its decisions' keys start with one
--   override key per run (<domain>:{<identity>}:<rule>:override,
--   filter/src/keys.rs), read by the same MGET as the counts. A present
--   override with an expiry (see override.lua) changes its rule's limits,
--   blocks it or resets it; one without an expiry is ignored. Its reply
--   says a state in its first allowed, plus 2 x state: 0 (no override:
--   the reply as any), 1 (one applies: 2 or 3) or 3 (one applies and this
--   decision applied its reset: 6 or 7); after its limits' values, if the
--   state is not 0, each limit's limit as decided (0: blocked). A blocked
--   limit's values are 0 0 ttl ttl, ttl the block's time left (ms). (The
--   state rides in a value: a value of its own would grow the reply table
--   of every decision alone from four slots to eight, also for the clients
--   without an override.)
-- Reply: allowed (1/0), remaining, reset_ms, retry_after_ms (0 when
--   allowed; -1 when amount can never fit). For v, if allowed: 1, the lead
--   after (units of 1/limit ms: remaining and reset follow from it), born
--   and count (the mark its refund carries). For cc see concurrency.lua
--   (r and n: allowed = the slot was still held, retry 0). For g: allowed = at least one
--   unit remains after the charge, and retry_after_ms = until one unit
--   remains. A decision that met a Redis error (a key of another type
--   under a sliding_log's name: WRONGTYPE) failed alone: in its slots, the
--   error's text (a string, at most ERROR_TEXT bytes) in place of its
--   first allowed, then zeros; nothing of it was written, and the other
--   decisions are decided as usual.
--
-- All or nothing per request-time decision: its u writes are applied only
-- if every limit allows. Anything invalid is refused before any key is read
-- (an error reply for the whole call).
--
-- Redis's cost is per command, so the counters and states (every key but
-- sliding_log's) are read by ONE MGET for the whole batch, and a later
-- decision reads what earlier ones wrote from `val`. A key's first write
-- in the call goes to Redis as its decision is applied; a key written
-- again by later decisions is written once more at the end (`again`).
-- Writing at once spares the tables a write queue would fill and walk
-- again (README: 1,360 instructions a decision). A count the key held is
-- raised by INCRBY, which keeps its TTL: sw and fw give a key the same
-- expiry on every write (the end of its window, plus one window for sw),
-- so the first write's stands, and an integer reply costs Redis less than
-- SET's status. New keys, and tb and gc states (their TTL moves), are SET
-- with PX: every key this script creates has a TTL. A count someone else
-- wrote without one is given this script's by PTTL and PEXPIRE, checked
-- on a raise that carries the count past a multiple of TTL_CHECK (below).
--
-- A decision fails alone: MGET reads another type as absent and never
-- fails, SET replaces whatever a key held, and INCRBY's failure (a text
-- that is no integer to Redis) is caught and the key replaced by SET, so
-- only sliding_log, which reads and writes its sorted set as it goes, can
-- meet a key of another type: its first read is a pcall, before anything
-- of its decision is written. What else can refuse a command (OOM,
-- READONLY, MISCONF), Redis refuses only while the script has written
-- nothing: an error reply for the whole call, and nothing written.
--
-- Debt caps (so every reply is bounded): a token bucket's tokens never go
-- below -capacity and a GCRA's TAT never more than one tolerance past the
-- tolerance (both: at most 2 x burst x window units ahead), and never more
-- than 2^53 - 1 ms from full. Window counts need no cap (a count stops
-- mattering after two windows); they only saturate at 2^53 - 1, where they
-- already deny through both. Bounds: sw reset and retry
-- <= 2 x window; fw and sl <= window; tb and gc <= ceil(2 x burst x window /
-- limit); remaining <= limit (burst for tb and gc); all <= 2^53 - 1.

local MAX_SPECS, MAX_DECISIONS, MAX_LIMITS = 64, 256, 64 -- at most MAX_DECISIONS shapes too
local MGET_CHUNK = 800 -- keys per MGET: unpack stays far below the ~8000 of Lua
local SLIDING_LOG_MAX = 10000 -- bounds the work of one call and the memory of one key
local ZADD_CHUNK = 400 -- members per ZADD: unpack stays far below the ~8000 of Lua
local CC_RETRY_MS = 1000 -- a concurrency denial's retry: when a stream ends is unknown
-- A raised count's TTL is checked (PTTL) when the raise carries it past a
-- multiple of TTL_CHECK: a count someone else wrote without a TTL gets one
-- within TTL_CHECK units this script adds to it. Every raise checked cost
-- a redis.call per decision, 4,300 instructions (15% of a batched
-- decision), to mend what only a foreign write can break: the keys this
-- script creates are SET with PX, and INCRBY keeps a TTL.
local TTL_CHECK = 8
local SLOT_ID_MAX = 20 -- digits of a slot id (a u64)
-- tb and gc count what is added to them modulo COUNT (2^48): far more than
-- any bucket can be given while a reservation waits for its refund.
local COUNT = 281474976710656
-- The longest error text in a reply: Redis's WRONGTYPE message whole. With
-- the zeros after it, it takes no more room than the four integers it
-- replaces (the filter bounds a reply by its integers' count).
local ERROR_TEXT = 66

-- Lua in Redis pays for every table a call makes, so what the call reads
-- and queues lives in a few flat tables, a fixed number of slots per entry:
-- entry i of a table of N slots each starts after slot N x (i - 1), and
-- each slot has a name.
-- sp, the specs: its four arguments, then P1..P4, what every decision on
-- the spec shares (computed once per call; see the spec loop).
local SPEC_SLOTS, S_CODE, S_LIMIT, S_WINDOW, S_BURST, S_P1, S_P2, S_P3, S_P4 = 8, 1, 2, 3, 4, 5, 6, 7, 8
-- hs, the shapes: where its limits start in lq (the slot before them), how
-- many limits, how many keys they take, whether it charges, how many
-- override keys come first (0: it reads none), and where its arguments
-- start in argv (its L: override.lua reads its ops again there).
local SHAPE_SLOTS, H_FIRST, H_LIMITS, H_KEYS, H_CHARGE, H_RUNS, H_ARG = 6, 1, 2, 3, 4, 5, 6
-- lq, every shape's limits, in order: its spec's index, op, amount, offset.
local LIMIT_SLOTS, L_SPEC, L_OP, L_AMOUNT, L_OFFSET = 4, 1, 2, 3, 4
-- wq, one decision's queued writes: key, value, PX, and how (see the
-- decision loop).
local WRITE_SLOTS, W_KEY, W_VALUE, W_PX, W_HOW = 4, 1, 2, 3, 4
-- The reply: the @reply values of each limit.
local REPLY_SLOTS = 4

local function bad(msg)
  return redis.error_reply('ERR ratelimit: ' .. msg)
end

local function bad_limit(h, i, msg)
  return bad('shape ' .. h .. ' limit ' .. i .. ': ' .. msg)
end

local nargs = #argv - CLOCK_ARGS
local now = num(argv[1])
if now == nil or not (now >= 0 and now < MAX_EXACT) or now % 1 ~= 0 then
  return bad('now must be a non-negative integer')
end
local S = posint(argv[2])
if S == nil or S > MAX_SPECS then
  return bad('the spec count must be an integer from 1 to ' .. MAX_SPECS)
end
if nargs < 3 + 4 * S then -- now, S, the specs, H
  return bad('too few arguments')
end

-- Lua in Redis pays for every table it makes and every slot it adds (an
-- allocation, and the collector's work after it), and for every tonumber
-- and string.format: this part, run once per call, keeps to few tables,
-- presized where one entry is the common case, and a call of 16 decisions
-- spends most of its time on the decisions.

-- The spec table, validated once, with what every decision on a spec
-- shares, computed once: P1..P4 are, for tb and gc, the tolerance (burst x
-- window units) and the debt cap as (whole ms, remainder in 1/limit ms);
-- for sw the elapsed part of the window and the TTL of its writes, as a
-- number and as the text of their PX; for fw the elapsed part of an
-- aligned window and the text of its writes' PX (a string.format per call,
-- not per write).
local sp = { false, false, false, false, false, false, false, false }
local a = 3
for s = 1, S do
  local c, limit, window, burst = argv[a], posint(argv[a + 1]), posint(argv[a + 2]), posint(argv[a + 3])
  if c ~= 'sw' and c ~= 'fw' and c ~= 'tb' and c ~= 'sl' and c ~= 'gc' and c ~= 'cc' then
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
  local o = SPEC_SLOTS * (s - 1)
  sp[o + S_CODE], sp[o + S_LIMIT], sp[o + S_WINDOW], sp[o + S_BURST] = c, limit, window, burst
  sp[o + S_P1], sp[o + S_P2], sp[o + S_P3], sp[o + S_P4] = false, false, false, false
  if c == 'sw' then
    local elapsed = now % window
    -- Until the NEXT window ends this window's key is read as "previous".
    local ttl = 2 * window - elapsed
    if ttl > TOP then
      ttl = TOP
    end
    -- ttl also as the text of its writes' PX: formatted once per call.
    sp[o + S_P1], sp[o + S_P2], sp[o + S_P3] = elapsed, ttl, fmt('%d', ttl)
  elseif c == 'fw' then
    -- Where now is in an aligned window, and the PX of its writes as text.
    local elapsed = now % window
    sp[o + S_P1], sp[o + S_P2] = elapsed, fmt('%d', window - elapsed)
  elseif c == 'tb' or c == 'gc' then
    sp[o + S_P1], sp[o + S_P2], sp[o + S_P3], sp[o + S_P4] = tolerance(burst, window, limit)
  end
  a = a + 4
end

-- Every shape, limit and decision, validated before any key is touched.
-- Shapes are few: the work per decision is a lookup in `shape`, which maps
-- the text of a shape index to the index, filled as decisions use them.
local H = posint(argv[a])
if H == nil or H > MAX_DECISIONS then
  return bad('the shape count must be an integer from 1 to ' .. MAX_DECISIONS)
end
a = a + 1
local hs, lq, shape = { false, false, false, false, false, false }, { false, false, false, false }, {}
local n, needs_clock, has_strings = 0, false, false
for h = 1, H do
  local L = posint(argv[a])
  if L == nil or L > MAX_LIMITS then
    return bad('shape ' .. h .. ': the limit count must be an integer from 1 to ' .. MAX_LIMITS)
  elseif a + 4 * L > nargs then
    return bad('too few arguments')
  end
  -- After the fact if its first limit's op is g, f, r or n (every op must
  -- agree; in capitals, it starts a rule reading overrides).
  local o1, runs = argv[a + 2], 0
  local charge = o1 == 'g' or o1 == 'f' or o1 == 'r' or o1 == 'n' or o1 == 'G' or o1 == 'F' or o1 == 'R' or o1 == 'N'
  local nk, at = 0, SHAPE_SLOTS * (h - 1)
  hs[at + H_FIRST], hs[at + H_LIMITS], hs[at + H_CHARGE], hs[at + H_ARG] = LIMIT_SLOTS * n, L, charge, a
  for i = 1, L do
    -- argv[a] is the argument before this limit's spec, op, amount, offset.
    local s = posint(argv[a + 1])
    if not (s and s <= S) then
      return bad_limit(h, i, 'spec must be an index into the specs')
    end
    local so = SPEC_SLOTS * (s - 1)
    local c, window = sp[so + S_CODE], sp[so + S_WINDOW]
    local op, amount, offset = argv[a + 2], posint(argv[a + 3]), argv[a + 4]
    if op < 'a' then
      -- No string.lower: a C call per rule of every call reading overrides.
      runs = runs + 1
      op = op == 'U' and 'u' or op == 'K' and 'k' or op == 'V' and 'v' or op == 'G' and 'g'
        or op == 'F' and 'f' or op == 'R' and 'r' or op == 'N' and 'n' or op
    end
    local after = op == 'g' or op == 'f' or op == 'r' or op == 'n'
    local tat = c == 'tb' or c == 'gc'
    if op ~= 'u' and op ~= 'k' and op ~= 'v' and not after then
      return bad_limit(h, i, 'op must be u, v, k, g, f, r or n')
    elseif not (amount and amount * window < MAX_EXACT) then
      if amount then
        return bad_limit(h, i, 'amount times window is too large')
      end
      return bad_limit(h, i, 'amount must be a positive integer')
    elseif after ~= charge then
      return bad_limit(h, i, 'a shape is either u, v and k or only g, f, r and n')
    elseif (op == 'g' or op == 'f') and (c == 'sl' or c == 'cc') then
      return bad_limit(h, i, op .. ' is impossible on ' .. c)
    elseif (op == 'r' or op == 'n') and c ~= 'cc' then
      return bad_limit(h, i, op .. ' applies to cc only')
    elseif op == 'v' and not tat then
      return bad_limit(h, i, 'v applies to tb and gc only')
    end
    if c == 'cc' then
      -- The slot id: kept as its text (a member), never made a number.
      if amount ~= 1 and op ~= 'u' then
        return bad_limit(h, i, 'cc takes amount 1 (u: 1 and the streams held outside the store)')
      elseif #offset > SLOT_ID_MAX or not string.find(offset, '^%d+$') or (offset == '0' and op ~= 'k') then
        return bad_limit(h, i, 'a cc slot id must be 1 to ' .. SLOT_ID_MAX .. ' digits, not 0')
      end
    elseif op == 'f' and tat then
      -- The mark: kept as its text, read by refund.lua.
      local born, count = string.match(offset, '^(%d+):(%d+)$')
      if not (born and num(born) < MAX_EXACT and num(count) < COUNT) then
        return bad_limit(h, i, 'a tb or gc refund takes its mark, born:count')
      end
    elseif offset == '0' then
      offset = 0
    else
      offset = num(offset)
      if offset == nil or not (offset >= 0 and offset < window) or offset % 1 ~= 0 then
        return bad_limit(h, i, 'offset must be an integer from 0 to window - 1')
      elseif offset ~= 0 and c ~= 'fw' then
        return bad_limit(h, i, 'offset applies to fw only')
      end
    end
    local o = LIMIT_SLOTS * n
    lq[o + L_SPEC], lq[o + L_OP], lq[o + L_AMOUNT], lq[o + L_OFFSET] = s, op, amount, offset
    n = n + 1
    if c == 'sw' then
      nk = nk + 2
      has_strings = true
    else
      nk = nk + 1
      if c == 'fw' then
        has_strings = true
      else
        -- tb and gc are read by MGET; sl and cc read their sorted sets.
        needs_clock = true
        has_strings = has_strings or (c ~= 'sl' and c ~= 'cc')
      end
    end
    a = a + 4
  end
  if runs > 0 and o1 >= 'a' then
    return bad('shape ' .. h .. ': reading overrides, its first limit starts a rule')
  end
  -- The override keys, first, read by the MGET.
  hs[at + H_KEYS], hs[at + H_RUNS], has_strings = nk + runs, runs, has_strings or runs > 0
  a = a + 1
end
local D = posint(argv[a])
if D == nil or D > MAX_DECISIONS then
  return bad('the decision count must be an integer from 1 to ' .. MAX_DECISIONS)
end
a = a + 1
if a + D - 1 ~= nargs then
  return bad('expected ' .. (a + D - 1) .. ' arguments for these decisions')
end
-- keys_of: the keys a shape index's text takes, filled with shape.
local keys_needed, keys_of, first = 0, {}, a
for d = first, first + D - 1 do
  local text = argv[d]
  local nk = keys_of[text]
  if nk == nil then
    local h = posint(text)
    if not (h and h <= H) then
      return bad('decision ' .. (d - first + 1) .. ': shape must be an index into the shapes')
    end
    shape[text], nk = h, hs[SHAPE_SLOTS * (h - 1) + H_KEYS]
    keys_of[text] = nk
  end
  keys_needed = keys_needed + nk
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
-- No MGET (got stays false) when only sliding_logs are decided.
local got = false
if has_strings then
  local nk = #keys
  if nk <= MGET_CHUNK then
    got = call('MGET', unpack(keys))
  else
    got = {}
    for from = 1, nk, MGET_CHUNK do
      local last = from + MGET_CHUNK - 1
      if last > nk then
        last = nk
      end
      local part = call('MGET', unpack(keys, from, last))
      for i = from, last do
        got[i] = part[i - from + 1]
      end
    end
  end
end

local reply = {}
-- A decision's queued writes (wq): key, value, PX, and how: false for
-- SET ... PX, true to raise a count held by INCRBY and check its TTL, 'r'
-- to raise it without (value: what the batch has added to it; PX, as the
-- text Redis is sent: what to give it if it has no TTL; see TTL_CHECK);
-- for sl the clock
-- t, the value and PX being its amount and window (see
-- sliding_log_write.lua). nw: the slots used.
local wq = { false, false, false, false }
-- The batch's string keys, in val: what sw and fw added to the count a key
-- held (or a new count), or a tb or gc state, as the batch's later
-- decisions read it. A key's first write in the call goes to Redis at once
-- (write and raise below): no table of it to fill and walk again. A key
-- written again in the same call (one client twice in a batch) is written
-- once more, at the end: in again, its PX (a state's newest); in wrote,
-- what was already written of a count (the end raises it by the rest).
local val, again, wrote = {}, {}, {}
-- Whether a refund lowered a count in this call: a sliding_window then
-- reads its previous window's count with what the call took off it (a
-- refund is the only write a previous window's key can get).
local refunded = false
-- A count held that INCRBY refused, not an integer as Redis reads one
-- ('5.5', '007'): what Lua read it as, plus add, replaces it, with the
-- TTL this script gives its own (px: its text).
local function replace(key, add, px)
  call('SET', key, fmt('%d', (num(call('GET', key)) or 0) + add), 'PX', px)
end
-- The usual decision: a client's one sliding_window limit used (the first
-- shape of one limit, op u). Its spec is read once per call into these
-- locals, and an admission is decided and queued in place (see
-- lone_window.lua); a denial, and every other decision, takes the general
-- path below.
local lone, lone_limit, lone_window, lone_amount, lone_rest, lone_ttl, lone_px, lone_text = 0
for h = 1, H do
  local at = SHAPE_SLOTS * (h - 1)
  local x = hs[at + H_FIRST]
  local o = SPEC_SLOTS * (lq[x + L_SPEC] - 1)
  if hs[at + H_LIMITS] == 1 and lq[x + L_OP] == 'u' and sp[o + S_CODE] == 'sw' then
    lone, lone_limit, lone_window, lone_amount = h, sp[o + S_LIMIT], sp[o + S_WINDOW], lq[x + L_AMOUNT]
    lone_rest, lone_ttl, lone_px = lone_window - sp[o + S_P1], sp[o + S_P2], sp[o + S_P3]
    lone_text = lone_amount == 1 and '1' or fmt('%d', lone_amount)
    break
  end
end
-- ovs: each override key met in the call, read (see override.lua).
local k, r, ovs = 1, 0, false
for d = first, first + D - 1 do
  local h = shape[argv[d]]
  local at = SHAPE_SLOTS * (h - 1)
  -- ov: false, or the decision's overrides per limit (see override.lua);
  -- state: theirs (the @overrides line); nr: its override keys.
  local decided, ov, state, nr = false, false, 0, hs[at + H_RUNS]
  if nr > 0 then
    for i = k, k + nr - 1 do
      ov = ov or got[i]
    end
    if ov then
      --@include override.lua
    end
    k = k + nr
  end
  if h == lone and not ov then
    --@include lone_window.lua
  end
  if not decided then
    local x, nw, all, charge, failed = hs[at + H_FIRST], 0, true, hs[at + H_CHARGE], false
    local k0, r0 = k, r
    for li = 1, hs[at + H_LIMITS] do
      local s, op, amount, offset = lq[x + L_SPEC], lq[x + L_OP], lq[x + L_AMOUNT], lq[x + L_OFFSET]
      x = x + LIMIT_SLOTS
      local o = SPEC_SLOTS * (s - 1)
      local c, limit, window, burst = sp[o + S_CODE], sp[o + S_LIMIT], sp[o + S_WINDOW], sp[o + S_BURST]
      local p1, p2, p3, p4 = sp[o + S_P1], sp[o + S_P2], sp[o + S_P3], sp[o + S_P4]
      local e = ov and ov[li]
      if e then
        -- The override's limit (and what follows from it), or a block.
        limit, burst, p1, p2, p3, p4 = e[1], e[2], e[3], e[4], e[5], e[6]
      end
      local allowed, remaining, reset, retry
      if limit == 0 then
        -- Blocked (e[2]: the block's time left): refused, nothing of the
        -- decision written.
        allowed, remaining, reset, retry = false, 0, e[2], e[2]
        k = k + (c == 'sw' and 2 or 1)
      elseif op == 'f' then
        --@include refund.lua
        k = k + (c == 'sw' and 2 or 1)
      elseif c == 'sw' then
        --@include sliding_window.lua
        k = k + 2
      else
        if c == 'fw' then
          --@include fixed_window.lua
        elseif c == 'sl' then
          --@include sliding_log.lua
          if failed then
            break
          end
        elseif c == 'cc' then
          --@include concurrency.lua
          if failed then
            break
          end
        else
          --@include tat.lua
        end
        k = k + 1
      end
      all = all and allowed
      reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = allowed and 1 or 0, remaining, reset, retry
      r = r + REPLY_SLOTS
    end
    if failed then
      -- Nothing of it is written (but a reset it applied); its values: the
      -- error's text, then zeros; no override state.
      k, r = k0 + hs[at + H_KEYS] - nr, r0 + REPLY_SLOTS * hs[at + H_LIMITS]
      reply[r0 + 1] = string.sub(failed, 1, ERROR_TEXT)
      for i = r0 + 2, r do
        reply[i] = 0
      end
    elseif all or charge then
      for w = 0, nw - WRITE_SLOTS, WRITE_SLOTS do
        local key, how = wq[w + W_KEY], wq[w + W_HOW]
        if how == false or how == true or how == 'r' then
          local v, ttl, before = wq[w + W_VALUE], wq[w + W_PX], val[key]
          val[key] = v
          if before ~= nil then
            -- Written before in this call: once more at the end.
            again[key] = ttl
            if kind(v) == 'number' and wrote[key] == nil then
              wrote[key] = before
            end
          elseif how then
            -- A count held, raised; its TTL checked if the raise passes a
            -- multiple of TTL_CHECK (how == true; the algorithm decided).
            if num(try('INCRBY', key, v == 1 and '1' or fmt('%d', v))) == nil then
              replace(key, v, ttl)
            elseif how == true and call('PTTL', key) == -1 then
              call('PEXPIRE', key, ttl)
            end
          else
            call('SET', key, kind(v) == 'number' and fmt('%d', v) or v, 'PX', ttl)
          end
        elseif how == 'z' then
          --@include concurrency_write.lua
        else
          --@include sliding_log_write.lua
        end
      end
    end
    if ov and not failed then
      -- The state in the first allowed; each limit's limit as decided,
      -- after the values.
      reply[r0 + 1] = reply[r0 + 1] + 2 * state
      x = hs[at + H_FIRST]
      for li = 1, hs[at + H_LIMITS] do
        local e = ov[li]
        reply[r + li] = e and e[1] or sp[SPEC_SLOTS * (lq[x + L_SPEC] - 1) + S_LIMIT]
        x = x + LIMIT_SLOTS
      end
      r = r + hs[at + H_LIMITS]
    end
  end
end
-- The keys written more than once: a state set to its newest value, a
-- count raised by the rest of what the batch added (it holds an integer
-- since its first write), its TTL checked if the call's raises together
-- carried it past a multiple of TTL_CHECK (held: what it held before the
-- call, or 0 if the call created it). Any order: the call is atomic.
for key, px in pairs(again) do
  local v = val[key]
  if kind(v) ~= 'number' then
    call('SET', key, v, 'PX', px)
  else
    local w = wrote[key]
    if v > w then
      local held = call('INCRBY', key, fmt('%d', v - w)) - v
      if held % TTL_CHECK + v >= TTL_CHECK and call('PTTL', key) == -1 then
        call('PEXPIRE', key, px)
      end
    elseif v < w then
      call('INCRBY', key, fmt('%d', v - w)) -- refunds: lowered, TTL kept
    end
  end
end
return reply
