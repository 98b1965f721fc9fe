-- add: write (upsert, or insert-if-absent) a batch of tasks of one bucket.
-- KEYS: delayed, leases, done:ok, done:failed, done:deleted
-- ARGV: task-key prefix, nx (1/0), wake channel, then per task 5 values:
--       member (topic:id), spec JSON, priority, mode ('delay'|'at'), value (ms)
-- A relative delay is resolved here, on Redis's clock. Replacing a task bumps
-- its claim token, so a worker still running the old version cannot finish it.
-- Returns one 1 (written) or 0 (exists, nx) per task.
local now = now_ms()
local prefix, nx, channel = ARGV[1], ARGV[2] == '1', ARGV[3]
local written = {}
for i = 4, #ARGV, 5 do
  local member, spec, priority, mode = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local value = tonumber(ARGV[i + 4])
  local task_key = prefix .. member
  if nx and redis.call('EXISTS', task_key) == 1 then
    written[#written + 1] = 0
  else
    local due = value
    if mode == 'delay' then due = now + value end
    local claim = tonumber(redis.call('HGET', task_key, 'claim') or '0') + 1
    redis.call('DEL', task_key)
    redis.call('HSET', task_key, 'spec', spec, 'priority', priority, 'status', 'delayed',
      'created', now, 'due', due, 'runs', 0, 'claim', claim)
    for k = 2, 5 do redis.call('ZREM', KEYS[k], member) end
    redis.call('ZADD', KEYS[1], due, member)
    wake_if_head(KEYS[1], member, channel, due)
    written[#written + 1] = 1
  end
end
return written
