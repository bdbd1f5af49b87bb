-- gcra: the generic cell rate algorithm (leaky bucket, counter form). One key
-- holds the theoretical arrival time (TAT). Time is counted in units of
-- 1/limit ms, so one request's emission interval is exactly `window` units;
-- burst = requests allowed back to back (tolerance = burst intervals).
-- State: "<ms>:<remainder in units>" = TAT; absent or past = idle.
-- (A fragment of the driver's loop.)
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
if after <= tolerance then
  allowed = true
  remaining = idiv(tolerance - after, window)
  reset = cdiv(after, limit)
  local ms = idiv(after, limit)
  writes[#writes + 1] = { 'SET', key, string.format('%d:%d', now + ms, after - ms * limit), 'PX', reset }
else
  allowed = false
  remaining = 0
  if tolerance > ahead then
    remaining = idiv(tolerance - ahead, window)
  end
  reset = cdiv(ahead, limit)
  if cost > burst then
    retry = -1
  else
    retry = cdiv(after - tolerance, limit)
  end
end
