-- fixed_window: one counter per window, the window index in its name (from
-- the caller's clock). The expiry is set only when the key has none, so it
-- is never pushed out and every window closes.

local function fixed_window(k, now, limit, window, _, cost)
  local key = KEYS[k]
  local count = tonumber(redis.call('GET', key)) or 0
  local ends_in = window - now % window
  if count + cost > limit then
    local retry = ends_in
    if cost > limit then
      retry = -1
    end
    local left = limit - count
    if left < 0 then
      left = 0
    end
    return false, left, ends_in, retry, nil
  end
  return true, limit - count - cost, ends_in, 0, function()
    redis.call('INCRBY', key, cost)
    redis.call('PEXPIRE', key, ends_in, 'NX')
  end
end
