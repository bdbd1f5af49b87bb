-- token_bucket and gcra: one algorithm. A bucket of capacity burst refilled
-- at limit per window is a GCRA whose tolerance is burst emission intervals:
-- both keep how far the client is AHEAD of its allowance (tokens missing
-- from a full bucket; the TAT's distance past now), in units of 1/limit ms,
-- so one unit of amount weighs exactly `window` units. Amount a fits while
-- ahead + a x window <= burst x window (the tolerance).
-- ahead is a pair (q ms, r units < limit): with a debt it may reach
-- 2 x tolerance, past 2^53, and the pair keeps it exact.
-- State: "<ms written>:<q>:<r>:<born>:<count>"; absent, or q elapsed since
-- = a full bucket. born: the ms its key was created (a key created again,
-- after it expired, is another bucket to a refund); count: every amount u,
-- v and g added, modulo COUNT: what a refund's mark is measured against
-- (see refund.lua). A state of three fields (written before these) reads as
-- born = its ms, count 0. op v is u, and its reply, if allowed, says the lead after
-- (in units), born and count instead of remaining, reset and retry: the
-- reservation's mark.
-- (A fragment of the driver's loop.)
local key = keys[k]
local tol_q, tol_r, cap_q, cap_r = p1, p2, p3, p4
local q, r, born, count = 0, 0, store_now, 0
local state = val[key] or got[k]
if state then
  local at, sq, sr, sb, sc = string.match(state, '^(%d+):(%d+):(%d+):(%d+):(%d+)$')
  if not at then
    at, sq, sr = string.match(state, '^(%d+):(%d+):(%d+)$')
    sb, sc = at, 0
  end
  if at then
    born, count = num(sb), num(sc)
    local elapsed = store_now - num(at)
    if elapsed < 0 then
      elapsed = 0 -- the clock went back: no refill, and never more debt
    end
    q = num(sq) - elapsed
    if q < 0 then
      q = 0
    else
      r = num(sr)
      if r >= limit then
        -- written under a smaller limit
        local c = floor(r / limit)
        q, r = q + c, r - c * limit
      end
      if q > cap_q or (q == cap_q and r > cap_r) then
        q, r = cap_q, cap_r
      end
    end
  end
end
if op ~= 'k' then
  count = (count + amount % COUNT) % COUNT -- written only if the use is
end
if op == 'g' then
  local x = amount * window
  local xq = floor(x / limit)
  x = x - xq * limit
  if r >= limit - x then
    xq, r = xq + 1, r - (limit - x)
  else
    r = r + x
  end
  if q > cap_q - xq or (q == cap_q - xq and r > cap_r) then
    q, r = cap_q, cap_r
  else
    q = q + xq
  end
  wq[nw + W_KEY], wq[nw + W_VALUE], wq[nw + W_PX], wq[nw + W_HOW] = key, fmt('%d:%d:%d:%d:%d', store_now, q, r, born, count), fmt('%d', q + (r > 0 and 1 or 0)), false
  nw = nw + WRITE_SLOTS
  amount = 1 -- then reported as a check of one unit
end
-- The room for amount: tolerance - amount x window, as a pair.
local x = amount * window
local xq = floor(x / limit)
x = x - xq * limit
local sq, sr = tol_q - xq, tol_r - x
if sr < 0 then
  sq, sr = sq - 1, sr + limit
end
if amount <= burst and (q < sq or (q == sq and r <= sr)) then
  allowed, retry = true, 0
  if op == 'u' or op == 'v' then
    if r >= limit - x then
      q, r = q + xq + 1, r - (limit - x)
    else
      q, r = q + xq, r + x
    end
    wq[nw + W_KEY], wq[nw + W_VALUE], wq[nw + W_PX], wq[nw + W_HOW] = key, fmt('%d:%d:%d:%d:%d', store_now, q, r, born, count), fmt('%d', q + (r > 0 and 1 or 0)), false
    nw = nw + WRITE_SLOTS
  end
else
  allowed = false
  if amount > burst then
    retry = -1
  else
    retry = q - sq + (r > sr and 1 or 0)
  end
end
remaining = 0
if q < tol_q or (q == tol_q and r <= tol_r) then
  remaining = floor(((tol_q - q) * limit + tol_r - r) / window)
end
reset = q + (r > 0 and 1 or 0)
if op == 'v' and allowed then
  remaining, reset, retry = q * limit + r, born, count -- the mark
end
