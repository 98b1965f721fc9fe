-- run_now: make a waiting task due now (a recurring one then continues on its schedule).
-- KEYS[1]  task_key      P{N}:t:<member>
-- KEYS[2]  delayed       P{N}:delayed
-- KEYS[3]  paused        P{N}:paused         (declared only: the topic's parked set is KEYS[5])
-- KEYS[4]  counts_key    P{N}:counts
-- KEYS[5]  parked        P{N}:paused:<topic>
-- KEYS[6]  corrupt       P{N}:corrupt        (declared only: set_aside names it)
-- ARGV[1]  member        topic:id
-- ARGV[2]  wake_channel  Pwake:N
-- Reply: {code, status}
--   code: 1 due now; 2 due now but its topic is paused (it runs first on resume); 3 already due (in a ready
--   list, waiting for a worker: nothing changed); 0 no such task; -1 not delayed (running or finished:
--   nothing changed); status: the task's, '' when there is none
local task_key, delayed, counts_key, parked = KEYS[1], KEYS[2], KEYS[4], KEYS[5]
local member, wake_channel = ARGV[1], ARGV[2]

local now = now_ms()
local hash, status, queued, priority = record_fields(task_key, 'status', 'queued', 'priority')
if not (hash and status) then return {0, ''} end
if status ~= 'delayed' then return {-1, status} end
if queued == '1' then return {3, status} end
local topic = topic_of(member)
expect('zset', delayed, parked)
redis.call('HSET', task_key, 'due', now)
if redis.call('ZSCORE', parked, member) then
  redis.call('ZADD', parked, now, member)
  return {2, status}
end
zadd_counted(delayed, due_score(now, priority), member, 'waiting', topic)
wake_if_head(delayed, member, wake_channel, now)
flush_counts(counts_key)
return {1, status}
