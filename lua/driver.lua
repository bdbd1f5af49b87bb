-- Driver (protocol v2): decides a BATCH of decisions in order, each every
-- limit of ONE client, all or nothing: if any limit of a decision denies,
-- none of its limits consumes anything. Each decision sees the writes of
-- the decisions before it in the batch.
--
-- KEYS: per decision, per limit in order: sliding_window takes two (current,
--       previous window), every other algorithm one. A decision's keys share
--       its client's hash tag.
-- ARGV: now_ms (the caller's clock, for the windowed algorithms);
--       S, then S specs of 4: algorithm (sw, fw, tb, sl, gc), limit,
--       window_ms, burst;
--       D, then per decision: L, then L limits of 4: spec (1-based), op,
--       amount, offset.
--       op u (use): consume `amount` if the whole decision admits;
--       op k (check): allowed iff at least `amount` remain, writes nothing;
--       op g (charge): add `amount` whatever the limit (a debt), never
--       mixed with u or k in one decision, never on sliding_log.
--       offset: fixed_window only (0 for the others): its windows start
--       `offset` ms later for this client (0 <= offset < window).
-- Reply: per decision, per limit: allowed (1/0), remaining, reset_ms,
--       retry_after_ms (0 when allowed; exact; -1 when the amount can never
--       fit). For a charge, allowed = at least 1 unit remains after it, and
--       retry_after = when 1 unit will (the debt is repaid).
-- Bounds of every reply value (debts included): remaining <= limit (or
--       burst for tb, gc); reset and retry <= 2 * window (sw), window (fw,
--       sl), ceil(2 * burst * window / limit) (tb, gc).

local MAX_SPECS = 64
local MAX_DECISIONS = 256
local MAX_LIMITS = 64
local SLIDING_LOG_MAX = 10000 -- keeps one call's work and one key's memory bounded

local function bad(msg)
  return redis.error_reply('ERR ratelimit: ' .. msg)
end

--@include sliding_window.lua
--@include fixed_window.lua
--@include token_bucket.lua
--@include sliding_log.lua
--@include gcra.lua

local caller_now = tonumber(ARGV[1])
if caller_now == nil or caller_now ~= caller_now or caller_now < 0
    or caller_now >= MAX_EXACT or floor(caller_now) ~= caller_now then
  return bad('now must be a non-negative integer')
end
local S = posint(ARGV[2])
if S == nil or S > MAX_SPECS then
  return bad('the spec count must be an integer from 1 to ' .. MAX_SPECS)
end

-- The spec table, validated once for the whole batch.
local codes, limits, windows, bursts = {}, {}, {}, {}
for s = 1, S do
  local base = 2 + (s - 1) * 4
  local code = ARGV[base + 1]
  local limit, window, burst = posint(ARGV[base + 2]), posint(ARGV[base + 3]), posint(ARGV[base + 4])
  if code ~= 'sw' and code ~= 'fw' and code ~= 'tb' and code ~= 'sl' and code ~= 'gc' then
    return bad('spec ' .. s .. ': unknown algorithm')
  elseif limit == nil then
    return bad('spec ' .. s .. ': limit must be a positive integer')
  elseif window == nil then
    return bad('spec ' .. s .. ': window must be a positive integer of ms')
  elseif burst == nil then
    return bad('spec ' .. s .. ': burst must be a positive integer')
  elseif limit * window >= MAX_EXACT or burst * window >= MAX_EXACT then
    return bad('spec ' .. s .. ': limit or burst times window is too large')
  elseif code == 'sl' and limit > SLIDING_LOG_MAX then
    return bad('spec ' .. s .. ': sliding_log limit is at most ' .. SLIDING_LOG_MAX)
  end
  codes[s], limits[s], windows[s], bursts[s] = code, limit, window, burst
end

-- Validate every decision before touching any key.
local first = 3 + S * 4
local D = posint(ARGV[first])
if D == nil or D > MAX_DECISIONS then
  return bad('the decision count must be an integer from 1 to ' .. MAX_DECISIONS)
end
local pos = first + 1
local keys_needed = 0
local needs_clock = false
for d = 1, D do
  local L = posint(ARGV[pos])
  if L == nil or L > MAX_LIMITS then
    return bad('decision ' .. d .. ': the limit count must be an integer from 1 to ' .. MAX_LIMITS)
  end
  if pos + L * 4 > #ARGV then
    return bad('decision ' .. d .. ': missing arguments')
  end
  local charges, uses = false, false
  for i = 1, L do
    local b = pos + (i - 1) * 4
    local s, op, amount, offset = posint(ARGV[b + 1]), ARGV[b + 2], posint(ARGV[b + 3]), tonumber(ARGV[b + 4])
    local where = 'decision ' .. d .. ' limit ' .. i .. ': '
    if s == nil or s > S then
      return bad(where .. 'unknown spec')
    elseif op ~= 'u' and op ~= 'k' and op ~= 'g' then
      return bad(where .. 'op must be u, k or g')
    elseif amount == nil or amount * windows[s] >= MAX_EXACT then
      return bad(where .. 'amount must be a positive integer (times window below 2^53)')
    elseif offset == nil or offset < 0 or offset % 1 ~= 0 or offset >= windows[s]
        or (offset ~= 0 and codes[s] ~= 'fw') then
      return bad(where .. 'offset must be an integer from 0 to window - 1 (fixed_window only)')
    elseif op == 'g' and codes[s] == 'sl' then
      return bad(where .. 'sliding_log cannot carry a charge')
    end
    if op == 'g' then
      charges = true
    else
      uses = true
    end
    if codes[s] == 'sw' then
      keys_needed = keys_needed + 2
    else
      keys_needed = keys_needed + 1
      needs_clock = needs_clock or codes[s] ~= 'fw'
    end
  end
  if charges and uses then
    return bad('decision ' .. d .. ': a charge cannot be mixed with use or check')
  end
  pos = pos + 1 + L * 4
end
if #ARGV ~= pos - 1 + CLOCK_ARGS then
  return bad('expected ' .. (pos - 1) .. ' arguments for these decisions')
end
if #KEYS ~= keys_needed then
  return bad('expected ' .. keys_needed .. ' keys for these limits')
end

-- The windowed algorithms use the caller's clock (the window index is in
-- their keys); the others Redis TIME, read once.
local script_now = 0
if needs_clock then
  script_now = clock_ms()
