-- op f: a reservation's unused part given back. Window counts (sw, fw): the
-- caller names the keys of the window the reservation went into (its
-- clock then, not now: filter/src/keys.rs), so the count falls as if the
-- request had cost what it did; never below 0, and a key gone with its
-- window gives nothing back (nothing it held counts any more). tb and gc:
-- the client's lead falls by amount x window units, but never below what it
-- would be had the request cost that much less from the start: its offset
-- is its reservation's mark (born:count, the v reply), and had the bucket
-- been full (lead 0) since, the lead now would be at most what was added
-- since (count now - the mark's), so it falls no lower than that; a bucket
-- born since (its key expired: it was full) gives nothing back. What a
-- refund gives back leaves the count too (whole units), so the reservations
-- taken after this one and refunded before it weigh only what they used:
-- refunds land in any order. Exact when the bucket was not full since.
-- Never refused; reported as 1 0 0 0.
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
  local at, sq, sr, sb, sc = false, 0, 0, 0, 0
  if state then
    at, sq, sr, sb, sc = string.match(state, '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
  end
  local mb, mc = string.match(offset, '^(%d+):(%d+)$')
  if at and num(sb) == num(mb) then
    local elapsed = store_now - num(at)
    if elapsed < 0 then
      elapsed = 0
    end
    -- The lead now (as tat.lua reads it), then less amount x window.
    local q, r = num(sq) - elapsed, num(sr)
    -- The floor: what was added since the reservation, in units; less
    -- than nothing (refunds of reservations taken before it) is nothing.
    local since = (num(sc) - num(mc)) % COUNT
    if since >= COUNT / 2 then
      since = 0
    end
    local w = since * window
    if (q > 0 or (q == 0 and r > 0)) and w < MAX_EXACT then -- else nothing to give back
      if r >= limit then
        local n = floor(r / limit)
        q, r = q + n, r - n * limit
      end
      if q > p3 or (q == p3 and r > p4) then
        q, r = p3, p4 -- the debt cap, as tat.lua reads it
      end
      local fq = floor(w / limit)
      local fr = w - fq * limit
      local x = amount * window
      local xq = floor(x / limit)
      x = x - xq * limit
      local nq, nr = q - xq, r - x
      if nr < 0 then
        nq, nr = nq - 1, nr + limit
      end
      if nq < fq or (nq == fq and nr < fr) then
        nq, nr = fq, fr -- and so never below 0
      end
      if nq < q or (nq == q and nr < r) then
        -- PX at least 1: a lead of 0 is a full bucket, as an absent key.
        local px = nq + ((nr > 0 or nq == 0) and 1 or 0)
        -- Given back, in whole units (at most amount): out of the count.
        local back = floor(((q - nq) * limit + r - nr) / window)
        local left = (num(sc) - back) % COUNT
        wq[nw + W_KEY], wq[nw + W_VALUE], wq[nw + W_PX], wq[nw + W_HOW] = key, fmt('%d:%d:%d:%s:%d', store_now, nq, nr, sb, left), fmt('%d', px), false
        nw = nw + WRITE_SLOTS
      end
    end
  end
end
allowed, remaining, reset, retry = true, 0, 0, 0
