-- concurrency: at most `limit` streams of a client in flight. One sorted
-- set per client and rule, a member per stream holding a slot (its id, from
-- the proxy: the limit's offset argument), scored by when the slot expires
-- on Redis's clock (TIME + window, the window being max_hold). A slot is
-- taken (u), released when its stream ends (r) and renewed while it lives
-- (n); a slot nobody renews (its proxy died, its VM was reloaded) expires,
-- and expired members are dropped before anything is counted, so counting
-- is ZREMRANGEBYSCORE (O(log n + expired)) then ZCARD (O(1)).
-- u: allowed iff count + 1 <= limit; the member is added when the whole
-- decision admits (queued: see the driver's write loop). k: the same,
-- writing nothing. Denied: retry is CC_RETRY_MS, since when a stream ends
-- is unknown. r and n (after the stream's start, never refused): allowed
-- says whether the slot was still held (0: it had expired first), retry 0;
-- n adds back a slot that had expired, since its stream still runs.
-- remaining: slots free after the decision; reset: 0.
-- The first command is the only one that can meet a key of another type:
-- a pcall whose error fails this decision alone, before it wrote anything.
-- (A fragment of the driver's loop.)
local key = keys[k]
local swept = try('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', store_now))
if kind(swept) == 'table' then
  failed = swept.err
else
  local count = call('ZCARD', key)
  retry = 0
  if op == 'r' then
    local held = call('ZREM', key, offset)
    count = count - held
    allowed = held == 1
  elseif op == 'n' then
    local added = call('ZADD', key, fmt('%d', store_now + window), offset)
    count = count + added
    allowed = added == 0
    local top = call('ZRANGE', key, -1, -1, 'WITHSCORES')
    call('PEXPIRE', key, fmt('%d', num(top[2]) - store_now))
  elseif count + amount <= limit then
    allowed = true
    if op == 'u' then
      count = count + amount
      wq[nw + W_KEY], wq[nw + W_VALUE], wq[nw + W_PX], wq[nw + W_HOW] = key, offset, window, 'z'
      nw = nw + WRITE_SLOTS
    end
  else
    allowed, retry = false, CC_RETRY_MS
  end
  remaining = 0
  if count < limit then
    remaining = limit - count
  end
  reset = 0
end
