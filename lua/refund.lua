-- op f: a reservation's unused part given back. Window counts (sw, fw): the
-- caller names the keys of the window the reservation went into (its
-- clock then, not now: filter/src/keys.rs), so the count falls as if the
-- request had cost what it did; never below 0, and a key gone with its
-- window gives nothing back (nothing it held counts any more). tb and gc:
-- the client's lead falls by amount x window units, never below a full
-- bucket. Never refused; reported as 1 0 0 0.
-- (A fragment of the driver's loop: the same locals as the algorithms'.)
local key = keys[k]
if c == 'sw' or c == 'fw' then
  local held = num(got[k])
  local base = held or 0
  local cur = base + (val[key] or 0)
  if cur > 0 then
    if amount > cur then
      amount = cur
    end
    -- Lowered by INCRBY, which keeps the key's TTL (PX only if replaced).
    wq[nw + W_KEY], wq[nw + W_VALUE], wq[nw + W_PX], wq[nw + W_HOW] = key, cur - amount - base, fmt('%d', window), 'r'
    nw = nw + WRITE_SLOTS
    refunded = true
  end
else
  local state = val[key] or got[k]
  local at, sq, sr = false, 0, 0
  if state then
    at, sq, sr = string.match(state, '^(%d+):(%d+):(%d+)$')
  end
  if at then
    local elapsed = store_now - num(at)
    if elapsed < 0 then
      elapsed = 0
    end
    -- The lead now (as tat.lua reads it), then less amount x window.
    local q, r = num(sq) - elapsed, num(sr)
    if q > 0 or (q == 0 and r > 0) then -- else a full bucket: nothing to give back
      if r >= limit then
        local w = floor(r / limit)
        q, r = q + w, r - w * limit
      end
      if q > p3 or (q == p3 and r > p4) then
        q, r = p3, p4 -- the debt cap, as tat.lua reads it
      end
      local x = amount * window
      local xq = floor(x / limit)
      x = x - xq * limit
      q, r = q - xq, r - x
      if r < 0 then
        q, r = q - 1, r + limit
      end
      if q < 0 then
        q, r = 0, 0
      end
      -- PX at least 1: a lead of 0 is a full bucket, as an absent key.
      local px = q + ((r > 0 or q == 0) and 1 or 0)
      wq[nw + W_KEY], wq[nw + W_VALUE], wq[nw + W_PX], wq[nw + W_HOW] = key, fmt('%d:%d:%d', store_now, q, r), fmt('%d', px), false
      nw = nw + WRITE_SLOTS
    end
  end
end
allowed, remaining, reset, retry = true, 0, 0, 0
