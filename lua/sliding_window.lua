-- sliding_window: estimate = previous * (1 - f) + current, f = elapsed / window.
-- KEYS: the current and the previous window's counters; the caller puts the
-- window index in their names and passes its clock. Compared in integers,
-- multiplied through by window: previous * (window - elapsed) + current * window.
-- A count past the limit (a debt) weighs on the next window as "previous";
-- after two windows it is gone with its key.
-- (A fragment of the driver's loop: reads k, limit, window, op, amount and
-- the spec's elapsed and TTL, p1 and p2, and that TTL as PX text, p3,
-- computed once per call;
-- sets allowed, remaining, reset, retry; queues its writes.)
-- The previous window's key is written in this call by a refund only
-- (every other decision in it has the same now, so the same window).
local key = keys[k]
local held = num(got[k]) -- nil when absent
local base = held or 0
local cur = base + (val[key] or 0)
local prev = num(got[k + 1]) or 0
if refunded then
  prev = prev + (val[keys[k + 1]] or 0)
end
local elapsed, ttl = p1, p2
-- A count held is raised by INCRBY, its TTL checked if the raise passes a
-- multiple of TTL_CHECK (see the driver): true, else 'r'; a new one is SET.
local raise = held ~= nil and (held % TTL_CHECK + amount >= TTL_CHECK or 'r')
if op == 'g' then
  cur = cur + amount
  if cur > TOP then
    cur = TOP
  end
  wq[nw + W_KEY], wq[nw + W_VALUE], wq[nw + W_PX], wq[nw + W_HOW] = key, cur - base, p3, raise
  nw = nw + WRITE_SLOTS
  amount = 1 -- then reported as a check of one unit
end
-- room: what the estimate leaves, x window. Exact whenever it is >= 0;
-- when negative only its sign is used.
local room = limit * window - prev * (window - elapsed) - cur * window
if room >= amount * window then
  allowed, retry = true, 0
  if op == 'u' then
    cur = cur + amount
    room = room - amount * window
    wq[nw + W_KEY], wq[nw + W_VALUE], wq[nw + W_PX], wq[nw + W_HOW] = key, cur - base, p3, raise
    nw = nw + WRITE_SLOTS
  end
else
  allowed = false
  if amount > limit then
    retry = -1
  else
    -- This window, once previous's weight has fallen enough.
    retry = nil
    local left = (limit - cur - amount) * window
    if left >= 0 and prev > 0 then
      local at = window - floor(left / prev)
      if at < window then
        retry = at - elapsed
      end
    end
    if retry == nil then
      -- Next window: the current count becomes the previous one.
      local at = 0
      if cur > 0 then
        at = window - floor(((limit - amount) * window) / cur)
        if at < 0 then
          at = 0
        end
      end
      if at < window then
        retry = window - elapsed + at
      else
        retry = ttl
      end
      if retry > TOP then
        retry = TOP
      end
    end
  end
end
remaining = 0
if room > 0 then
  remaining = floor(room / window)
end
if cur > 0 then
  reset = ttl
elseif prev > 0 then
  reset = window - elapsed
else
  reset = 0
end
