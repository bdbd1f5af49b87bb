-- sliding_log: a sorted set of ADMITTED requests only (score = ms), trimmed
-- to the window (now - window, now]. Exact, and the only algorithm with an
-- exact retry_after for every request. Members are "<ms>:<n>", n counting the
-- entries already at that ms, so they are unique even within one millisecond.
-- It cannot carry a debt: a charge is refused before anything runs.

-- Members added per ZADD: Redis's Lua caps unpack near 8000 values.
local ZADD_CHUNK = 1000

local function sliding_log(key, op, amount, now, limit, window, writes)
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local count = redis.call('ZCARD', key)
  local newest = nil -- the latest admission still in the window
  if count > 0 then
    newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  end
  local reset = 0
  if newest then
    reset = newest + window - now
  end
  if count + amount <= limit then
    if op == 'k' then
      return true, limit - count, reset, 0
    end
    -- After this request, the latest entry is now (or later, if the clock went back).
    if newest == nil or newest < now then
      newest = now
    end
    local seq = redis.call('ZCOUNT', key, now, now)
    local i = 0
    while i < amount do
      local zadd = { 'ZADD', key }
      local n = amount - i
      if n > ZADD_CHUNK then
        n = ZADD_CHUNK
      end
      for j = 0, n - 1 do
        zadd[2 * j + 3] = now
        zadd[2 * j + 4] = string.format('%d:%d', now, seq + i + j)
      end
      writes[#writes + 1] = zadd
      i = i + n
    end
    reset = newest + window - now
    writes[#writes + 1] = { 'PEXPIRE', key, reset }
    return true, limit - count - amount, reset, 0
  end
  local remaining = floor0(limit - count)
  if amount > limit then
    return false, remaining, reset, -1
  end
  -- The (count + amount - limit)-th oldest entry must leave the window first.
  local rank = count + amount - limit - 1
  local retry = tonumber(redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')[2]) + window - now
  return false, remaining, reset, retry
end
