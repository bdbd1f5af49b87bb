-- Overrides: what an operator wrote for one client and one rule, at
-- <domain>:{<identity>}:<rule>:override, with an expiry (SET ... PX): words
-- separated by spaces, in any order:
--   <code>:<window ms>=<n>  that limit of the rule is n (cc=<n> for its
--                           concurrency limit); a token_bucket whose burst
--                           is its limit gets n as both;
--   block                   every request of the rule is refused;
--   reset                   the rule's counts of the client start afresh
--                           (concurrency slots excepted: those streams run):
--                           applied once, by the first request-time decision
--                           that reads it, which deletes them and writes the
--                           override back without the word (KEEPTTL).
-- A word it does not know, or a limit out of range, is ignored; an override
-- without an expiry is ignored whole (every override ends). Charges and
-- refunds read the limits only: they are never refused, and reset nothing.
-- Each override key is read once per call (ovs: false when ignored), so a
-- reset applied by one decision is not applied again by a later one.
-- (A fragment of the driver's loop: reads at, the decision's shape, nr
-- and k, its first override key; sets ov to false or, per limit of the
-- decision, its override: { limit, burst, p1, p2, p3, p4 } as the spec's
-- slots, or { 0, time left } for a block; and state.)
local charge = hs[at + H_CHARGE]
-- x: the limit in lq; li: its place in the decision; lk: its first key;
-- arg: where the shape's arguments start (a limit's op in capitals starts
-- a rule).
local x, li, lk, plan, dels, arg = hs[at + H_FIRST], 0, k + nr, {}, false, hs[at + H_ARG]
local limits = hs[at + H_LIMITS]
-- state: 1 once an override applies, 3 once this decision applied a reset.
ovs = ovs or {}
for j = 1, nr do
  local okey = keys[k + j - 1]
  local p = ovs[okey]
  if p == nil then
    -- p: { time left, block, reset, limits by name, the words kept }.
    p = false
    local text = got[k + j - 1]
    if text then
      local ttl = call('PTTL', okey)
      if ttl > 0 then
        p = { ttl > TOP and TOP or ttl, false, false, {}, {} }
        for w in string.gmatch(text, '%S+') do
          if w == 'block' then
            p[2] = true
          elseif w == 'reset' then
            p[3] = true
          else
            local name, n = string.match(w, '^([%w:]+)=(%d+)$')
            if name then
              p[4][name] = posint(n)
            end
            p[5][#p[5] + 1] = w
          end
        end
      end
    end
    ovs[okey] = p
  end
  local reset = p and p[3] and not charge
  -- The run: this rule's limits, up to the next that starts one.
  repeat
    li = li + 1
    local o = SPEC_SLOTS * (lq[x + L_SPEC] - 1)
    local c, limit, window, burst = sp[o + S_CODE], sp[o + S_LIMIT], sp[o + S_WINDOW], sp[o + S_BURST]
    local nk = c == 'sw' and 2 or 1
    if p then
      if p[2] and not charge then
        plan[li] = { 0, p[1] }
      else
        local n = p[4][c == 'cc' and 'cc' or c .. ':' .. fmt('%d', window)]
        if n and n ~= limit and n * window < MAX_EXACT and (c ~= 'sl' or n <= SLIDING_LOG_MAX) then
          local b = (c == 'tb' and burst == limit) and n or burst
          local e = { n, b, sp[o + S_P1], sp[o + S_P2], sp[o + S_P3], sp[o + S_P4] }
          if c == 'tb' or c == 'gc' then
            -- The spec loop's tolerance and debt cap, for this limit.
            e[3], e[4], e[5], e[6] = tolerance(b, window, n)
          end
          plan[li] = e
        end
      end
      if reset and c ~= 'cc' then
        dels = dels or {}
        dels[#dels + 1] = keys[lk]
        if nk == 2 then
          dels[#dels + 1] = keys[lk + 1]
        end
      end
      if state == 0 then
        state = 1
      end
    end
    lk = lk + nk
    x = x + LIMIT_SLOTS
  until li >= limits or argv[arg + 4 * li + 2] < 'a'
  if reset then
    -- Applied once: the override stays without the word.
    p[3], state = false, 3
    local rest = table.concat(p[5], ' ')
    if p[2] then
      rest = rest == '' and 'block' or rest .. ' block'
    end
    if rest == '' then
      -- Nothing left: no override for the call's later decisions either.
      call('DEL', okey)
      ovs[okey] = false
    else
      call('SET', okey, rest, 'KEEPTTL')
    end
  end
end
if dels then
  -- The counts start afresh: gone from Redis and from what the call read
  -- and wrote of them.
  call('DEL', unpack(dels))
  local gone = {}
  for _, key in ipairs(dels) do
    gone[key], val[key], again[key], wrote[key] = true, nil, nil, nil
  end
  for i = 1, #keys do
    if gone[keys[i]] then
      got[i] = false
    end
  end
end
ov = state ~= 0 and plan
