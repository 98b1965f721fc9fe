-- retry: put a failed task back to run now (one more run by its schedule).
-- KEYS: task, delayed, done:failed, counts, quarantine
-- ARGV: member, wake channel
-- Returns 1 if the task was failed and is now delayed, 0 if missing (or its key
-- is not a hash), -1 if not failed.
local now = now_ms()
local member = ARGV[1]
expect('zset', KEYS[2], KEYS[3])
expect('hash', KEYS[5])
local r = read_record(KEYS[1], 'status')
if not (r and r[1]) then return 0 end
if r[1] ~= 'failed' then return -1 end
redis.call('HSET', KEYS[1], 'status', 'delayed', 'due', now)
redis.call('PERSIST', KEYS[1])
redis.call('HDEL', KEYS[5], member)  -- no longer in done:failed
local topic = topic_of(member)
zrem_counted(KEYS[3], member, 'failed', topic)
zadd_counted(KEYS[2], now, member, 'waiting', topic)
wake_if_head(KEYS[2], member, ARGV[2], now)
flush_counts(KEYS[4])
return 1
