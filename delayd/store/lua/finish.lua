-- finish: record the outcome of a batch of runs of one bucket.
-- KEYS: delayed, leases, done:ok, done:failed, quarantine, counts, totals, recurring,
--       the run-event windows w:<n>, w:<n+1>, w:m:<m>, w:m:<m+1> (flush_stats), corrupt (set_aside),
--       then each run's record,
--       then on a single Redis the limits' keys of the runs' topics and every bucket's limited (Store.limit_keys)
-- ARGV: retention (ms), wake channel,
--       attempts kept (the delivery log's length), limits prefix (P{limits}:, or '' on Redis
--       Cluster), then per run 8 values:
--       member, claim token, outcome ('ok'|'failed'|'retry'|'quarantine'|'defer'),
--       gap (ms, for retry), last error ('' clears it; the reason, for quarantine),
--       next due (ms; 'end' for a recurring task's last run; or ''),
--       wait (ms: the next run starts no earlier than now + wait; '' or 0 for none),
--       attempt (one line for the delivery log, or '')
-- A next due time (a recurring task's next run, ok or retry) puts the task back
-- to `delayed` at that time and keeps the due time this run was for in `last_due`;
-- 'end' or a quarantine takes it out of the `recurring` index (add puts it in).
-- `defer` is a run that was never made (its URL's circuit is open, or a cron task's first
-- due time was resolved): the task goes back to `delayed` at now + wait (or at the next due
-- time given) and gives back the run number claim counted.
-- A run whose claim token is stale (lease lapsed, task replaced or deleted), or
-- whose record is no longer a hash, changes nothing. Returns one 1 (applied) or
-- 0 (stale) per run.
-- A run of a topic with a concurrency limit gives its slot back, stale or not (SPEC 9: a run holds
-- its slot until it ends, whatever happened to its record; free_slots wakes the buckets holding the
-- topic's tasks).
-- Each run's record gets one HSET of every field it changes; the bucket process is
-- woken once per batch, if a run went back to `delayed` ahead of its head.
local now = now_ms()
local retention, channel = tonumber(ARGV[1]), ARGV[2]
-- Numbers every finished task writes, as text once (a Lua number is formatted per redis.call argument).
local now_text, retention_text = string.format('%d', now), string.format('%d', retention)
local kept = tonumber(ARGV[3]) or 0
local aside = {failed = KEYS[4], quarantine = KEYS[5], now = now, retention = retention}
local schedules = recurring_index(KEYS[8])
local applied = {}
local head_due = nil     -- the head of `delayed` before this call (read at the first re-queue)
local earliest, earliest_member = math.huge, nil  -- the earliest due time re-queued, and its member
-- Leases taken out and tasks indexed as finished, one ZREM / ZADD per topic (batch_add).
local unleased, indexed = {}, {}
local index_states = {[KEYS[3]] = 'ok', [KEYS[4]] = 'failed'}

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

-- The run's task waits again, in `delayed` at `due`; `fields` (for the one HSET) says so.
local function requeue(member, topic, due, fields, priority)
  if head_due == nil then
    head_due = tonumber(on('zset', 'ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2] or math.huge)
  end
  zadd_counted(KEYS[1], due_score(due, priority), member, 'waiting', topic)
  if due < earliest then earliest, earliest_member = due, member end
  fields[#fields + 1] = 'status'
  fields[#fields + 1] = 'delayed'
  fields[#fields + 1] = 'due'
  fields[#fields + 1] = due
end

local lp = ARGV[4]
local limits = limits_of(lp)
local freed = nil  -- topic -> members whose slot this call frees

for i = 5, #ARGV, 8 do
  local member, claim, outcome, gap, err = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 4]
  local next_due, wait, attempt = tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6]) or 0, ARGV[i + 7]
  local task_key = KEYS[14 + (i - 5) / 8]
  local r = read_record(task_key, 'claim', 'status', 'due', 'error', 'runs', 'attempts', 'host', 'priority')
  local topic = topic_of(member)
  if limits and limits[topic] and limits[topic].slots > 0 then  -- the run ended, recorded or stale
    freed = freed or {}
    freed[topic] = freed[topic] or {}
    table.insert(freed[topic], run_id(member, claim))
  end
  if r and r[1] == claim and r[2] == 'running' then
    local not_before = now + wait
    local fields = {}
    batch_add(unleased, KEYS[2], topic, member)
    tally(outcome, topic)
    if outcome == 'defer' then
      local runs = (int_of(r[5]) or 1) - 1
      if runs > 0 then
        fields = {'runs', runs}
      else  -- never run: no run number, no last run, and a first due time now resolved
        redis.call('HDEL', task_key, 'runs', 'last_run', 'first')
      end
      requeue(member, topic, next_due or not_before, fields, r[8])
    elseif next_due and (outcome == 'ok' or outcome == 'retry') then
      if next_due < not_before then next_due = not_before end
      fields = {'last_due', r[3] or now}
      requeue(member, topic, next_due, fields, r[8])
    elseif outcome == 'retry' then
      -- Next run counts from the previous due time; if that is past (or
      -- unreadable), from now.
      local due = (int_of(r[3]) or now) + gap
      if due < now then due = now + gap end
      if due < not_before then due = not_before end
      requeue(member, topic, due, fields, r[8])
    elseif outcome == 'ok' or outcome == 'failed' then
      fields = {'status', outcome}
      count_host(r[7], -1)  -- a URL task no longer waits for its host (a quarantine counts it itself)
      batch_add(indexed, KEYS[outcome == 'ok' and 3 or 4], topic, member, now_text)
      redis.call('PEXPIRE', task_key, retention_text)
    else
      quarantine(aside, task_key, member, err)  -- writes its own error
    end
    if ARGV[i + 5] == 'end' or outcome == 'quarantine' then schedules.remove(member) end
    if outcome ~= 'quarantine' then
      if err ~= '' then
        fields[#fields + 1] = 'error'
        fields[#fields + 1] = err
      elseif r[4] then
        redis.call('HDEL', task_key, 'error')
      end
    end
    if attempt ~= '' and kept > 0 then
      fields[#fields + 1] = 'attempts'
      fields[#fields + 1] = logged(r[6], attempt)
    end
    if #fields > 0 then redis.call('HSET', task_key, unpack(fields)) end
    applied[#applied + 1] = 1
  else
    applied[#applied + 1] = 0
  end
end
flush_counted(unleased, {[KEYS[2]] = 'running'}, -1)
if freed then free_slots(lp, freed, now) end
flush_counted(indexed, index_states, 1)
if earliest < (head_due or math.huge) then
  redis.call('PUBLISH', channel, wake_message(earliest, earliest_member))
end
flush_stats(KEYS[6], KEYS[7], KEYS[9], KEYS[10], KEYS[11], KEYS[12], now)
return applied
