-- sliding_window: estimate = previous * (1 - f) + current, f = elapsed / window.
-- KEYS: the current and the previous window's counters; the caller puts the
-- window index in their names and passes its clock. Compared in integers,
-- multiplied through by window: previous * (window - elapsed) + current * window.
-- (A fragment of the driver's loop: reads k, now, limit, window, cost; sets
-- allowed, remaining, reset, retry; queues its writes.)
local cur_key = KEYS[k]
local counts = redis.call('MGET', cur_key, KEYS[k + 1])
local cur = tonumber(counts[1]) or 0
local prev = tonumber(counts[2]) or 0
local elapsed = now % window
local weighted_prev = prev * (window - elapsed)
local full = limit * window
local used = weighted_prev + (cur + cost) * window
if used <= full then
  allowed = true
  remaining = idiv(full - used, window)
  -- This key is the next window's "previous": keep it until that one ends.
  reset = 2 * window - elapsed
  writes[#writes + 1] = { 'SET', cur_key, cur + cost, 'PX', reset }
else
  allowed = false
  remaining = idiv(full - weighted_prev - cur * window, window)
  if remaining < 0 then
    remaining = 0
  end
  if cur > 0 then
    reset = 2 * window - elapsed
  elseif prev > 0 then
    reset = window - elapsed
  else
    reset = 0
  end
  -- retry: the first instant the estimate leaves room for cost.
  if cost > limit then
    retry = -1
  else
    retry = nil
    local room = (limit - cur - cost) * window
    if room >= 0 and prev > 0 then
      local at = window - idiv(room, prev)
      if at < window then
        retry = at - elapsed
      end
    end
    if retry == nil then
      -- Next window: the current count becomes the previous one.
      local at = 0
      if cur > 0 then
        at = window - idiv((limit - cost) * window, cur)
        if at < 0 then
          at = 0
        end
      end
      if at < window then
        retry = window - elapsed + at
      else
        retry = 2 * window - elapsed
      end
    end
  end
end
