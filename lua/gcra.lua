-- gcra: the generic cell rate algorithm (leaky bucket, counter form). One key
-- holds the theoretical arrival time (TAT). Time is counted in units of
-- 1/limit ms, so one request's emission interval is exactly `window` units;
-- burst = requests allowed back to back (tolerance = burst intervals).
-- State: "<ms>:<remainder in units>" = TAT; absent or past = idle.
-- A charge may push the TAT past the tolerance (a debt), by one more
-- tolerance at most.
local function gcra(key, op, amount, now, limit, window, burst, writes)
  local ahead = 0 -- (TAT - now) in units, never negative
  local state = redis.call('GET', key)
  if state then
    local ms, rem = string.match(state, '^(%d+):(%d+)$')
    if ms then
      ahead = floor0((tonumber(ms) - now) * limit + tonumber(rem))
    end
  end
  local tolerance = burst * window
  local after = ahead + amount * window
  if op == 'g' then
    if after > 2 * tolerance then
      after = 2 * tolerance
    end
  end
  if op == 'g' or (op == 'u' and after <= tolerance) then
    local ms = idiv(after, limit)
    local reset = cdiv(after, limit)
    writes[#writes + 1] = { 'SET', key, string.format('%d:%d', now + ms, after - ms * limit), 'PX', reset }
    if op == 'u' then
      return true, idiv(tolerance - after, window), reset, 0
    end
    if after + window <= tolerance then
      return true, idiv(tolerance - after, window), reset, 0
    end
    return false, floor0(idiv(tolerance - after, window)), reset, cdiv(after + window - tolerance, limit)
  end
  local remaining = floor0(idiv(tolerance - ahead, window))
  local reset = cdiv(ahead, limit)
  if after <= tolerance then
    return true, remaining, reset, 0
  end
  if amount > burst then
    return false, remaining, reset, -1
  end
  return false, remaining, reset, cdiv(after - tolerance, limit)
end