end

local reply = {}
local r = 0
local k = 1
pos = first + 1
for _ = 1, D do
  local L = tonumber(ARGV[pos])
  local writes = {}
  local all_allowed = true
  local charge = false
  for i = 1, L do
    local b = pos + (i - 1) * 4
    local s, op, amount = tonumber(ARGV[b + 1]), ARGV[b + 2], tonumber(ARGV[b + 3])
    local code, limit, window, burst = codes[s], limits[s], windows[s], bursts[s]
    local allowed, remaining, reset, retry
    if code == 'sw' then
      allowed, remaining, reset, retry =
        sliding_window(KEYS[k], KEYS[k + 1], op, amount, caller_now, limit, window, writes)
      k = k + 2
    else
      if code == 'fw' then
        allowed, remaining, reset, retry =
          fixed_window(KEYS[k], op, amount, caller_now + tonumber(ARGV[b + 4]), limit, window, writes)
      elseif code == 'tb' then
        allowed, remaining, reset, retry = token_bucket(KEYS[k], op, amount, script_now, limit, window, burst, writes)
      elseif code == 'sl' then
        allowed, remaining, reset, retry = sliding_log(KEYS[k], op, amount, script_now, limit, window, writes)
      else
        allowed, remaining, reset, retry = gcra(KEYS[k], op, amount, script_now, limit, window, burst, writes)
      end
      k = k + 1
    end
    if op == 'g' then
      charge = true
    elseif not allowed then
      all_allowed = false
    end
    reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = allowed and 1 or 0, remaining, reset, retry
    r = r + 4
  end
  if all_allowed or charge then
    for w = 1, #writes do
      redis.call(unpack(writes[w]))
    end
  end
  pos = pos + 1 + L * 4
end
return reply
