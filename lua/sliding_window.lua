-- sliding_window: estimate = previous * (1 - f) + current, f = elapsed / window.
-- KEYS: the current and the previous window's counters; the caller puts the
-- window index in their names and passes its clock. Compared in integers,
-- multiplied through by window: previous * (window - elapsed) + current * window.
-- A charge may take the current count past the limit: it weighs on the
-- estimate for two windows at most.

-- The first ms (from now) at which `cost` fits, given the counts.
local function sliding_retry(cur, prev, cost, limit, window, elapsed)
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

local function sliding_window(cur_key, prev_key, op, amount, now, limit, window, writes)
  local counts = redis.call('MGET', cur_key, prev_key)
  local cur = tonumber(counts[1]) or 0
  local prev = tonumber(counts[2]) or 0
  local elapsed = now % window
  local weighted_prev = prev * (window - elapsed)
  local full = limit * window
  -- This key is the next window's "previous": keep it until that one ends.
  local keep = 2 * window - elapsed
  if op == 'g' then
    cur = cur + amount
    writes[#writes + 1] = { 'SET', cur_key, cur, 'PX', keep }
    local used = weighted_prev + cur * window
    if used + window <= full then
      return true, idiv(full - used, window), keep, 0
    end
    return false, floor0(idiv(full - used, window)), keep, sliding_retry(cur, prev, 1, limit, window, elapsed)
  end
  local used = weighted_prev + cur * window
  if used + amount * window <= full then
    local remaining = idiv(full - used, window)
    if op == 'u' then
      writes[#writes + 1] = { 'SET', cur_key, cur + amount, 'PX', keep }
      return true, remaining - amount, keep, 0
    end
    return true, remaining, (cur > 0 and keep) or (prev > 0 and window - elapsed) or 0, 0
  end
  local reset = 0
  if cur > 0 then
    reset = keep
  elseif prev > 0 then
    reset = window - elapsed
  end
  local remaining = floor0(idiv(full - used, window))
  if amount > limit then
    return false, remaining, reset, -1
  end
  return false, remaining, reset, sliding_retry(cur, prev, amount, limit, window, elapsed)
end
