-- sliding_log: a sorted set of ADMITTED requests only (score = ms); an entry
-- counts while it is in the window (t - window, t]. Exact, and the only
-- algorithm with an exact retry_after for every request. t is Redis TIME,
-- or the newest entry if the clock went back, so nothing is ever reported
-- more than a window away. Reads write nothing (a check, a denial): the
-- trim and the ZADD are queued (see sliding_log_write.lua).
-- The first read is the only command of a decision that can meet a key of
-- another type (every other key it touches is read by MGET, which reads
-- another type as absent, and replaced by SET): it is a pcall, and its
-- error fails this decision alone (`failed`), before anything of it is
-- written. Once it passed, the key is a sorted set or absent, so the
-- commands after it cannot fail on it.
-- (A fragment of the driver's loop.)
local key = keys[k]
local t = store_now
local top = try('ZRANGE', key, -1, -1, 'WITHSCORES')
failed = top.err
if not failed then
  local newest = top[2]
  if newest then
    newest = num(newest)
    if newest > t then
      t = newest
    end
  end
  local after = fmt('(%d', t - window)
  local count = call('ZCOUNT', key, after, '+inf')
  remaining = 0
  if count < limit then
    remaining = limit - count
  end
  reset = 0
  if count > 0 then
    reset = newest - t + window -- in this order: newest + window may pass 2^53
  end
  if count + amount <= limit then
    allowed, retry = true, 0
    if op == 'u' then
      remaining = remaining - amount
      reset = window
      wq[nw + W_KEY], wq[nw + W_VALUE], wq[nw + W_PX], wq[nw + W_HOW] = key, amount, window, t
      nw = nw + WRITE_SLOTS
    end
  else
    allowed = false
    if amount > limit then
      retry = -1
    else
      -- The (count + amount - limit)-th oldest entry must leave the window.
      local entry = call('ZRANGE', key, after, '+inf', 'BYSCORE', 'LIMIT', count + amount - limit - 1, 1, 'WITHSCORES')
      retry = num(entry[2]) - t + window
    end
  end
end
