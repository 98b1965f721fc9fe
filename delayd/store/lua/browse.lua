-- browse: read one page of a bucket's index (a zset of members) in order, keeping the
-- members that match, with bounded work (the dashboard's task list; changes nothing).
-- KEYS: the index (delayed, leases or done:<status>)
-- ARGV: order ('asc' or 'desc'), cursor score ('' = from the start), cursor member,
--       topic ('' = any), id prefix ('' = any), limit (matches), budget (entries examined)
-- Order is (score, member) ascending, or its reverse. The cursor is the last entry the
-- caller has seen; the page starts right after it, found with ZRANK when the member is
-- still in this index at that score, else by ZCOUNT and a skip over equal scores.
-- Returns {{member, score, ...} of matches, examined, stop score or false, stop member
--          (false when the index was read to its end), size of the index}, and a sixth
-- value, the key's type, when the index is not a sorted set (then nothing was read:
-- this script only reads, so it leaves the key for the writers' `expect` to set aside).
local key, order = KEYS[1], ARGV[1]
local cursor_score, cursor_member = ARGV[2], ARGV[3]
local topic, prefix = ARGV[4], ARGV[5]
local limit, budget = tonumber(ARGV[6]), tonumber(ARGV[7])
local desc = order == 'desc'
local kind = key_type(key)
if kind ~= 'zset' and kind ~= 'none' then return {{}, 0, false, false, 0, kind} end
local range = desc and 'ZREVRANGE' or 'ZRANGE'

local start, skip_ties = 0, false
if cursor_score ~= '' then
  local score = redis.call('ZSCORE', key, cursor_member)
  if score and tonumber(score) == tonumber(cursor_score) then
    start = redis.call(desc and 'ZREVRANK' or 'ZRANK', key, cursor_member) + 1
  else
    if desc then
      start = redis.call('ZCOUNT', key, '(' .. cursor_score, '+inf')
    else
      start = redis.call('ZCOUNT', key, '-inf', '(' .. cursor_score)
    end
    skip_ties = true
  end
end

-- A member is topic:id and an id holds no ':', so with a topic the test is a plain prefix
-- compare plus "no ':' after the topic"; a scan stays cheap per entry.
local head = topic ~= '' and (topic .. ':' .. prefix) or nil
local function matches(member)
  if head then
    return string.sub(member, 1, #head) == head and not string.find(member, ':', #topic + 2, true)
  end
  return prefix == '' or string.sub(string.match(member, '[^:]*$'), 1, #prefix) == prefix
end

local found, examined, last_score, last_member = {}, 0, false, false
local target = tonumber(cursor_score)
local size = redis.call('ZCARD', key)
local pos = start  -- index of the next entry not examined
while #found < 2 * limit and examined < budget and pos < size do
  local page = redis.call(range, key, pos, pos + math.min(200, budget - examined) - 1, 'WITHSCORES')
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
