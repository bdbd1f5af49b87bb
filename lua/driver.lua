-- Driver: decides every limit of ONE client in one atomic call, all or
-- nothing: if any limit denies, none of them consumes anything.
--
-- KEYS: per limit in order; sliding_window takes two (current, previous
--       window), every other algorithm one. All share one hash tag.
-- ARGV: now_ms (the caller's clock, for the windowed algorithms), n, then per
--       limit: algorithm, limit, window_ms, burst, cost.
-- Reply: per limit: allowed (1/0), remaining, reset_ms, retry_after_ms
--       (0 when allowed, -1 when the cost can never fit).

-- code -> { decide, keys it takes, reads the script clock }
local ALGORITHMS = {
  sw = { sliding_window, 2, false },
  fw = { fixed_window, 1, false },
  tb = { token_bucket, 1, true },
  sl = { sliding_log, 1, true },
  gc = { gcra, 1, true },
}
local MAX_LIMITS = 64

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

-- Validate everything before touching any key.
local plan = {}
local keys_needed = 0
local needs_clock = false
for i = 1, n do
  local base = 2 + (i - 1) * 5
  local algo = ALGORITHMS[ARGV[base + 1]]
  if algo == nil then
    return bad('limit ' .. i .. ': unknown algorithm')
  end
  local limit, window = posint(ARGV[base + 2]), posint(ARGV[base + 3])
  local burst, cost = posint(ARGV[base + 4]), posint(ARGV[base + 5])
  if limit == nil then
    return bad('limit ' .. i .. ': limit must be a positive integer')
  elseif window == nil then
    return bad('limit ' .. i .. ': window must be a positive integer of ms')
  elseif burst == nil then
    return bad('limit ' .. i .. ': burst must be a positive integer')
  elseif cost == nil then
    return bad('limit ' .. i .. ': cost must be a positive integer')
  elseif limit * window >= MAX_EXACT or burst * window >= MAX_EXACT or cost * window >= MAX_EXACT then
    return bad('limit ' .. i .. ': limit, burst or cost times window is too large')
  elseif algo[1] == sliding_log and limit > SLIDING_LOG_MAX then
    return bad('limit ' .. i .. ': sliding_log limit is at most ' .. SLIDING_LOG_MAX)
  end
  plan[i] = { algo[1], keys_needed + 1, limit, window, burst, cost, algo[3] }
  keys_needed = keys_needed + algo[2]
  needs_clock = needs_clock or algo[3]
end
if #KEYS ~= keys_needed then
  return bad('expected ' .. keys_needed .. ' keys for these limits')
end

local script_now = 0
if needs_clock then
  script_now = clock_ms()
end

local reply = {}
local commits = {}
local all_allowed = true
for i = 1, n do
  local p = plan[i]
  local now = caller_now
  if p[7] then
    now = script_now
  end
  local allowed, remaining, reset, retry, commit = p[1](p[2], now, p[3], p[4], p[5], p[6])
  local at = 4 * (i - 1)
  reply[at + 1] = allowed and 1 or 0
  reply[at + 2] = remaining
  reply[at + 3] = reset
  reply[at + 4] = retry
  if allowed then
    commits[#commits + 1] = commit
  else
    all_allowed = false
  end
end

if all_allowed then
  for i = 1, #commits do
    commits[i]()
  end
end
return reply
