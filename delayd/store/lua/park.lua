-- park: set aside the tasks of a paused topic that were in one ready list when it was paused,
-- a bounded chunk per call (Client.pause walks each ready list of each bucket after pause.lua).
-- KEYS[1]      paused        P{N}:paused
-- KEYS[2]      ready         P{N}:ready:*         one ready list
-- KEYS[3]      counts_key    P{N}:counts
-- KEYS[4]      parked        P{N}:paused:<topic>  the topic's parked set
-- KEYS[5]      corrupt       P{N}:corrupt         (declared only: set_aside names it)
-- KEYS[5 + m]  record        P{N}:t:<member>      the records of the members the previous call returned
-- ARGV[1]      prefix        the task-key prefix P{N}:t:
-- ARGV[2]      topic
-- ARGV[3]      generation    the pause's
-- ARGV[4]      position      entries counted from the list's tail that earlier calls looked at (-1: none
--                            left to look at)
-- ARGV[5]      chunk         entries to look at
-- Reply: {parked, position, members...}
--   parked: tasks parked; position: the next call's, -1 at the head, or -2 (and nothing else) when the bucket no longer
--   holds this pause or a later one (a resume that began after it has resumed the topic here); members:
--   the topic's members looked at, for the next call
-- A script touches only the records its call declares, so each chunk takes two calls: one
-- looks at the `chunk` entries before `position` from the tail and returns the topic's members
-- among them, the next parks those whose record is still live (`queued=1`: `queued=0`, into
-- `paused:<topic>` at their due time; the list entries go stale, as a delete leaves them) and
-- looks at the following chunk. A member taken by a worker or deleted between the two calls is
-- no longer live and is left alone; a live record is a ready task of the paused topic wherever
-- its entry is now. Walking from the tail misses none: workers pop at the head and lapsed tasks
-- are pushed there, which moves no entry's distance from the tail, and what promote appends at
-- the tail while the topic is paused is of other topics (it only moves the walk's window back
-- over entries already seen). Costs O(chunk), whatever the list's length.
local paused, ready, counts_key, parked = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local records = KEYS  -- the m-th member's record: records[5 + m]
local prefix, topic, generation = ARGV[1], ARGV[2], tonumber(ARGV[3])
local position, chunk = tonumber(ARGV[4]), tonumber(ARGV[5])

expect('hash', paused)
local flagged = pause_generation(redis.call('HGET', paused, topic))  -- the pause the bucket holds
if not flagged or flagged < generation then return {0, -2} end
expect('list', ready)
expect('zset', parked)
local now = now_ms()
local moved = 0
for m = 1, #records - 5 do
  local task_key = records[5 + m]
  local member = string.sub(task_key, #prefix + 1)
  if string.sub(task_key, 1, #prefix) == prefix and topic_of(member) == topic then
    local hash, queued, due, priority = record_fields(task_key, 'queued', 'due', 'priority')
    if hash and queued == '1' then
      redis.call('HSET', task_key, 'queued', '0')
      mark_parked(task_key, now)
      count_ready(priority, topic, -1)
      zadd_counted(parked, int_of(due) or now, member, 'parked', topic)
      moved = moved + 1
    end
  end
end
flush_counts(counts_key)
if position < 0 then return {moved, -1} end
local entries = redis.call('LRANGE', ready, -(position + chunk), -(position + 1))
local reply = {moved, #entries < chunk and -1 or position + chunk}
for _, member in ipairs(entries) do
  if topic_of(member) == topic then reply[#reply + 1] = member end
end
return reply
