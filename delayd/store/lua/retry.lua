-- retry: put a finished task back to run now (one more run by its schedule): a failed one (retry), or
-- a failed or ok one finished inside a time span (replay: the same task, so the same webhook-id).
-- KEYS: task, delayed, done:<status>, counts, quarantine, corrupt (set_aside), recurring
-- ARGV: member, wake channel, status ('failed' when left out; or 'ok'), and for a replay the span
--       (ms) its finish time (its score in done:<status>) must be in: from, to
-- A recurring task (every, cron) recurs again: back in the `recurring` index its last run took it out of.
-- Returns 1 if the task was of that status (and finished in the span) and is now delayed, 0 if
-- missing (or its key is not a hash), -1 if not.
local now = now_ms()
local member, status = ARGV[1], ARGV[3] or 'failed'
expect('zset', KEYS[2], KEYS[3])
expect('hash', KEYS[5])
local r = read_record(KEYS[1], 'status', 'host', 'priority', 'spec')
if not (r and r[1]) then return 0 end
if r[1] ~= status then return -1 end
if ARGV[4] then
  local finished = tonumber(redis.call('ZSCORE', KEYS[3], member))
  if not (finished and finished >= tonumber(ARGV[4]) and finished <= tonumber(ARGV[5])) then return -1 end
end
redis.call('HSET', KEYS[1], 'status', 'delayed', 'due', now)
redis.call('PERSIST', KEYS[1])
redis.call('HDEL', KEYS[5], member)  -- no longer in done:failed
local topic = topic_of(member)
zrem_counted(KEYS[3], member, status, topic)
zadd_counted(KEYS[2], due_score(now, r[3]), member, 'waiting', topic)
count_host(r[2], 1)  -- a URL task waits for its host again
local ok, spec = pcall(cjson.decode, r[4] or '')
local null = cjson.null  -- a null every/cron is no schedule (docs/protocol.md section 7)
if ok and type(spec) == 'table' and ((spec.every or null) ~= null or (spec.cron or null) ~= null) then
  recurring_index(KEYS[7]).add(member)
end
wake_if_head(KEYS[2], member, ARGV[2], now)
flush_counts(KEYS[4])
return 1
