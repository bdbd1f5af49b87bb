-- sliding_log: a sorted set of ADMITTED requests only (score = ms), trimmed
-- to the window (now - window, now]. Exact, and the only algorithm with an
-- exact retry_after for every request. Members are "<ms>:<n>", n counting the
-- entries already at that ms, so they are unique even within one millisecond.

local SLIDING_LOG_MAX = 10000 -- keeps one call's work and one key's memory bounded

local function sliding_log(k, now, limit, window, _, cost)
  local key = KEYS[k]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
  local count = redis.call('ZCARD', key)
  local newest = nil -- the latest admission still in the window
  if count > 0 then
    newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  end
  if count + cost > limit then
    local retry = -1
    if cost <= limit then
      -- The (count + cost - limit)-th oldest entry must leave the window first.
      local rank = count + cost - limit - 1
      local entry = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')
      retry = tonumber(entry[2]) + window - now
    end
    local reset = 0
    if newest then
      reset = newest + window - now
    end
    local left = limit - count
    if left < 0 then
      left = 0
    end
    return false, left, reset, retry, nil
  end
  -- After this request, the latest entry is now (or later, if the clock went back).
  if newest == nil or newest < now then
    newest = now
  end
  local ttl = newest + window - now
  return true, limit - count - cost, ttl, 0, function()
    local seq = redis.call('ZCOUNT', key, now, now)
    local args = {}
    for i = 0, cost - 1 do
      args[2 * i + 1] = now
      args[2 * i + 2] = fmt('%d:%d', now, seq + i)
    end
    redis.call('ZADD', key, unpack(args))
    redis.call('PEXPIRE', key, ttl)
  end
end
