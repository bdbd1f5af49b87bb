-- ratelimit decision script: prelude (shared helpers).
-- Assembled with the clock, one file per algorithm and the driver into ONE
-- script, so there is one SHA-1 to EVALSHA.
--
-- All state is kept in integers (Lua numbers are doubles: exact below 2^53),
-- so every retry_after is exact to the millisecond.

local MAX_EXACT = 9007199254740992 -- 2^53
local floor = math.floor
local fmt = string.format

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

-- A positive integer argument below 2^53, or nil. Rejects nan, inf, fractions.
local function posint(s)
  local x = tonumber(s)
  if x == nil or x ~= x or x <= 0 or x >= MAX_EXACT or floor(x) ~= x then
    return nil
  end
  return x
end
