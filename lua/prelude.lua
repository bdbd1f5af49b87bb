-- ratelimit decision script: prelude (shared helpers).
-- build.rs assembles it with the clock, the algorithms and the driver into
-- ONE script, one SHA-1 to EVALSHA. Redis runs the whole text on every call:
-- the helpers and one function per algorithm are made once per call and
-- used for every decision of the batch.
--
-- All state is kept in integers (Lua numbers are doubles: exact below 2^53),
-- so every retry_after is exact to the millisecond.

local MAX_EXACT = 9007199254740992 -- 2^53
local floor = math.floor

-- floor(a / b) for integers a, b > 0, corrected for double rounding.
local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- ceil(a / b) for integers, b > 0.
local function cdiv(a, b)
  return -idiv(-a, b)
end

-- A positive integer argument below 2^53, or nil. Rejects nan (it fails
-- every comparison), inf and fractions.
local function posint(s)
  local x = tonumber(s)
  if x and x > 0 and x < MAX_EXACT and x % 1 == 0 then
    return x
  end
  return nil
end

-- max(x, 0)
local function floor0(x)
  if x < 0 then
    return 0
  end
  return x
end
