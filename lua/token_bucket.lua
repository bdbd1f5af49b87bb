-- token_bucket: lazy refill on read, tokens = min(capacity, tokens + elapsed * rate).
-- capacity = burst, rate = limit / window. Tokens are kept in units of
-- 1/window token, so the refill is exactly `limit` units per millisecond.
-- State: "<tokens in units>:<ms of last update>"; absent = a full bucket.
-- (A fragment of the driver's loop.)
local key = KEYS[k]
local capacity = burst * window
local tokens = capacity
local state = redis.call('GET', key)
if state then
  local units, last = string.match(state, '^(%d+):(%d+)$')
  if units then
    local elapsed = now - tonumber(last)
    if elapsed < 0 then
      elapsed = 0
    end
    tokens = tonumber(units) + elapsed * limit
    if tokens > capacity then
      tokens = capacity
    end
  end
end
local need = cost * window
if tokens >= need then
  allowed = true
  local left = tokens - need
  remaining = idiv(left, window)
  -- Once full again the key is the same as absent: expire it then.
  reset = cdiv(capacity - left, limit)
  writes[#writes + 1] = { 'SET', key, string.format('%d:%d', left, now), 'PX', reset }
else
  allowed = false
  remaining = idiv(tokens, window)
  reset = cdiv(capacity - tokens, limit)
  if cost > burst then
    retry = -1
  else
    retry = cdiv(need - tokens, limit)
  end
end
