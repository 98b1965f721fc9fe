-- claim: pops up to n members of one bucket's ready lists of one kind, weighted by priority, and starts
-- them, leasing them: one call. The records of the members popped (`P{N}:t:<member>`), and their topics'
-- parked (`paused:<topic>`) and held (`limited:<topic>`) sets, cannot be known before the call: the script
-- builds their names from the task-key prefix and the declared keys, all under the bucket's hash tag
-- `P{N}:`, which Redis Cluster routes the call by (docs/redis-layout.md, "Declared keys"). So do the
-- limits' keys of their topics (`tat:`, `run:`, `where:` under `P{limits}:`, whose `conf` is declared;
-- a single Redis only).
-- KEYS[1]   leases          P{N}:leases
-- KEYS[2]   counts_key      P{N}:counts
-- KEYS[3]   totals_key      P{N}:totals
-- KEYS[4]   done_failed     P{N}:done:failed
-- KEYS[5]   quarantine_key  P{N}:quarantine
-- KEYS[6]   limited         P{N}:limited
-- KEYS[7]   paused          P{N}:paused
-- KEYS[8]   aside           P{N}:aside
-- KEYS[9]   window          P{N}:w:<n>        the run-event windows of the caller's clock (flush_stats)
-- KEYS[10]  next_window     P{N}:w:<n+1>
-- KEYS[11]  minute          P{N}:w:m:<m>
-- KEYS[12]  next_minute     P{N}:w:m:<m+1>
-- KEYS[13]  corrupt         P{N}:corrupt      (declared only: set_aside names it)
-- KEYS[14]  ready_3         P{N}:ready:3|P{N}:ready:u3   the ready lists of the kind claimed, call/push or URL
-- KEYS[15]  ready_2         P{N}:ready:2|P{N}:ready:u2
-- KEYS[16]  ready_1         P{N}:ready:1|P{N}:ready:u1
-- KEYS[17]  limits_conf     P{limits}:conf    (declared only: limits_of names it) on a single Redis
-- KEYS[18]  hosts_off       P{hosts}:off      the disabled hosts, on a single Redis, for a claim of URL tasks
-- ARGV[1]   lease_ms        the lease of each task started
-- ARGV[2]   wake_channel    Pwake:N
-- ARGV[3]   retention       ms (a quarantined task's record expires after it)
-- ARGV[4]   limits_prefix   P{limits}:, or '' on Redis Cluster
-- ARGV[5]   bucket          N
-- ARGV[6]   prefix          the task-key prefix P{N}:t:
-- ARGV[7]   quota_3         of the n, the first pass's share of priority 3
-- ARGV[8]   quota_2
-- ARGV[9]   quota_1
-- ARGV[10]  n               the most members popped
-- Reply: {now, popped, tasks...}
--   now: Redis's clock (ms); popped: members popped (started, or held, parked, skipped, quarantined); tasks:
--   per task started {member, spec, runs, claim, due, created, error, priority, first} (first: 'cron', a
--   first due time to resolve, see add.lua; or '')
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
local leases, counts_key, totals_key, done_failed, quarantine_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local limited, paused, aside = KEYS[6], KEYS[7], KEYS[8]
local window, next_window, minute, next_minute = KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local ready_3, ready_2, ready_1, hosts_off = KEYS[14], KEYS[15], KEYS[16], KEYS[18]
local lease_ms, wake_channel, retention = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local limits_prefix, bucket, prefix = ARGV[4], ARGV[5], ARGV[6]
local quota_3, quota_2, quota_1, n = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])

