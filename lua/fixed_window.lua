-- fixed_window: one counter per window, the window index in its name (from
-- the caller's clock, shifted by the client's offset when staggered). The
-- counter is written with its expiry at the window's end (SET ... PX), so
-- the expiry is never pushed out and a key never lives without one (no
-- PEXPIRE NX, which needs Redis 7). A charge may take it past the limit:
-- that debt ends with the window.
local function fixed_window(key, op, amount, t, limit, window, writes)
  local count = tonumber(redis.call('GET', key)) or 0
  local reset = window - t % window
  if op == 'g' then
    count = count + amount
    writes[#writes + 1] = { 'SET', key, count, 'PX', reset }
    local remaining = floor0(limit - count)
    if remaining >= 1 then
      return true, remaining, reset, 0
    end
    return false, 0, reset, reset
  end
  local remaining = floor0(limit - count)
  if count + amount <= limit then
    if op == 'u' then
      writes[#writes + 1] = { 'SET', key, count + amount, 'PX', reset }
      remaining = limit - count - amount
    end
    return true, remaining, reset, 0
  end
  if amount > limit then
    return false, remaining, reset, -1
  end
  return false, remaining, reset, reset
end
