-- The takes of earlier versions (promote.lua): their take.lua popped ready members into the bucket's
-- `taking` zset, one member per take, for their claim.lua to start in a second call. This version's claim
-- pops and starts in one call; promote still puts back the takes an older queue process left there
-- (killed or hung between its two calls) while daemons of both versions run during an upgrade.
-- A take (hold_take of those versions): per task, in order, `<list> <length> <member>` (its list, so
-- that putting it back needs no record; the length, as a member may hold any byte), at its deadline (ms).

-- The entries of a take (its member of `taking`), in the order popped: {list name ('3', 'u2', ...), member}.
local function take_entries(take)
  local entries, at = {}, 1
  while true do
    local list, length, from = string.match(take, '^(u?[123]) (%d+) ()', at)
    if not from then break end
    at = from + tonumber(length)
    entries[#entries + 1] = {list, string.sub(take, from, at - 1)}
  end
  return entries
end

-- Takes of `taking` past their hold at `now` (ms): their queue process died or hung between take and
-- claim. Their members go back to the front of their lists (`lists`: list name -> key), in the order
-- they were popped, each passed to `found(list name, member)`; a claim that comes later finds its take
-- gone and starts nothing. At most `limit` members a call (whole takes, at least one), the newest takes
-- first, so that the older ones, put back by the next call, go in front of them: one call never pushes
-- 200 takes of 200 members (issue 41: 40,000 members in one call). Returns how many takes went back, and
-- whether lost takes are left (call again at once).
local function put_back_lost(taking, now, limit, lists, found)
  local lost = on('zset', 'ZREVRANGEBYSCORE', taking, now, '-inf', 'LIMIT', 0, limit + 1)
  if #lost == 0 then return 0, false end
  local chosen, size = {}, 0
  for _, take in ipairs(lost) do
    local entries = take_entries(take)
    if #chosen == limit or (#chosen > 0 and size + #entries > limit) then break end
    chosen[#chosen + 1] = {take, entries}
    size = size + #entries
  end
  local back = {}  -- list -> its members to push, the last first
  for t = 1, #chosen do  -- newest take first: pushed first, so that the older ones end up in front
    local entries = chosen[t][2]
    for i = #entries, 1, -1 do
      local list = lists[entries[i][1]]
      back[list] = back[list] or {}
      back[list][#back[list] + 1] = entries[i][2]
    end
  end
  for t = #chosen, 1, -1 do
    for _, entry in ipairs(chosen[t][2]) do found(entry[1], entry[2]) end
  end
  local taken = {}
  for t, take in ipairs(chosen) do taken[t] = take[1] end
  for list, members in pairs(back) do
    for i = 1, #members, UNPACK_MAX do
      on('list', 'LPUSH', list, unpack(members, i, math.min(i + UNPACK_MAX - 1, #members)))
    end
  end
  redis.call('ZREM', taking, unpack(taken))
  return #chosen, #lost > #chosen
end