-- Pop up to n members of the bucket's ready lists (priority 3, 2, 1), weighted by priority: the first
-- pass takes up to each priority's quota (`quota`, by the same index), a second fills whatever is left
-- over in priority order (favours high priorities, never starves priority 1).
local function pop_ready(lists, quota)
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
local popped = pop_ready({ready_3, ready_2, ready_1}, {quota_3, quota_2, quota_1})
if #popped == 0 then return {now, 0} end  -- (nothing ready: none of the reads below)
-- Numbers every started task writes, as text once: a Lua number given to redis.call is formatted per
-- argument (%.17g, the dearest step of a task's claim after the commands themselves).
local now_text, leased_until = string.format('%d', now), string.format('%d', now + lease_ms)
local quarantine_to = {failed = done_failed, quarantine = quarantine_key, now = now, retention = retention}
local out = {now, #popped}
local started = 0
local lease_head = on('zset', 'ZRANGE', leases, 0, 0, 'WITHSCORES')
local leased = {}  -- the leases, one ZADD per topic (batch_add)
local limits = limits_of(limits_prefix)
local gates, held_by_topic, held_count = {}, {}, 0  -- topic -> gate; topic -> tasks held by this call
local disabled_hosts = nil  -- origin -> true, or nil when none is disabled
if hosts_off then
  local origins = redis.pcall('HKEYS', hosts_off)
  if type(origins) == 'table' and not origins['err'] and #origins > 0 then
    disabled_hosts = {}
    for _, origin in ipairs(origins) do disabled_hosts[origin] = true end
  end
end
-- Whether `topic` was paused in this bucket since promote made its tasks ready: one HGET per topic claimed,
-- never the whole `paused` hash (a claim costs the same whatever the number of topics paused: issue 41).
local pauses, none_paused = {}, nil  -- (none_paused: the hash is empty, usually: no topic looked up)
local function paused_since(topic)
  if none_paused == nil then none_paused = on('hash', 'HLEN', paused) == 0 end
  if none_paused then return false end
  if pauses[topic] == nil then pauses[topic] = pause_generation(on('hash', 'HGET', paused, topic)) or false end
  return pauses[topic]
end

-- Park a ready task (its topic paused, or its host disabled: `host_disabled`): out of the ready count,
-- parked at its due time; a disabled host's topic is named in `aside`.
local function park(topic, member, task_key, priority, due, held_at, host_disabled)
  redis.call('HSET', task_key, 'queued', '0')
  mark_parked(task_key, now)
  if held_at then redis.call('HDEL', task_key, 'held', 'released') end
  count_ready(priority, topic, -1)
  zadd_counted(parked_key(paused, topic), int_of(due) or now, member, 'parked', topic)
  if host_disabled then on('set', 'SADD', aside, topic) end
end

-- Start a task of limited topic `topic` now, as the run with claim token `token`? Takes the start from its
-- gate if so. A task promote released (`released_at`), or a lapsed run running again, took its start before.
local function admitted(topic, member, token, released_at, lapsed)
  local g = gates[topic]
  if not g then
    g = gate(limits_prefix, topic, limits[topic], now_us())
    g.waiting = redis.call('EXISTS', held_key(limited, topic)) == 1
    gates[topic] = g
  end
  if released_at or lapsed == '1' then return gate_claim_started(g, member, run_id(member, token), now + lease_ms) end
  if g.waiting then return false end  -- earlier ones are held: after them
  return gate_take(g, run_id(member, token), now + lease_ms)
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
local function hold(topic, member, task_key, priority, due, held_at, released_at)
  if held_at then  -- held before: its first hold counts (a release that lost its start is forgotten)
    redis.call('HSET', task_key, 'queued', '0')
    if released_at then redis.call('HDEL', task_key, 'released') end
  else
    redis.call('HSET', task_key, 'queued', '0', 'held', now)
  end
  count_ready(priority, topic, -1)
  zadd_counted(held_key(limited, topic), int_of(due) or now, member, 'throttled', topic)
  held_by_topic[topic] = (held_by_topic[topic] or 0) + 1
  held_count = held_count + 1
  gates[topic].waiting = true
end

-- Why a popped entry cannot be claimed, or nil: its record (`hash` false when its key is not a hash),
-- with its `queued` flag and `status`.
local function unclaimable(task_key, hash, queued, status, member)
  if not hash then return 'record is a ' .. key_type(task_key) .. ', not a hash' end
  if queued ~= '1' then return 'queued flag is ' .. string.sub(queued, 1, 40) .. ', not 0 or 1' end
  if status ~= 'delayed' then return 'ready entry with status ' .. string.sub(status or '(none)', 1, 40) end
  if not string.find(member, ':', 1, true) then return 'member is not topic:id' end
end

-- Start (or hold, park, skip) the popped task `member`, whose record is `task_key`.
local function start(member, task_key)
  local hash, queued, spec, runs, claim, lapsed, due, created, last_error, priority, status, first, held_at,
        released_at, host, parked_at, unparked_at =
    record_fields(task_key, 'queued', 'spec', 'runs', 'claim', 'lapsed', 'due', 'created', 'error', 'priority',
                  'status', 'first', 'held', 'released', 'host', 'parked', 'unparked')
  -- Entries whose task was deleted, replaced or already claimed are stale
  -- (queued is 0 or missing): skipped.
  local topic = topic_of(member)
  if hash and not (queued and queued ~= '0') then  -- (a hard-deleted record reads as all nil: no released field)
    unreserve(topic, member)
    return
  end
  local reason = unclaimable(task_key, hash, queued, status, member)
  local token = hash and claim_token(claim, created) + 1
  local held_on_purpose = not reason and paused_since(topic)  -- (paused: parked; else a disabled host's park)
  if reason or held_on_purpose or disabled_hosts and disabled_hosts[host or ''] then
    if released_at then unreserve(topic, member) end
    if reason then
      if queued == '1' then count_ready(priority, topic, -1) end
      quarantine(quarantine_to, task_key, member, reason)
    else
      park(topic, member, task_key, priority, due, held_at, not held_on_purpose)
    end
  elseif limits and limits[topic] and not admitted(topic, member, token, released_at, lapsed) then
    hold(topic, member, task_key, priority, due, held_at, released_at)
  else
    local run = int_of(runs) or 0  -- missing before the first run (or corrupt)
    if lapsed ~= '1' then run = run + 1 end
    redis.call('HSET', task_key, 'status', 'running', 'queued', '0', 'lapsed', '0',
      'claim', string.format('%d', token), 'runs', string.format('%d', run), 'last_run', now_text)
    count_ready(priority, topic, -1)
    batch_add(leased, leases, topic, member, leased_until)
    local late = now - (int_of(due) or now)
    if held_at then  -- held back by its limit: from its hold to its release (or now) is the limit's
      local waited = math.max(0, math.min(now, int_of(released_at) or now) - (int_of(held_at) or now))
      late = late - waited
      tally('limited', topic)
      tally('limited_ms', topic, waited)
      redis.call('HDEL', task_key, 'held', 'released')
    end
    if parked_at then  -- set aside on purpose (paused topic, disabled host): from its park to its let-go is not late
      late = late - math.max(0, math.min(now, int_of(unparked_at) or now) - (int_of(parked_at) or now))
      redis.call('HDEL', task_key, 'parked', 'unparked')
    end
    tally_lateness(topic, late)
    local at = #out  -- (appended in place: no table a task)
    out[at + 1], out[at + 2], out[at + 3], out[at + 4], out[at + 5], out[at + 6], out[at + 7], out[at + 8],
      out[at + 9] = member, spec or '', run, token, due or '', created or '', last_error or '',
      priority or DEFAULT_PRIORITY, first or ''
    started = started + 1
  end
end

for _, member in ipairs(popped) do start(member, prefix .. member) end
flush_counted(leased, {[leases] = 'running'}, 1)
for _, g in pairs(gates) do gate_close(g) end
-- (other buckets' `limited`: at gate_next's time)
if unreserved then free_slots(limits_prefix, unreserved, now, {[limited] = true}) end
if held_count > 0 then
  -- The topic's entry in `limited`: when its limit next lets them start (earlier only), and a
  -- wake for the bucket process when that moved.
  local soonest = nil
  for topic, tasks in pairs(held_by_topic) do
    local at = gate_next(gates[topic], tasks)
    if on('zset', 'ZADD', limited, 'LT', 'CH', at, topic) == 1 then soonest = math.min(soonest or at, at) end
    redis.pcall('SADD', limits_prefix .. 'where:' .. topic, bucket)
  end
  if soonest then redis.call('PUBLISH', wake_channel, soonest) end
end

-- The bucket process sleeps until its next due time or lease expiry; tell it
-- when this claim made a lease the earliest one.
if started > 0 and (lease_head[2] == nil or tonumber(lease_head[2]) > now + lease_ms) then
  redis.call('PUBLISH', wake_channel, now + lease_ms)
end
flush_stats(counts_key, totals_key, window, next_window, minute, next_minute, now)
return out
