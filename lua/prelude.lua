-- ratelimit decision script: prelude (shared helpers).
-- build.rs assembles it, as written, with the clock and the driver, into
-- whose loop it copies one file per algorithm: ONE script, one SHA-1 to
-- EVALSHA. Redis compiles it once but runs its whole body on every call, so
-- the script defines as little as it can (each function is a closure made
-- per call, and each call of one costs): no function or table per
-- algorithm, only these helpers.
--
-- All state is kept in integers (Lua numbers are doubles: exact below 2^53),
-- so every retry_after is exact to the millisecond. Where a sum could pass
-- 2^53 it is either only compared (rounding keeps the order against an exact
-- bound) or kept as a pair (whole ms, remainder). Numbers go to Redis
-- through string.format('%d'): Redis 7.2 before 7.2.5 turns 1e8 into '1e+08'.

local MAX_EXACT = 9007199254740992 -- 2^53
local TOP = MAX_EXACT - 1 -- the largest time or count the script keeps
local floor = math.floor
local fmt = string.format
local call = redis.call
-- try: an error is its reply instead of the end of the script
local try = redis.pcall
local argv, keys = ARGV, KEYS -- locals: faster than globals
local num, kind = tonumber, type

-- floor(a / b) is exact for integers |a| < 2^53, b > 0: the quotient of
-- two such doubles never rounds across an integer. Every division here
-- keeps to that.

-- A positive integer argument below 2^53, or nil. Rejects nan (it fails
-- every comparison), inf and fractions. '1', the usual count, index and
-- amount, is not parsed: tonumber (strtod) costs more than the rest of a
-- limit's checks.
local function posint(s)
  if s == '1' then
    return 1
  end
  local x = num(s)
  if x and x > 0 and x < MAX_EXACT and x % 1 == 0 then
    return x
  end
  return nil
end

-- A bucket's (token_bucket, gcra) tolerance burst x window in whole
-- intervals of limit: q, r = divmod(tolerance, limit); and its debt cap,
-- min(2 x tolerance, 2^53 - 1 ms) as c2, r2 (past 2^53 only compared;
-- 2 x tolerance < 2^54 units: at TOP ms its remainder is 0).
local function tolerance(burst, window, limit)
  local tol = burst * window
  local q = floor(tol / limit)
  local r = tol - q * limit
  local c2, r2 = 2 * q, 2 * r
  if r >= limit - r then
    c2, r2 = c2 + 1, r - (limit - r)
  end
  if c2 > TOP then
    c2, r2 = TOP, 0
  end
  return q, r, c2, r2
end
