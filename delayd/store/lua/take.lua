-- take: the first half of a claim. Pops up to n members of one bucket's ready lists, weighted by
-- priority, into the bucket's `taking` zset, where claim.lua (given their records in KEYS) starts
-- them. It touches no record: the members it pops are not known before the call, so their keys
-- could not be declared.
-- KEYS: ready:3, ready:2, ready:1 (or ready:u3, ready:u2, ready:u1 for URL tasks), taking, corrupt (set_aside)
-- ARGV: quota for priority 3, 2, 1, n, hold (ms), the ready lists' names in `taking` ('3', '2', '1' or 'u3', ...)
-- The first pass takes up to each priority's quota from ready:3, then :2, then :1; a second pass
-- fills whatever is left over in priority order (favours high priorities, never starves priority 1).
-- The whole take is one member of `taking` (one ZADD, and one ZREM for its claim, whatever its size),
-- at its deadline (Redis's clock, to the µs so that takes sort in the order they were made, + hold): per task, in the order popped, `<list> <length> <member>`
-- (its list, so that putting it back needs no record; the length, as a member may hold any byte).
-- A take still there at its deadline (its queue process died or hung before claiming) goes back to
-- the front of its lists (promote.lua); a claim that comes later finds it gone and starts nothing.
-- Returns {now, the take (its member of `taking`, for claim.lua; '' when it took nothing), members...}
local clock = now_us()
local now = math.floor(clock / 1000)
local n, hold = tonumber(ARGV[4]), tonumber(ARGV[5])
local quota = {tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])}
local out = {now, ''}
local parts = {}
local emptied = {}  -- lists this call found short: the second pass skips them

local function take(p, want)
  if want <= 0 or emptied[p] then return end
  local members = on('list', 'LPOP', KEYS[p], want)
  if not members or #members < want then emptied[p] = true end
  if not members then return end
  for _, member in ipairs(members) do
    parts[#parts + 1] = ARGV[5 + p] .. ' ' .. #member .. ' ' .. member
    out[#out + 1] = member
  end
end

for p = 1, 3 do take(p, math.min(quota[p], n - #parts)) end
for p = 1, 3 do take(p, n - #parts) end
if #parts > 0 then
  out[2] = table.concat(parts)
  on('zset', 'ZADD', KEYS[4], clock / 1000 + hold, out[2])
end
return out
