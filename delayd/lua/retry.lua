-- retry: put a failed task back to run now (one more run by its schedule).
-- KEYS: task, delayed, done:failed, counts
-- ARGV: member, wake channel
-- Returns 1 if the task was failed and is now delayed, 0 if missing, -1 if not failed.
local now = now_ms()
local member = ARGV[1]
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return 0 end
if status ~= 'failed' then return -1 end
redis.call('HSET', KEYS[1], 'status', 'delayed', 'due', now)
redis.call('PERSIST', KEYS[1])
local topic = topic_of(member)
zrem_counted(KEYS[3], member, 'failed', topic)
zadd_counted(KEYS[2], now, member, 'waiting', topic)
wake_if_head(KEYS[2], member, ARGV[2], now)
flush_stats(KEYS[4])
return 1
