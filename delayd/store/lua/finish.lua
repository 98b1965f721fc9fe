-- finish: record the outcome of a batch of runs of one bucket.
-- KEYS[1]        delayed         P{N}:delayed
-- KEYS[2]        leases          P{N}:leases
-- KEYS[3]        done_ok         P{N}:done:ok
-- KEYS[4]        done_failed     P{N}:done:failed
-- KEYS[5]        quarantine_key  P{N}:quarantine
-- KEYS[6]        counts_key      P{N}:counts
-- KEYS[7]        totals_key      P{N}:totals
-- KEYS[8]        recurring       P{N}:recurring
-- KEYS[9]        window          P{N}:w:<n>        the run-event windows of the caller's clock (flush_stats)
-- KEYS[10]       next_window     P{N}:w:<n+1>
-- KEYS[11]       minute          P{N}:w:m:<m>
-- KEYS[12]       next_minute     P{N}:w:m:<m+1>
-- KEYS[13]       corrupt         P{N}:corrupt      (declared only: set_aside names it)
-- KEYS[13 + r]   record          P{N}:t:<member>   run r's record
-- KEYS[14 + runs..] limit_keys   P{limits}:*|P{N}:limited   on a single Redis, the limits' keys of the runs'
--                                                 topics and every bucket's limited (Store.limit_keys)
-- ARGV[1]        retention       ms
-- ARGV[2]        wake_channel    Pwake:N
-- ARGV[3]        attempts_kept   the delivery log's length
-- ARGV[4]        limits_prefix   P{limits}:, or '' on Redis Cluster
-- ARGV[8r - 3]   member          run r's task
-- ARGV[8r - 2]   claim           its claim token
-- ARGV[8r - 1]   outcome         'ok', 'failed', 'retry', 'quarantine' or 'defer'
-- ARGV[8r]       gap             ms, for retry
-- ARGV[8r + 1]   err             its last error ('' clears it; the reason, for quarantine)
-- ARGV[8r + 2]   next_due        ms; 'end' for a recurring task's last run; or ''
-- ARGV[8r + 3]   wait            ms: the next run starts no earlier than now + wait ('' or 0 for none)
-- ARGV[8r + 4]   attempt         one line for the delivery log, or ''
-- Reply: {applied...}, per run 1 (applied) or 0 (stale)
-- A next due time (a recurring task's next run, ok or retry) puts the task back
-- to `delayed` at that time and keeps the due time this run was for in `last_due`;
-- 'end' or a quarantine takes it out of the `recurring` index (add puts it in).
-- `defer` is a run that was never made (its URL's circuit is open, or a cron task's first
-- due time was resolved): the task goes back to `delayed` at now + wait (or at the next due
-- time given) and gives back the run number claim counted.
-- A run whose claim token is stale (lease lapsed, task replaced or deleted), or
-- whose record is no longer a hash, changes nothing.
-- A run of a topic with a concurrency limit gives its slot back, stale or not (SPEC 9: a run holds
-- its slot until it ends, whatever happened to its record; free_slots wakes the buckets holding the
-- topic's tasks).
-- Each run's record gets one HSET of every field it changes; the bucket process is
-- woken once per batch, if a run went back to `delayed` ahead of its head.
local delayed, leases, done_ok, done_failed, quarantine_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local counts_key, totals_key, recurring = KEYS[6], KEYS[7], KEYS[8]
local window, next_window, minute, next_minute = KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local records = KEYS  -- run r's record: records[13 + r]; its values: unpack(ARGV, 8r - 3, 8r + 4)
local retention, wake_channel = tonumber(ARGV[1]), ARGV[2]
local attempts_kept, limits_prefix = tonumber(ARGV[3]) or 0, ARGV[4]

local now = now_ms()
-- Numbers every finished task writes, as text once (a Lua number is formatted per redis.call argument).
local now_text, retention_text = string.format('%d', now), string.format('%d', retention)
local quarantine_to = {failed = done_failed, quarantine = quarantine_key, now = now, retention = retention}
local schedules = recurring_index(recurring)
local applied = {}
local head_due = nil     -- the head of `delayed` before this call (read at the first re-queue)
local earliest, earliest_member = math.huge, nil  -- the earliest due time re-queued, and its member
-- Leases taken out and tasks indexed as finished, one ZREM / ZADD per topic (batch_add).
local unleased, indexed = {}, {}
local index_states = {[done_ok] = 'ok', [done_failed] = 'failed'}

-- Append `line` to the delivery log `log` (lines oldest first), keeping the last `attempts_kept`:
-- the oldest lines are cut off the log before the one concatenation.
local function logged(log, line)
  if attempts_kept <= 1 or type(log) ~= 'string' or log == '' then return line end
  local breaks, at = {}, string.find(log, '\n', 1, true)
  while at do
    breaks[#breaks + 1] = at
    at = string.find(log, '\n', at + 1, true)
  end
  local drop = #breaks + 2 - attempts_kept  -- lines too many once `line` is added (at most #breaks)
  if drop > 0 then log = string.sub(log, breaks[drop] + 1) end
  return log .. '\n' .. line
end

-- The run's task waits again, in `delayed` at `due`; `fields` (for the one HSET) says so.
local function requeue(member, topic, due, fields, priority)
  if head_due == nil then
    head_due = tonumber(on('zset', 'ZRANGE', delayed, 0, 0, 'WITHSCORES')[2] or math.huge)
  end
  zadd_counted(delayed, due_score(due, priority), member, 'waiting', topic)
  if due < earliest then earliest, earliest_member = due, member end
  fields[#fields + 1] = 'status'
  fields[#fields + 1] = 'delayed'
  fields[#fields + 1] = 'due'
  fields[#fields + 1] = due
end

local limits = limits_of(limits_prefix)
local freed = nil  -- topic -> members whose slot this call frees

for r = 1, (#ARGV - 4) / 8 do
  local member, claim, outcome, gap, err, next_due, wait, attempt = unpack(ARGV, 8 * r - 3, 8 * r + 4)
  local task_key = records[13 + r]
  local hash, stored_claim, status, due, last_error, runs, attempts, host, priority =
    record_fields(task_key, 'claim', 'status', 'due', 'error', 'runs', 'attempts', 'host', 'priority')
  local topic = topic_of(member)
  if limits and limits[topic] and limits[topic].slots > 0 then  -- the run ended, recorded or stale
    freed = freed or {}
    freed[topic] = freed[topic] or {}
    table.insert(freed[topic], run_id(member, claim))
  end
  if hash and stored_claim == claim and status == 'running' then
    local next_at = tonumber(next_due)
    local not_before = now + (tonumber(wait) or 0)
    local fields = {}
    batch_add(unleased, leases, topic, member)
    tally(outcome, topic)
    if outcome == 'defer' then
      local runs_left = (int_of(runs) or 1) - 1
      if runs_left > 0 then
        fields = {'runs', runs_left}
      else  -- never run: no run number, no last run, and a first due time now resolved
        redis.call('HDEL', task_key, 'runs', 'last_run', 'first')
      end
      requeue(member, topic, next_at or not_before, fields, priority)
    elseif next_at and (outcome == 'ok' or outcome == 'retry') then
      if next_at < not_before then next_at = not_before end
      fields = {'last_due', due or now}
      requeue(member, topic, next_at, fields, priority)
    elseif outcome == 'retry' then
      -- Next run counts from the previous due time; if that is past (or
      -- unreadable), from now.
      local retry_at = (int_of(due) or now) + tonumber(gap)
      if retry_at < now then retry_at = now + tonumber(gap) end
      if retry_at < not_before then retry_at = not_before end
      requeue(member, topic, retry_at, fields, priority)
    elseif outcome == 'ok' or outcome == 'failed' then
      fields = {'status', outcome}
      count_host(host, -1)  -- a URL task no longer waits for its host (a quarantine counts it itself)
      batch_add(indexed, outcome == 'ok' and done_ok or done_failed, topic, member, now_text)
      redis.call('PEXPIRE', task_key, retention_text)
    else
      quarantine(quarantine_to, task_key, member, err)  -- writes its own error
    end
    if next_due == 'end' or outcome == 'quarantine' then schedules.remove(member) end
    if outcome ~= 'quarantine' then
      if err ~= '' then
        fields[#fields + 1] = 'error'
        fields[#fields + 1] = err
      elseif last_error then
        redis.call('HDEL', task_key, 'error')
      end
    end
    if attempt ~= '' and attempts_kept > 0 then
      fields[#fields + 1] = 'attempts'
      fields[#fields + 1] = logged(attempts, attempt)
    end
    if #fields > 0 then redis.call('HSET', task_key, unpack(fields)) end
    applied[#applied + 1] = 1
  else
    applied[#applied + 1] = 0
  end
end
flush_counted(unleased, {[leases] = 'running'}, -1)
if freed then free_slots(limits_prefix, freed, now) end
flush_counted(indexed, index_states, 1)
if earliest < (head_due or math.huge) then
  redis.call('PUBLISH', wake_channel, wake_message(earliest, earliest_member))
end
flush_stats(counts_key, totals_key, window, next_window, minute, next_minute, now)
return applied
