-- fixed_window: one counter per window, the window index in its name (from
-- the caller's clock, shifted by the limit's offset: the window works on
-- now + offset). Created with SET ... PX <ms to the window's end>, so the
-- TTL is exact and needs no PEXPIRE NX (Redis 7.0); raised by INCRBY,
-- which keeps it (a count someone else wrote without one gets one: see
-- TTL_CHECK in the driver).
-- (A fragment of the driver's loop.)
local key = keys[k]
local held = num(got[k]) -- nil when absent
local base = held or 0
local count = base + (val[key] or 0)
local elapsed, ttl = p1, p2 -- aligned: where now is, and the PX text (once per call)
if offset ~= 0 then
  if elapsed >= window - offset then
    elapsed = elapsed - (window - offset)
  else
    elapsed = elapsed + offset
  end
  ttl = fmt('%d', window - elapsed) -- the PX of its writes, as text
end
reset = window - elapsed
local raise = held ~= nil and (held % TTL_CHECK + amount >= TTL_CHECK or 'r') -- as sliding_window's
if op == 'g' then
  count = count + amount
  if count > TOP then
    count = TOP
  end
  wq[nw + W_KEY], wq[nw + W_VALUE], wq[nw + W_PX], wq[nw + W_HOW] = key, count - base, ttl, raise
  nw = nw + WRITE_SLOTS
  amount = 1 -- then reported as a check of one unit
end
if count + amount <= limit then
  allowed, retry = true, 0
  if op == 'u' then
    count = count + amount
    wq[nw + W_KEY], wq[nw + W_VALUE], wq[nw + W_PX], wq[nw + W_HOW] = key, count - base, ttl, raise
    nw = nw + WRITE_SLOTS
  end
else
  allowed = false
  if amount > limit then
    retry = -1
  else
    retry = reset
  end
end
remaining = 0
if count < limit then
  remaining = limit - count
end
