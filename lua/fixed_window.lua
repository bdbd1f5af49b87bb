-- fixed_window: one counter per window, the window index in its name (from
-- the caller's clock). The expiry is set only when the key has none, so it
-- is never pushed out and every window closes.
-- (A fragment of the driver's loop.)
local key = KEYS[k]
local count = tonumber(redis.call('GET', key)) or 0
reset = window - now % window
if count + cost <= limit then
  allowed = true
  remaining = limit - count - cost
  writes[#writes + 1] = { 'INCRBY', key, cost }
  writes[#writes + 1] = { 'PEXPIRE', key, reset, 'NX' }
else
  allowed = false
  remaining = limit - count
  if remaining < 0 then
    remaining = 0
  end
  if cost > limit then
    retry = -1
  else
    retry = reset
  end
end
