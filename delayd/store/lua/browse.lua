-- browse: read one page of a bucket's index (a zset of members) in order, keeping the
-- members that match, with bounded work (the dashboard's task list; changes nothing).
-- KEYS[1]  index          P{N}:delayed|P{N}:leases|P{N}:done:<status>
-- ARGV[1]  order          'asc' or 'desc'
-- ARGV[2]  cursor_score   '' = from the start
-- ARGV[3]  cursor_member
-- ARGV[4]  topic          '' = any
-- ARGV[5]  id_prefix      '' = any
-- ARGV[6]  limit          matches
-- ARGV[7]  budget         entries examined
-- Reply: {matches, examined, stop_score, stop_member, size, kind}
--   matches: {member, score, ...}; examined: index entries looked at; stop_score, stop_member: the last entry
--   examined (false when the index was read to its end); size: the index's; kind, only when the index is not
--   a sorted set, the key's type (then nothing was read: this script only reads, so it leaves the key for
--   the writers' `expect` to set aside)
-- Order is (score, member) ascending, or its reverse. The cursor is the last entry the
-- caller has seen; the page starts right after it, found with ZRANK when the member is
-- still in this index at that score, else by ZCOUNT and a skip over equal scores.
local index = KEYS[1]
local order, cursor_score, cursor_member, topic, id_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local limit, budget = tonumber(ARGV[6]), tonumber(ARGV[7])
local desc = order == 'desc'
local kind = key_type(index)
if kind ~= 'zset' and kind ~= 'none' then return {{}, 0, false, false, 0, kind} end
local range = desc and 'ZREVRANGE' or 'ZRANGE'

local start, skip_ties = 0, false
if cursor_score ~= '' then
  local score = redis.call('ZSCORE', index, cursor_member)
  if score and tonumber(score) == tonumber(cursor_score) then
    start = redis.call(desc and 'ZREVRANK' or 'ZRANK', index, cursor_member) + 1
  else
    if desc then
      start = redis.call('ZCOUNT', index, '(' .. cursor_score, '+inf')
    else
      start = redis.call('ZCOUNT', index, '-inf', '(' .. cursor_score)
    end
    skip_ties = true
  end
end

-- A member is topic:id and an id holds no ':', so with a topic the test is a plain prefix
-- compare plus "no ':' after the topic"; a scan stays cheap per entry.
local head = topic ~= '' and (topic .. ':' .. id_prefix) or nil
local function matches(member)
  if head then
    return string.sub(member, 1, #head) == head and not string.find(member, ':', #topic + 2, true)
  end
  return id_prefix == '' or string.sub(string.match(member, '[^:]*$'), 1, #id_prefix) == id_prefix
end

local found, examined, last_score, last_member = {}, 0, false, false
local target = tonumber(cursor_score)
local size = redis.call('ZCARD', index)
local pos = start  -- index of the next entry not examined
while #found < 2 * limit and examined < budget and pos < size do
  local page = redis.call(range, index, pos, pos + math.min(200, budget - examined) - 1, 'WITHSCORES')
  if #page == 0 then break end
  for i = 1, #page, 2 do
    local member, score = page[i], page[i + 1]
    examined, pos = examined + 1, pos + 1
    last_score, last_member = score, member
    -- entries that share the cursor's score and come before it in this order were seen
    local seen = skip_ties and tonumber(score) == target and
                 ((desc and member >= cursor_member) or (not desc and member <= cursor_member))
    if not seen then
      skip_ties = false
      if matches(member) then
        found[#found + 1] = member
        found[#found + 1] = score
        if #found == 2 * limit then break end
      end
    end
  end
end
if pos >= size then last_score, last_member = false, false end
return {found, examined, last_score, last_member, size}
