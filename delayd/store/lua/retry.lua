-- retry: put a finished task back to run now (one more run by its schedule): a failed one (retry), or
-- a failed or ok one finished inside a time span (replay: the same task, so the same webhook-id).
-- KEYS[1]  task_key        P{N}:t:<member>
-- KEYS[2]  delayed         P{N}:delayed
-- KEYS[3]  done            P{N}:done:<status>   the index of `status`
-- KEYS[4]  counts_key      P{N}:counts
-- KEYS[5]  quarantine_key  P{N}:quarantine
-- KEYS[6]  corrupt         P{N}:corrupt         (declared only: set_aside names it)
-- KEYS[7]  recurring       P{N}:recurring
-- ARGV[1]  member          topic:id
-- ARGV[2]  wake_channel    Pwake:N
-- ARGV[3]  status          'failed' (also when left out) or 'ok'
-- ARGV[4]  span_from       for a replay, the span (ms) its finish time (its score in done:<status>) must be
-- ARGV[5]  span_to         in (both left out for a retry)
-- Reply: code, 1 if the task was of that status (and finished in the span) and is now delayed, 0 if
--   missing (or its key is not a hash), -1 if not
-- A recurring task (every, cron) recurs again: back in the `recurring` index its last run took it out of.
local task_key, delayed, done, counts_key, quarantine_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local recurring = KEYS[7]
local member, wake_channel, status = ARGV[1], ARGV[2], ARGV[3] or 'failed'
local span_from, span_to = ARGV[4], ARGV[5]

local now = now_ms()
expect('zset', delayed, done)
expect('hash', quarantine_key)
local hash, stored_status, host, priority, spec = record_fields(task_key, 'status', 'host', 'priority', 'spec')
if not (hash and stored_status) then return 0 end
if stored_status ~= status then return -1 end
if span_from then
  local finished = tonumber(redis.call('ZSCORE', done, member))
  if not (finished and finished >= tonumber(span_from) and finished <= tonumber(span_to)) then return -1 end
end
redis.call('HSET', task_key, 'status', 'delayed', 'due', now)
redis.call('PERSIST', task_key)
redis.call('HDEL', quarantine_key, member)  -- no longer in done:failed
local topic = topic_of(member)
zrem_counted(done, member, status, topic)
zadd_counted(delayed, due_score(now, priority), member, 'waiting', topic)
count_host(host, 1)  -- a URL task waits for its host again
local ok, decoded = pcall(cjson.decode, spec or '')
local null = cjson.null  -- a null every/cron is no schedule (docs/protocol.md section 7)
if ok and type(decoded) == 'table' and ((decoded.every or null) ~= null or (decoded.cron or null) ~= null) then
  recurring_index(recurring).add(member)
end
wake_if_head(delayed, member, wake_channel, now)
flush_counts(counts_key)
return 1
