-- token_bucket: lazy refill on read, tokens = min(capacity, tokens + elapsed * rate).
-- capacity = burst, rate = limit / window. Tokens are kept in units of
-- 1/window token, so the refill is exactly `limit` units per millisecond.
-- State: "<tokens in units>:<ms of last update>"; absent = a full bucket.
-- A charge may take the tokens below zero (a debt the refill repays),
-- down to -capacity at most: a client owes at most one full bucket.
local function token_bucket(key, op, amount, now, limit, window, burst, writes)
  local capacity = burst * window
  local tokens = capacity
  local state = redis.call('GET', key)
  if state then
    local units, last = string.match(state, '^(%-?%d+):(%d+)$')
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
  local need = amount * window
  if op == 'g' then
    local left = tokens - need
    if left < -capacity then
      left = -capacity
    end
    local reset = cdiv(capacity - left, limit)
    writes[#writes + 1] = { 'SET', key, string.format('%d:%d', left, now), 'PX', reset }
    if left >= window then
      return true, idiv(left, window), reset, 0
    end
    return false, floor0(idiv(left, window)), reset, cdiv(window - left, limit)
  end
  if tokens >= need then
    if op == 'u' then
      local left = tokens - need
      -- Once full again the key is the same as absent: expire it then.
      local reset = cdiv(capacity - left, limit)
      writes[#writes + 1] = { 'SET', key, string.format('%d:%d', left, now), 'PX', reset }
      return true, idiv(left, window), reset, 0
    end
    return true, idiv(tokens, window), cdiv(capacity - tokens, limit), 0
  end
  local remaining = floor0(idiv(tokens, window))
  local reset = cdiv(capacity - tokens, limit)
  if amount > burst then
    return false, remaining, reset, -1
  end
  return false, remaining, reset, cdiv(need - tokens, limit)
end
