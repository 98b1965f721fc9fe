-- claim: take up to n ready tasks of one bucket, weighted by priority, and lease them.
-- KEYS: ready:3, ready:2, ready:1, leases, counts, totals, done:failed, quarantine
-- ARGV: task-key prefix, quota for priority 3, 2, 1, n, lease (ms), wake channel,
--       window-key prefix, retention (ms)
-- Counts each start by its lateness (now - due) for the statistics: one `le:` bucket per
-- start (the starts are the sum of the buckets: no `started` field to write as well).
-- Each claim bumps the task's claim token (the fencing token finish/renew check)
-- and, unless the task is being re-run after a lapsed lease, its run number.
-- An entry whose record cannot be a ready task (not a hash, a `queued` flag that is
-- neither 0 nor 1, a status other than delayed, a member that is not topic:id) is
-- quarantined. Fields it only passes on (spec, due, created, ...) are checked by
-- the worker, which quarantines the task through finish.
-- Returns {now, then per task 9 values: member, spec, runs, claim, due, created,
--          last error, priority, first ('cron': a first due time to resolve, see add.lua; or '')}
local now = now_ms()
local prefix, n, lease = ARGV[1], tonumber(ARGV[5]), tonumber(ARGV[6])
local quota = {tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])}
local aside = {failed = KEYS[7], quarantine = KEYS[8], now = now, retention = tonumber(ARGV[9])}
local out = {now}
local taken = 0
local lease_head = on('zset', 'ZRANGE', KEYS[4], 0, 0, 'WITHSCORES')
local leased = {}  -- the leases, one ZADD per topic (batch_add)

-- Why the record `r` of a popped entry cannot be claimed, or nil.
local function defect(r, task_key, member)
  if not r then return 'record is a ' .. key_type(task_key) .. ', not a hash' end
  if r[1] ~= '1' then return 'queued flag is ' .. string.sub(r[1], 1, 40) .. ', not 0 or 1' end
  if r[10] ~= 'delayed' then return 'ready entry with status ' .. string.sub(r[10] or '(none)', 1, 40) end
  if not string.find(member, ':', 1, true) then return 'member is not topic:id' end
end

local emptied = {}  -- lists this call found short: the second pass skips them

local function take(list, want)
  if want <= 0 or emptied[list] then return end
  local members = on('list', 'LPOP', list, want)
  if not members or #members < want then emptied[list] = true end
  if not members then return end
  for _, member in ipairs(members) do
    local task_key = prefix .. member
    local r = read_record(task_key, 'queued', 'spec', 'runs', 'claim', 'lapsed',
      'due', 'created', 'error', 'priority', 'status', 'first')
    -- Entries whose task was deleted, replaced or already claimed are stale
    -- (queued is 0 or missing): skipped.
    if not r or (r[1] and r[1] ~= '0') then
      local topic = topic_of(member)
      local reason = defect(r, task_key, member)
      if reason then
        if r and r[1] == '1' then count_ready(r[9], topic, -1) end
        quarantine(aside, task_key, member, reason)
      else
        local claim = claim_token(r[4], r[7]) + 1
        local runs = int_of(r[3]) or 0  -- missing before the first run (or corrupt)
        if r[5] ~= '1' then runs = runs + 1 end
        redis.call('HSET', task_key, 'status', 'running', 'queued', '0', 'lapsed', '0',
          'claim', claim, 'runs', runs, 'last_run', now)
        count_ready(r[9], topic, -1)
        batch_add(leased, KEYS[4], topic, member, now + lease)
        tally_lateness(topic, now - (int_of(r[6]) or now))
        for _, v in ipairs({member, r[2] or '', runs, claim, r[6] or '', r[7] or '', r[8] or '',
                            r[9] or DEFAULT_PRIORITY, r[11] or ''}) do
          out[#out + 1] = v
        end
        taken = taken + 1
      end
    end
  end
end

for p = 1, 3 do take(KEYS[p], math.min(quota[p], n - taken)) end
for p = 1, 3 do take(KEYS[p], n - taken) end
flush_counted(leased, {[KEYS[4]] = 'running'}, 1)

-- The bucket process sleeps until its next due time or lease expiry; tell it
-- when this claim made a lease the earliest one.
if taken > 0 and (lease_head[2] == nil or tonumber(lease_head[2]) > now + lease) then
  redis.call('PUBLISH', ARGV[7], now + lease)
end
flush_stats(KEYS[5], KEYS[6], ARGV[8], now)
return out
