-- sliding_log: a sorted set of ADMITTED requests only (score = ms), trimmed
-- to the window (now - window, now]. Exact, and the only algorithm with an
-- exact retry_after for every request. Members are "<ms>:<n>", n counting the
-- entries already at that ms, so they are unique even within one millisecond.
-- (A fragment of the driver's loop.)
local key = KEYS[k]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local count = redis.call('ZCARD', key)
local newest = nil -- the latest admission still in the window
if count > 0 then
  newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
end
if count + cost <= limit then
  allowed = true
  remaining = limit - count - cost
  -- After this request, the latest entry is now (or later, if the clock went back).
  if newest == nil or newest < now then
    newest = now
  end
  reset = newest + window - now
  local seq = redis.call('ZCOUNT', key, now, now)
  local zadd = { 'ZADD', key }
  for i = 0, cost - 1 do
    zadd[2 * i + 3] = now
    zadd[2 * i + 4] = string.format('%d:%d', now, seq + i)
  end
  writes[#writes + 1] = zadd
  writes[#writes + 1] = { 'PEXPIRE', key, reset }
else
  allowed = false
  remaining = limit - count
  if remaining < 0 then
    remaining = 0
  end
  reset = 0
  if newest then
    reset = newest + window - now
  end
  retry = -1
  if cost <= limit then
    -- The (count + cost - limit)-th oldest entry must leave the window first.
    local rank = count + cost - limit - 1
    retry = tonumber(redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')[2]) + window - now
  end
end
