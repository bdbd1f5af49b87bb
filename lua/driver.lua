-- Driver: decides every limit of ONE client in one atomic call, all or
-- nothing: if any limit denies, none of them consumes anything.
--
-- KEYS: per limit in order; sliding_window takes two (current, previous
--       window), every other algorithm one. All share one hash tag.
-- ARGV: now_ms (the caller's clock, for the windowed algorithms), n, then per
--       limit: algorithm (sw, fw, tb, sl, gc), limit, window_ms, burst, cost.
-- Reply: per limit: allowed (1/0), remaining, reset_ms, retry_after_ms
--       (0 when allowed, -1 when the cost can never fit).

local MAX_LIMITS = 64
local SLIDING_LOG_MAX = 10000 -- keeps one call's work and one key's memory bounded

local function bad(msg)
  return redis.error_reply('ERR ratelimit: ' .. msg)
end

local caller_now = tonumber(ARGV[1])
if caller_now == nil or caller_now ~= caller_now or caller_now < 0
    or caller_now >= MAX_EXACT or floor(caller_now) ~= caller_now then
  return bad('now must be a non-negative integer')
end
local n = posint(ARGV[2])
if n == nil or n > MAX_LIMITS then
  return bad('the limit count must be an integer from 1 to ' .. MAX_LIMITS)
end
if #ARGV ~= 2 + 5 * n + CLOCK_ARGS then
  return bad('expected ' .. (2 + 5 * n) .. ' arguments for ' .. n .. ' limits')
end

-- Validate everything before touching any key: p holds, per limit, the
-- limit, window, burst and cost as numbers.
local p = {}
local keys_needed = 0
local needs_clock = false
for i = 1, n do
  local base = 2 + (i - 1) * 5
  local code = ARGV[base + 1]
  local limit, window = posint(ARGV[base + 2]), posint(ARGV[base + 3])
  local burst, cost = posint(ARGV[base + 4]), posint(ARGV[base + 5])
  if code ~= 'sw' and code ~= 'fw' and code ~= 'tb' and code ~= 'sl' and code ~= 'gc' then
    return bad('limit ' .. i .. ': unknown algorithm')
  elseif limit == nil then
    return bad('limit ' .. i .. ': limit must be a positive integer')
  elseif window == nil then
    return bad('limit ' .. i .. ': window must be a positive integer of ms')
  elseif burst == nil then
    return bad('limit ' .. i .. ': burst must be a positive integer')
  elseif cost == nil then
    return bad('limit ' .. i .. ': cost must be a positive integer')
  elseif limit * window >= MAX_EXACT or burst * window >= MAX_EXACT or cost * window >= MAX_EXACT then
    return bad('limit ' .. i .. ': limit, burst or cost times window is too large')
  elseif code == 'sl' and limit > SLIDING_LOG_MAX then
    return bad('limit ' .. i .. ': sliding_log limit is at most ' .. SLIDING_LOG_MAX)
  end
  p[4 * i - 3], p[4 * i - 2], p[4 * i - 1], p[4 * i] = limit, window, burst, cost
  if code == 'sw' then
    keys_needed = keys_needed + 2
  else
    keys_needed = keys_needed + 1
    needs_clock = needs_clock or code ~= 'fw'
  end
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
local writes = {}
local all_allowed = true
local k = 1
for i = 1, n do
  local code = ARGV[2 + (i - 1) * 5 + 1]
  local limit, window, burst, cost = p[4 * i - 3], p[4 * i - 2], p[4 * i - 1], p[4 * i]
  local allowed, remaining, reset, retry = false, 0, 0, 0
  local now = script_now
  if code == 'sw' then
    now = caller_now
    --@include sliding_window.lua
    k = k + 2
  else
    if code == 'fw' then
      now = caller_now
      --@include fixed_window.lua
    elseif code == 'tb' then
      --@include token_bucket.lua
    elseif code == 'sl' then
      --@include sliding_log.lua
    else
      --@include gcra.lua
    end
    k = k + 1
  end
  if allowed then
    retry = 0
  else
    all_allowed = false
  end
  reply[4 * i - 3], reply[4 * i - 2], reply[4 * i - 1], reply[4 * i] = allowed and 1 or 0, remaining, reset, retry
end

if all_allowed then
  for i = 1, #writes do
    redis.call(unpack(writes[i]))
  end
end
return reply
