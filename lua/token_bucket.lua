-- token_bucket: lazy refill on read, tokens = min(capacity, tokens + elapsed * rate).
-- capacity = burst, rate = limit / window. Tokens are kept in units of
-- 1/window token, so the refill is exactly `limit` units per millisecond.
-- State: "<tokens in units>:<ms of last update>"; absent = a full bucket.

local function token_bucket(k, now, limit, window, burst, cost)
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
  if tokens < need then
    local retry = cdiv(need - tokens, limit)
    if cost > burst then
      retry = -1
    end
    return false, idiv(tokens, window), cdiv(capacity - tokens, limit), retry, nil
  end
  local left = tokens - need
  -- Once full again the key is the same as absent: expire it then.
  local full_in = cdiv(capacity - left, limit)
  return true, idiv(left, window), full_in, 0, function()
    redis.call('SET', key, fmt('%d:%d', left, now), 'PX', full_in)
  end
end
