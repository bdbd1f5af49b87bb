-- sliding_log's queued write: drop what left the window, log `amount`
-- entries at t (members "<t>:<n>", n counting the entries already at t, so
-- they are unique within one ms), in ZADDs of at most ZADD_CHUNK members
-- (a cost of 10000 would overflow unpack), then expire with the newest
-- entry: t is the newest (Redis TIME, or a newer entry if the clock went
-- back), so the key lives until t leaves the window on Redis's clock.
-- (A fragment of the driver's write loop: key; its queued value is the
-- amount, its PX the window, and its clock t.)
local t, amount, window = wq[w + W_HOW], wq[w + W_VALUE], wq[w + W_PX]
local at = fmt('%d', t)
call('ZREMRANGEBYSCORE', key, '-inf', fmt('%d', t - window))
local seq = call('ZCOUNT', key, at, at)
local done = 0
while done < amount do
  local last = done + ZADD_CHUNK
  if last > amount then
    last = amount
  end
  local args, m = {}, 0
  for i = done, last - 1 do
    args[m + 1], args[m + 2] = at, fmt('%d:%d', t, seq + i)
    m = m + 2
  end
  call('ZADD', key, unpack(args))
  done = last
end
local ttl = t - store_now + window
if ttl > TOP then
  ttl = TOP -- a foreign entry far in the future: bounded, never an error
end
call('PEXPIRE', key, fmt('%d', ttl))
