-- pause: stop starting the tasks of one topic in one bucket (Client.pause runs it on every bucket).
-- KEYS: paused, ready:3, ready:2, ready:1, counts, ready:u3, ready:u2, ready:u1
-- ARGV: task-key prefix, topic
-- Flags the topic in the bucket's `paused` hash, which promote reads: from now on its
-- due tasks are parked in `paused:<topic>` instead of made ready. Its tasks already in
-- a ready list are parked too (their list entries go stale, as a delete leaves them),
-- so no worker starts one. Runs in flight finish. Returns how many tasks were parked.
local now = now_ms()
local prefix, topic = ARGV[1], ARGV[2]
local parked = parked_key(KEYS[1], topic)
expect('hash', KEYS[1])
expect('list', KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7], KEYS[8])
expect('zset', parked)
redis.call('HSET', KEYS[1], topic, '1')
local moved = 0
for _, k in ipairs({2, 3, 4, 6, 7, 8}) do
  for _, member in ipairs(redis.call('LRANGE', KEYS[k], 0, -1)) do
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
end
flush_counts(KEYS[5])
return moved
