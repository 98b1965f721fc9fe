-- park: set aside the tasks of a paused topic that were in one ready list when it was paused,
-- a bounded chunk per call (Client.pause walks each ready list of each bucket after pause.lua).
-- KEYS: paused, ready list, counts, the topic's parked set (paused:<topic>), corrupt (set_aside), then
--       the records (`<task-key prefix><member>`) of the members the previous call returned
-- ARGV: task-key prefix, topic, the pause's generation, position (entries counted from the
--       list's tail that earlier calls looked at; -1: none left to look at), chunk
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
-- Returns {parked, next position (-1 at the head), the topic's members looked at}, or {0, -2}
-- when the bucket no longer holds this pause or a later one (a resume that began after it has
-- resumed the topic here).
local prefix, topic, generation = ARGV[1], ARGV[2], tonumber(ARGV[3])
local position, chunk = tonumber(ARGV[4]), tonumber(ARGV[5])
local parked = KEYS[4]
expect('hash', KEYS[1])
local held = pause_generation(redis.call('HGET', KEYS[1], topic))
if not held or held < generation then return {0, -2} end
expect('list', KEYS[2])
expect('zset', parked)
local now = now_ms()
local moved = 0
for i = 6, #KEYS do
  local task_key = KEYS[i]
  local member = string.sub(task_key, #prefix + 1)
  if string.sub(task_key, 1, #prefix) == prefix and topic_of(member) == topic then
    local r = read_record(task_key, 'queued', 'due', 'priority')
    if r and r[1] == '1' then
      redis.call('HSET', task_key, 'queued', '0')
      mark_parked(task_key, now)
      count_ready(r[3], topic, -1)
      zadd_counted(parked, int_of(r[2]) or now, member, 'parked', topic)
      moved = moved + 1
    end
  end
end
flush_counts(KEYS[3])
if position < 0 then return {moved, -1} end
local entries = redis.call('LRANGE', KEYS[2], -(position + chunk), -(position + 1))
local reply = {moved, #entries < chunk and -1 or position + chunk}
for _, member in ipairs(entries) do
  if topic_of(member) == topic then reply[#reply + 1] = member end
end
return reply
