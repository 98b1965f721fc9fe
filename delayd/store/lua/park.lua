-- park: set aside the tasks of a paused topic that were in one ready list when it was paused,
-- a bounded chunk per call (Client.pause walks each ready list of each bucket after pause.lua).
-- KEYS: paused, ready list, counts, the topic's parked set (paused:<topic>), corrupt (set_aside)
-- ARGV: task-key prefix, topic, the pause's generation, position (entries counted from the
--       list's tail that earlier calls looked at), chunk
-- Looks at the `chunk` entries before `position` from the tail: the topic's live ones are parked
-- (`queued=0`, into `paused:<topic>` at their due time; the list entries go stale, as a delete
-- leaves them). Walking from the tail misses none: workers pop at the head and lapsed tasks are
-- pushed there, which moves no entry's distance from the tail, and what promote appends at the
-- tail while the topic is paused is of other topics (it only moves the walk's window back over
-- entries already seen). Costs O(chunk), whatever the list's length.
-- Returns {parked, next position, or -1 at the head, or -2 when the bucket no longer holds this
-- pause or a later one (a resume that began after it has resumed the topic here)}.
local prefix, topic, generation = ARGV[1], ARGV[2], tonumber(ARGV[3])
local position, chunk = tonumber(ARGV[4]), tonumber(ARGV[5])
local parked = KEYS[4]
expect('hash', KEYS[1])
local held = pause_generation(redis.call('HGET', KEYS[1], topic))
if not held or held < generation then return {0, -2} end
expect('list', KEYS[2])
expect('zset', parked)
local now = now_ms()
local members = redis.call('LRANGE', KEYS[2], -(position + chunk), -(position + 1))
local moved = 0
for _, member in ipairs(members) do
  if topic_of(member) == topic then
    local task_key = prefix .. member
    local r = read_record(task_key, 'queued', 'due', 'priority')
    if r and r[1] == '1' then
      redis.call('HSET', task_key, 'queued', '0')
      count_ready(r[3], topic, -1)
      zadd_counted(parked, int_of(r[2]) or now, member, 'parked', topic)
      moved = moved + 1
    end
  end
end
flush_counts(KEYS[3])
if #members < chunk then return {moved, -1} end
return {moved, position + chunk}
