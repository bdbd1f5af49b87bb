-- Production clock: Redis server time in integer milliseconds, so every
-- proxy shares one clock for the algorithms that read it.
local CLOCK_ARGS = 0
local function clock_ms()
  local t = redis.call('TIME')
  return num(t[1]) * 1000 + floor(num(t[2]) / 1000)
end
