-- run_now: make a waiting task due now (a recurring one then continues on its schedule).
-- KEYS: task, delayed, paused, counts, the topic's parked set (paused:<topic>), corrupt (set_aside)
-- ARGV: member, wake channel
-- Returns {code, status}: 1 due now; 2 due now but its topic is paused (it runs first
-- on resume); 3 already due (in a ready list, waiting for a worker: nothing changed);
-- 0 no such task; -1 not delayed (running or finished: nothing changed).
local now = now_ms()
local member, channel = ARGV[1], ARGV[2]
local r = read_record(KEYS[1], 'status', 'queued', 'priority')
if not (r and r[1]) then return {0, ''} end
if r[1] ~= 'delayed' then return {-1, r[1]} end
if r[2] == '1' then return {3, r[1]} end
local topic = topic_of(member)
local parked = KEYS[5]
expect('zset', KEYS[2], parked)
redis.call('HSET', KEYS[1], 'due', now)
if redis.call('ZSCORE', parked, member) then
  redis.call('ZADD', parked, now, member)
  return {2, r[1]}
end
zadd_counted(KEYS[2], due_score(now, r[3]), member, 'waiting', topic)
wake_if_head(KEYS[2], member, channel, now)
flush_counts(KEYS[4])
return {1, r[1]}
