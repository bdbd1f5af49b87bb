-- sliding_window.lua's admission, for the usual decision: one sliding_window
-- limit used, its spec in the lone_ locals (read once per call). It decides
-- exactly as sliding_window.lua does, in the same arithmetic, and writes as
-- the driver's apply would; the tests of sliding_window replies run through
-- it. A denial is left to sliding_window.lua (decided stays false, nothing
-- written), which also computes its retry. Saves the general path's table
-- reads, write queue and math.floor: a quarter of the script's time per
-- decision (README).
-- (A fragment of the driver's loop: reads k and r; sets decided.)
local key = keys[k]
local held = got[k]
held = held and num(held) -- nil or false when absent
local base = held or 0
local added = val[key]
local cur = base + (added or 0)
local prev = got[k + 1]
prev = prev and num(prev) or 0
if refunded then
  prev = prev + (val[keys[k + 1]] or 0)
end
local room = lone_limit * lone_window - prev * lone_rest - cur * lone_window
if room >= lone_amount * lone_window then
  cur = cur + lone_amount
  room = room - lone_amount * lone_window
  -- As the all-or-nothing apply below would: written at once if it is the
  -- key's first write in the call (then cur - base is lone_amount).
  val[key] = cur - base
  if added ~= nil then
    again[key] = lone_px
    if wrote[key] == nil then
      wrote[key] = added
    end
  elseif held then
    -- As the driver's apply raises a count held (see there and TTL_CHECK).
    if num(try('INCRBY', key, lone_text)) == nil then
      replace(key, lone_amount, lone_px)
    elseif held % TTL_CHECK + lone_amount >= TTL_CHECK and call('PTTL', key) == -1 then
      call('PEXPIRE', key, lone_px)
    end
  else
    call('SET', key, lone_text, 'PX', lone_px)
  end
  -- room >= 0 here: floor(room / window) without a call.
  reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = 1, (room - room % lone_window) / lone_window, lone_ttl, 0
  k, r, decided = k + 2, r + REPLY_SLOTS, true
end
