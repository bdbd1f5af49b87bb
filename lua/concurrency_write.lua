-- concurrency's queued write: the stream's slot, expiring a window (max_hold)
-- from now on Redis's clock; the key lives as long as its latest slot (a
-- proxy with a longer max_hold may hold one past this one's).
-- (A fragment of the driver's write loop: key; its queued value is the
-- member, its PX the window.)
call('ZADD', key, fmt('%d', store_now + wq[w + W_PX]), wq[w + W_VALUE])
local top = call('ZRANGE', key, -1, -1, 'WITHSCORES')
call('PEXPIRE', key, fmt('%d', num(top[2]) - store_now))
