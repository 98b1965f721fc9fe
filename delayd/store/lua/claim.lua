-- claim: pops up to n members of one bucket's ready lists of one kind, weighted by priority, and starts
-- them, leasing them: one call. The records of the members popped (`P{N}:t:<member>`), and their topics'
-- parked (`paused:<topic>`) and held (`limited:<topic>`) sets, cannot be known before the call: the script
-- builds their names from the task-key prefix and the declared keys, all under the bucket's hash tag
-- `P{N}:`, which Redis Cluster routes the call by (docs/redis-layout.md, "Declared keys"). So do the
-- limits' keys of their topics (`tat:`, `run:`, `where:` under `P{limits}:`, whose `conf` is declared;
-- a single Redis only).
-- KEYS: leases, counts, totals, done:failed, quarantine, limited, paused, aside,
--       the run-event windows w:<n>, w:<n+1>, w:m:<m>, w:m:<m+1> (flush_stats), corrupt (set_aside),
--       the ready lists of priority 3, 2, 1 of the kind claimed (ready:3 ... or ready:u3 ...),
--       then on a single Redis the limits' conf (P{limits}:conf) and, for URL tasks, the disabled
--       hosts (P{hosts}:off)
-- ARGV: lease (ms), wake channel, retention (ms), limits prefix (P{limits}:, or '' on Redis Cluster),
--       bucket id, task-key prefix (P{N}:t:), the quotas of priority 3, 2, 1, n
-- Pops as pop_ready below says.
-- Counts each start by its lateness (now - due) for the statistics: one `le:` bucket per
-- start (the starts are the sum of the buckets: no `started` field to write as well).
-- Each claim bumps the task's claim token (the fencing token finish/renew check)
-- and, unless the task is being re-run after a lapsed lease, its run number.
-- An entry whose record has `queued` 0 or missing is stale (deleted, replaced or already claimed):
-- skipped. One whose record cannot be a ready task (not a hash, a `queued` flag that is
-- neither 0 nor 1, a status other than delayed, a member that is not topic:id) is
-- quarantined. Fields it only passes on (spec, due, created, ...) are checked by
-- the worker, which quarantines the task through finish.
-- A task of a topic paused since promote made it ready is parked, as pause.lua's park would (not run).
-- A task of a limited topic (docs/redis-layout.md, "Limits") starts only if its limit lets it
-- (while the bucket holds earlier tasks of the topic, only when promote released it, taking its
-- start and slot for it then; a released task not started gives that slot back; a lapsed run runs again
-- without another start, in a free slot, ahead of them): else
-- it is held, in `limited:<topic>` at its due time, unchanged (not run, not counted as a run),
-- and the topic's entry in `limited` says when promote should look at it again. A held task
-- leaves its slot of the call unused: the caller claims again. A released task's wait for its limit
-- is counted apart (`limited`, `limited_ms`) from its lateness, which keeps only the daemon's own delay.
-- A URL task whose host (scheme://host:port) is disabled (delayd hosts disable) is set aside as a
-- paused topic's task is (not run, not counted as a run): parked in `paused:<topic>` at its due time,
-- its topic named in `aside`, whose topics a host's enable resumes (Store.enable_steps). Its host is
-- the record's `host` (written by add), looked at only while some host is disabled: otherwise a claim
-- pays one HKEYS of an empty key.
-- Returns {now, members popped, then per task started 9 values: member, spec, runs, claim, due, created,
--          last error, priority, first ('cron': a first due time to resolve, see add.lua; or '')}

-- Pop up to n members of the bucket's ready lists (priority 3, 2, 1), weighted by priority: the first
-- pass takes up to each priority's quota (`quota`, by the same index), a second fills whatever is left
-- over in priority order (favours high priorities, never starves priority 1).
local function pop_ready(lists, quota, n)
  local members = {}
  local emptied = {}  -- lists this call found short: the second pass skips them
  local function pop(p, want)
    if want <= 0 or emptied[p] then return end
    local popped = on('list', 'LPOP', lists[p], want)
    if not popped or #popped < want then emptied[p] = true end
    if not popped then return end
    for _, member in ipairs(popped) do members[#members + 1] = member end
  end
  for p = 1, 3 do pop(p, math.min(quota[p], n - #members)) end
  for p = 1, 3 do pop(p, n - #members) end
  return members
end

local now = now_ms()
local popped = pop_ready({KEYS[14], KEYS[15], KEYS[16]}, {tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])},
  tonumber(ARGV[10]))
if #popped == 0 then return {now, 0} end  -- (nothing ready: none of the reads below)
local lease, prefix = tonumber(ARGV[1]), ARGV[6]
-- Numbers every started task writes, as text once: a Lua number given to redis.call is formatted per
-- argument (%.17g, the dearest step of a task's claim after the commands themselves).
local now_text, leased_until = string.format('%d', now), string.format('%d', now + lease)
local aside = {failed = KEYS[4], quarantine = KEYS[5], now = now, retention = tonumber(ARGV[3])}
local out = {now, #popped}
local taken = 0
local lease_head = on('zset', 'ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local leased = {}  -- the leases, one ZADD per topic (batch_add)
local lp, bucket = ARGV[4], ARGV[5]
local limits = limits_of(lp)
local gates, holding, held = {}, {}, 0  -- topic -> gate; topic -> tasks held by this call
local off = nil  -- the disabled hosts: origin -> true, or nil when none is
if KEYS[18] then
  local origins = redis.pcall('HKEYS', KEYS[18])
  if type(origins) == 'table' and not origins['err'] and #origins > 0 then
    off = {}
    for _, origin in ipairs(origins) do off[origin] = true end
  end
end
-- Whether `topic` was paused in this bucket since promote made its tasks ready: one HGET per topic claimed, never
-- the whole `paused` hash (a claim costs the same whatever the number of topics paused: issue 41).
local pauses, none_paused = {}, nil  -- (none_paused: the hash is empty, usually: no topic looked up)
local function paused(topic)
  if none_paused == nil then none_paused = on('hash', 'HLEN', KEYS[7]) == 0 end
  if none_paused then return false end
  if pauses[topic] == nil then pauses[topic] = pause_generation(on('hash', 'HGET', KEYS[7], topic)) or false end
  return pauses[topic]
end

-- Park a ready task (its topic paused, or its host disabled: `host`): out of the ready count, parked
-- at its due time; a disabled host's topic is named in `aside`.
local function park(topic, member, task_key, r, host)
  redis.call('HSET', task_key, 'queued', '0')
  mark_parked(task_key, now)
  if r[12] then redis.call('HDEL', task_key, 'held', 'released') end
  count_ready(r[9], topic, -1)
  zadd_counted(parked_key(KEYS[7], topic), int_of(r[6]) or now, member, 'parked', topic)
  if host then on('set', 'SADD', KEYS[8], topic) end
end

-- Start a task of limited topic `topic` (record `r`) now, as the run with claim token `token`? Takes the
-- start from its gate if so.
local function admitted(topic, member, r, token)
  local g = gates[topic]
  if not g then
    g = gate(lp, topic, limits[topic], now_us())
    g.waiting = redis.call('EXISTS', held_key(KEYS[6], topic)) == 1
    gates[topic] = g
  end
  if r[13] or r[5] == '1' then return gate_claim_started(g, member, run_id(member, token), now + lease) end
  if g.waiting then return false end  -- earlier ones are held: after them
  return gate_take(g, run_id(member, token), now + lease)
end

-- A released task of `topic` that this claim does not start (deleted, replaced, parked, quarantined):
-- the slot promote took for it is free (at the end of the call, free_slots).
local unreserved = nil  -- topic -> members
local function unreserve(topic, member)
  if limits and limits[topic] and limits[topic].slots > 0 then
    unreserved = unreserved or {}
    unreserved[topic] = unreserved[topic] or {}
    table.insert(unreserved[topic], member)
  end
end

-- Hold a ready task back: out of the ready count, into its topic's held set at its due time.
local function hold(topic, member, task_key, r)
  if r[12] then  -- held before: its first hold counts (a release that lost its start is forgotten)
    redis.call('HSET', task_key, 'queued', '0')
    if r[13] then redis.call('HDEL', task_key, 'released') end
  else
    redis.call('HSET', task_key, 'queued', '0', 'held', now)
  end
  count_ready(r[9], topic, -1)
  zadd_counted(held_key(KEYS[6], topic), int_of(r[6]) or now, member, 'throttled', topic)
  holding[topic] = (holding[topic] or 0) + 1
  held = held + 1
  gates[topic].waiting = true
end

-- Why the record `r` of a popped entry cannot be claimed, or nil.
local function defect(r, task_key, member)
  if not r then return 'record is a ' .. key_type(task_key) .. ', not a hash' end
  if r[1] ~= '1' then return 'queued flag is ' .. string.sub(r[1], 1, 40) .. ', not 0 or 1' end
  if r[10] ~= 'delayed' then return 'ready entry with status ' .. string.sub(r[10] or '(none)', 1, 40) end
  if not string.find(member, ':', 1, true) then return 'member is not topic:id' end
end

-- Start (or hold, park, skip) the popped task `member`, whose record is `task_key`.
local function claim(member, task_key)
  local r = read_record(task_key, 'queued', 'spec', 'runs', 'claim', 'lapsed',
    'due', 'created', 'error', 'priority', 'status', 'first', 'held', 'released', 'host', 'parked', 'unparked')
  -- Entries whose task was deleted, replaced or already claimed are stale
  -- (queued is 0 or missing): skipped.
  local topic = topic_of(member)
  if r and not (r[1] and r[1] ~= '0') then  -- (a hard-deleted record reads as all nil: no released field)
    unreserve(topic, member)
    return
  end
  local reason = defect(r, task_key, member)
  local token = r and claim_token(r[4], r[7]) + 1
  local held_on_purpose = not reason and paused(topic)  -- (paused: parked; else a disabled host's park)
  if reason or held_on_purpose or off and off[r[14] or ''] then
    if r and r[13] then unreserve(topic, member) end
    if reason then
      if r and r[1] == '1' then count_ready(r[9], topic, -1) end
      quarantine(aside, task_key, member, reason)
    else
      park(topic, member, task_key, r, not held_on_purpose)
    end
  elseif limits and limits[topic] and not admitted(topic, member, r, token) then
    hold(topic, member, task_key, r)
  else
    local runs = int_of(r[3]) or 0  -- missing before the first run (or corrupt)
    if r[5] ~= '1' then runs = runs + 1 end
    redis.call('HSET', task_key, 'status', 'running', 'queued', '0', 'lapsed', '0',
      'claim', string.format('%d', token), 'runs', string.format('%d', runs), 'last_run', now_text)
    count_ready(r[9], topic, -1)
    batch_add(leased, KEYS[1], topic, member, leased_until)
    local late = now - (int_of(r[6]) or now)
    if r[12] then  -- held back by its limit: from its hold to its release (or now) is the limit's
      local waited = math.max(0, math.min(now, int_of(r[13]) or now) - (int_of(r[12]) or now))
      late = late - waited
      tally('limited', topic)
      tally('limited_ms', topic, waited)
      redis.call('HDEL', task_key, 'held', 'released')
    end
    if r[15] then  -- set aside on purpose (paused topic, disabled host): from its park to its let-go is not late
      late = late - math.max(0, math.min(now, int_of(r[16]) or now) - (int_of(r[15]) or now))
      redis.call('HDEL', task_key, 'parked', 'unparked')
    end
    tally_lateness(topic, late)
    local n = #out  -- (appended in place: no table a task)
    out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6], out[n + 7], out[n + 8], out[n + 9] =
      member, r[2] or '', runs, token, r[6] or '', r[7] or '', r[8] or '', r[9] or DEFAULT_PRIORITY, r[11] or ''
    taken = taken + 1
  end
end

for _, member in ipairs(popped) do claim(member, prefix .. member) end
flush_counted(leased, {[KEYS[1]] = 'running'}, 1)
for _, g in pairs(gates) do gate_close(g) end
if unreserved then free_slots(lp, unreserved, now, {[KEYS[6]] = true}) end  -- (other buckets: gate_next's time)
if held > 0 then
  -- The topic's entry in `limited`: when its limit next lets them start (earlier only), and a
  -- wake for the bucket process when that moved.
  local soonest = nil
  for topic, count in pairs(holding) do
    local at = gate_next(gates[topic], count)
    if on('zset', 'ZADD', KEYS[6], 'LT', 'CH', at, topic) == 1 then soonest = math.min(soonest or at, at) end
    redis.pcall('SADD', lp .. 'where:' .. topic, bucket)
  end
  if soonest then redis.call('PUBLISH', ARGV[2], soonest) end
end

-- The bucket process sleeps until its next due time or lease expiry; tell it
-- when this claim made a lease the earliest one.
if taken > 0 and (lease_head[2] == nil or tonumber(lease_head[2]) > now + lease) then
  redis.call('PUBLISH', ARGV[2], now + lease)
end
flush_stats(KEYS[2], KEYS[3], KEYS[9], KEYS[10], KEYS[11], KEYS[12], now)
return out
