-- TEST ONLY, never shipped: the clock is the last argument. Swapping this
-- file in for clock.lua changes the script text and therefore its SHA-1, so
-- a production EVALSHA can never reach this clock by accident.
local CLOCK_ARGS = 1
local function clock_ms()
  return num(ARGV[#ARGV])
end
