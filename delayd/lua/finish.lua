-- finish: record the outcome of a batch of runs of one bucket.
-- KEYS: delayed, leases, done:ok, done:failed, quarantine, counts, totals, recurring
-- ARGV: task-key prefix, retention (ms), wake channel, window-key prefix,
--       attempts kept (the delivery log's length), then per run 8 values:
--       member, claim token, outcome ('ok'|'failed'|'retry'|'quarantine'|'defer'),
--       gap (ms, for retry), last error ('' clears it; the reason, for quarantine),
--       next due (ms; 'end' for a recurring task's last run; or ''),
--       wait (ms: the next run starts no earlier than now + wait; '' or 0 for none),
--       attempt (one line for the delivery log, or '')
-- A next due time (a recurring task's next run, ok or retry) puts the task back
-- to `delayed` at that time and keeps the due time this run was for in `last_due`;
-- it is (again) in the `recurring` index, which 'end' or a quarantine leaves.
-- `defer` is a run that was never made (its URL's circuit is open): the task goes
-- back to `delayed` at now + wait and gives back the run number claim counted.
-- A run whose claim token is stale (lease lapsed, task replaced or deleted), or
-- whose record is no longer a hash, changes nothing. Returns one 1 (applied) or
-- 0 (stale) per run.
local now = now_ms()
local prefix, retention, channel = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local kept = tonumber(ARGV[5]) or 0
expect('zset', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
expect('hash', KEYS[5])
local aside = {failed = KEYS[4], quarantine = KEYS[5], now = now, retention = retention}
local schedules = recurring_index(KEYS[8])
local applied = {}

-- Append `line` to the delivery log `log` (lines oldest first), keeping the last `kept`:
-- the oldest lines are cut off the log before the one concatenation.
local function logged(log, line)
  if kept <= 1 or type(log) ~= 'string' or log == '' then return line end
  local breaks, at = {}, string.find(log, '\n', 1, true)
  while at do
    breaks[#breaks + 1] = at
    at = string.find(log, '\n', at + 1, true)
  end
  local drop = #breaks + 2 - kept  -- lines too many once `line` is added (at most #breaks: kept >= 2)
  if drop > 0 then log = string.sub(log, breaks[drop] + 1) end
  return log .. '\n' .. line
end

for i = 6, #ARGV, 8 do
  local member, claim, outcome, gap, err = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4]
  local next_due, wait, attempt = tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6]) or 0, ARGV[i + 7]
  local task_key = prefix .. member
  local r = read_record(task_key, 'claim', 'status', 'due', 'error', 'runs', 'attempts')
  if r and r[1] == claim and r[2] == 'running' then
    local topic = topic_of(member)
    local not_before = now + wait
    zrem_counted(KEYS[2], member, 'running', topic)
    tally(outcome, topic)
    local record_error = true
    if outcome == 'defer' then
      local runs = (int_of(r[5]) or 1) - 1
      if runs > 0 then redis.call('HSET', task_key, 'runs', runs) else redis.call('HDEL', task_key, 'runs') end
      redis.call('HSET', task_key, 'status', 'delayed', 'due', not_before)
      zadd_counted(KEYS[1], not_before, member, 'waiting', topic)
      wake_if_head(KEYS[1], member, channel, not_before)
    elseif next_due and (outcome == 'ok' or outcome == 'retry') then
      if next_due < not_before then next_due = not_before end
      redis.call('HSET', task_key, 'status', 'delayed', 'due', next_due, 'last_due', r[3] or now)
      schedules.add(member)  -- a no-op but for a task added before the index existed
      zadd_counted(KEYS[1], next_due, member, 'waiting', topic)
      wake_if_head(KEYS[1], member, channel, next_due)
    elseif outcome == 'retry' then
      -- Next run counts from the previous due time; if that is past (or
      -- unreadable), from now.
      local due = (int_of(r[3]) or now) + gap
      if due < now then due = now + gap end
      if due < not_before then due = not_before end
      redis.call('HSET', task_key, 'status', 'delayed', 'due', due)
      zadd_counted(KEYS[1], due, member, 'waiting', topic)
      wake_if_head(KEYS[1], member, channel, due)
    elseif outcome == 'ok' then
      redis.call('HSET', task_key, 'status', 'ok')
      index_finished(member, KEYS[3], now, task_key, retention, 'ok', topic)
    elseif outcome == 'failed' then
      redis.call('HSET', task_key, 'status', 'failed')
      index_finished(member, KEYS[4], now, task_key, retention, 'failed', topic)
    else
      quarantine(aside, task_key, member, err)  -- writes its own error
      record_error = false
    end
    if ARGV[i + 5] == 'end' or outcome == 'quarantine' then schedules.remove(member) end
    if record_error then
      if err == '' then
        if r[4] then redis.call('HDEL', task_key, 'error') end
      else
        redis.call('HSET', task_key, 'error', err)
      end
    end
    if attempt ~= '' and kept > 0 then
      redis.call('HSET', task_key, 'attempts', logged(r[6], attempt))
    end
    applied[#applied + 1] = 1
  else
    applied[#applied + 1] = 0
  end
end
flush_stats(KEYS[6], KEYS[7], ARGV[4], now)
return applied
