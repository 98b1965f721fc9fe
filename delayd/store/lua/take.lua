-- take: the first half of a claim. Pops up to n members of one bucket's ready lists, weighted by
-- priority, into the bucket's `taking` zset, where claim.lua (given their records in KEYS) starts
-- them. It touches no record: the members it pops are not known before the call, so their keys
-- could not be declared (claim.lua's pop mode claims at once those whose keys its caller declared).
-- KEYS: ready:3, ready:2, ready:1 (or ready:u3, ready:u2, ready:u1 for URL tasks), taking, corrupt (set_aside)
-- ARGV: quota for priority 3, 2, 1, n, hold (ms), the ready lists' names in `taking` ('3', '2', '1' or 'u3', ...)
-- Pops as pop_ready does (_take.lua); the whole take is one member of `taking` (hold_take: one ZADD,
-- and one ZREM for its claim, whatever its size).
-- A take still there at its deadline (its queue process died or hung before claiming) goes back to
-- the front of its lists (promote.lua); a claim that comes later finds it gone and starts nothing.
-- Returns {now, the take (its member of `taking`, for claim.lua; '' when it took nothing), members...}
local clock = now_us()
local members, from = pop_ready({KEYS[1], KEYS[2], KEYS[3]}, {ARGV[6], ARGV[7], ARGV[8]},
  {tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])}, tonumber(ARGV[4]))
local out = {math.floor(clock / 1000), hold_take(KEYS[4], clock, tonumber(ARGV[5]), members, from)}
for _, member in ipairs(members) do out[#out + 1] = member end
return out
