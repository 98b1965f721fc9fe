-- take: the first half of a claim. Pops up to n members of one bucket's ready lists, weighted by
-- priority, into the bucket's `taking` zset, where claim.lua (given their records in KEYS) starts
-- them. It touches no record: the members it pops are not known before the call, so their keys
-- could not be declared.
-- KEYS: ready:3, ready:2, ready:1 (or ready:u3, ready:u2, ready:u1 for URL tasks), taking, corrupt (set_aside)
-- ARGV: quota for priority 3, 2, 1, n, hold (ms), the ready lists' names in entries ('3', '2', '1' or 'u3', ...)
-- The first pass takes up to each priority's quota from ready:3, then :2, then :1; a second pass
-- fills whatever is left over in priority order (favours high priorities, never starves priority 1).
-- Each member goes into `taking` as `<list>|<member>` (its list, so that putting it back needs no
-- record) at its deadline: Redis's clock + hold, plus i/1024 ms for the i-th of the call, so that
-- the entries sort in the order they were popped. An entry still there at its deadline (its queue
-- process died or hung before claiming) goes back to the front of its list (promote.lua); a claim
-- that comes later finds it gone and leaves the task alone.
-- Returns {now, entries...}
local now = now_ms()
local n, hold = tonumber(ARGV[4]), tonumber(ARGV[5])
local quota = {tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])}
local out = {now}
local emptied = {}  -- lists this call found short: the second pass skips them
local scored = {}   -- ZADD's score/entry pairs

local function take(p, want)
  if want <= 0 or emptied[p] then return end
  local members = on('list', 'LPOP', KEYS[p], want)
  if not members or #members < want then emptied[p] = true end
  if not members then return end
  for _, member in ipairs(members) do
    local entry = ARGV[5 + p] .. '|' .. member
    scored[#scored + 1] = now + hold + #out / 1024
    scored[#scored + 1] = entry
    out[#out + 1] = entry
  end
end

for p = 1, 3 do take(p, math.min(quota[p], n - (#out - 1))) end
for p = 1, 3 do take(p, n - (#out - 1)) end
for i = 1, #scored, UNPACK_MAX do
  on('zset', 'ZADD', KEYS[4], unpack(scored, i, math.min(i + UNPACK_MAX - 1, #scored)))
end
return out
