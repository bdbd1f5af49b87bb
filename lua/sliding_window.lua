-- sliding_window: estimate = previous * (1 - f) + current, f = elapsed / window.
-- KEYS: the current and the previous window's counters; the caller puts the
-- window index in their names and passes its clock. Compared in integers,
-- multiplied through by window: previous * (window - elapsed) + current * window.

-- ms from elapsed until a request of cost fits; -1 if it never can.
local function sliding_window_retry(prev, cur, cost, limit, window, elapsed)
  if cost > limit then
    return -1
  end
  local room = (limit - cur - cost) * window
  if room >= 0 and prev > 0 then
    local at = window - idiv(room, prev)
    if at < window then
      return at - elapsed
    end
  end
  -- Next window: the current count becomes the previous one.
  local at = 0
  if cur > 0 then
    at = window - idiv((limit - cost) * window, cur)
    if at < 0 then
      at = 0
    end
  end
  if at < window then
    return window - elapsed + at
  end
  return 2 * window - elapsed
end

local function sliding_window(k, now, limit, window, _, cost)
  local cur_key = KEYS[k]
  local counts = redis.call('MGET', cur_key, KEYS[k + 1])
  local cur = tonumber(counts[1]) or 0
  local prev = tonumber(counts[2]) or 0
  local elapsed = now % window
  local weighted_prev = prev * (window - elapsed)
  local full = limit * window
  local used = weighted_prev + (cur + cost) * window
  if used > full then
    local left = idiv(full - weighted_prev - cur * window, window)
    if left < 0 then
      left = 0
    end
    local reset = 0
    if cur > 0 then
      reset = 2 * window - elapsed
    elseif prev > 0 then
      reset = window - elapsed
    end
    return false, left, reset, sliding_window_retry(prev, cur, cost, limit, window, elapsed), nil
  end
  -- This key is the next window's "previous": keep it until that one ends.
  local ttl = 2 * window - elapsed
  return true, idiv(full - used, window), ttl, 0, function()
    redis.call('INCRBY', cur_key, cost)
    redis.call('PEXPIRE', cur_key, ttl)
  end
end
