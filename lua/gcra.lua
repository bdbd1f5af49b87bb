-- gcra: the generic cell rate algorithm (leaky bucket, counter form). One key
-- holds the theoretical arrival time (TAT). Time is counted in units of
-- 1/limit ms, so one request's emission interval is exactly `window` units;
-- burst = requests allowed back to back (tolerance = burst intervals).
-- State: "<ms>:<remainder in units>" = TAT; absent or past = idle.

local function gcra(k, now, limit, window, burst, cost)
  local key = KEYS[k]
  local ahead = 0 -- (TAT - now) in units, never negative
  local state = redis.call('GET', key)
  if state then
    local ms, rem = string.match(state, '^(%d+):(%d+)$')
    if ms then
      ahead = (tonumber(ms) - now) * limit + tonumber(rem)
      if ahead < 0 then
        ahead = 0
      end
    end
  end
  local tolerance = burst * window
  local after = ahead + cost * window
  if after > tolerance then
    local retry = cdiv(after - tolerance, limit)
    if cost > burst then
      retry = -1
    end
    local left = 0
    if tolerance > ahead then
      left = idiv(tolerance - ahead, window)
    end
    return false, left, cdiv(ahead, limit), retry, nil
  end
  local idle_in = cdiv(after, limit)
  return true, idiv(tolerance - after, window), idle_in, 0, function()
    local ms = idiv(after, limit)
    redis.call('SET', key, fmt('%d:%d', now + ms, after - ms * limit), 'PX', idle_in)
  end
end
