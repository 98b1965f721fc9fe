-- add: write (upsert, or insert-if-absent) a batch of tasks of one bucket (docs/protocol.md, section 3).
-- KEYS[1]       delayed   P{N}:delayed      the bucket's due index; the script names the bucket's other keys
--                                           from its tag P{N}: (all under it, which Redis Cluster routes by)
-- KEYS[1 + n]   record    P{N}:t:<member>   task n's record
-- ARGV[1]       flags     '1' nx (insert only) or '0' (replace), then 'c' ('1c', '0c') when the producer
--                         checked every task itself (docs/protocol.md, section 7): a spec is then read only for
--                         what the scripts depend on (unread_ok, _gate.lua), not held to the whole gate
-- ARGV[2]       channel   Pwake:N, the bucket's wake channel
-- ARGV[4n - 1]  spec      task n's spec JSON
-- ARGV[4n]      priority  '1', '2' or '3'
-- ARGV[4n + 1]  mode      'delay' (value is relative to now) or 'at' (absolute); a recurring task's mode ends
--                         in '*' ('delay*', 'at*'), which also puts it in the `recurring` index; 'next*'
--                         (value 0): a cron task whose first due time the daemon resolves (docs/protocol.md);
--                         'debounce' (value 'WAIT:MOST', ms, MOST may be empty): due WAIT from now, but never
--                         later than MOST after the first add of the pending run (the record's `since`)
-- ARGV[4n + 2]  value     ms, as the mode says
-- Reply: written, the number of tasks written (a task that exists is not, with nx)
-- A relative delay is resolved here, on Redis's clock. Replacing a task bumps
-- its claim token, so a worker still running the old version cannot finish it.
-- The task's member (`topic:id`) is read from its record's key.
-- Redis work per call is what a single add (a web request) waits for, so a fresh task
-- costs TIME, ZRANGE, EXISTS, HSET, ZADD and HINCRBY and nothing else: the keys only a
-- replacement touches are type-checked at the first replacement (a set-aside cannot
-- fail, so checking them after earlier tasks' writes keeps the rule), and `delayed`'s
-- type is checked by reading its head with pcall, before any write.
local delayed, flags, channel = KEYS[1], ARGV[1], ARGV[2]
local records = KEYS  -- task n's record: records[1 + n]; its values: unpack(ARGV, 4n - 1, 4n + 2)
local now = now_ms()
local nx, checked = flags == '1' or flags == '1c', flags == '0c' or flags == '1c'
local tag = string.sub(delayed, 1, -8)  -- `P{N}:` of `P{N}:delayed`
local prefix = tag .. 't:'
local tasks = (#ARGV - 2) / 4
if string.sub(delayed, -7) ~= 'delayed' or (#ARGV - 2) % 4 ~= 0 or #records ~= 1 + tasks then
  return redis.error_reply('ERR delayd:bad-call KEYS and ARGV do not follow add.lua (docs/protocol.md)')
end

-- Every task of the call, in order: its key, priority, mode, value and spec. Fills `names`
-- with each task's member and topic (2n - 1, 2n), and `origins` with a URL task's origin (its record's
-- `host`); `task` is the task being checked.
local names, origins, task = {}, {}, 0
local check_spec  -- spec_gate()'s, made for the first spec that needs it
local function check_all()
  local prefix_len = #prefix
  local last_topic  -- a topic already checked
  for i = 3, #ARGV, 4 do
    task = task + 1
    local task_key = records[1 + task]
    local spec, priority, mode, value = unpack(ARGV, i, i + 3)
    if string.sub(task_key, 1, prefix_len) ~= prefix then
      refuse('key', 'not a record key of this bucket: ' .. prefix .. '<topic>:<id>')
    end
    local member = string.sub(task_key, prefix_len + 1)
    local topic, id = string.match(member, '^(.*):([^:]*)$')
    if not topic then refuse('id', 'the record key is not <prefix>t:<topic>:<id>') end
    if topic ~= last_topic then
      check_name('topic', topic)
      last_topic = topic
    end
    check_name('id', id)
    if priority ~= '1' and priority ~= '2' and priority ~= '3' then refuse('priority', 'must be 1, 2 or 3') end
    local at, recurs = false, false
    if mode == 'delay' then
    elseif mode == 'at' then at = true
    elseif mode == 'delay*' then recurs = true
    elseif mode == 'at*' then at, recurs = true, true
    elseif mode == 'next*' then
      recurs = true
      if value ~= '0' then refuse('mode', 'next* takes the value 0') end
    elseif mode == 'debounce' then
      local wait, most = string.match(value, '^(%d+):(%d*)$')
      if not wait or #wait > 12 or #most > 12 or tonumber(wait) > TEN_YEARS * 1000
          or (most ~= '' and (tonumber(most) > TEN_YEARS * 1000 or tonumber(most) < tonumber(wait))) then
        refuse('debounce', "takes 'WAIT:MOST' (ms; MOST empty or >= WAIT, each at most ten years)")
      end
      if nx then refuse('debounce', 'give debounce or nx, not both') end
      value = '0'
    else
      refuse('mode', 'must be delay, at, delay*, at*, next* or debounce')
    end
    local ms = int_of(value)
    if not ms or ms < 0 or ms > (at and 1e14 or TEN_YEARS * 1000) then
      refuse(at and 'at' or 'delay', 'must be an integer of ms from 0 to ' .. (at and '1e14' or 'ten years'))
    end
    local read, url = false, nil
    if checked and not recurs then read, url = unread_ok(spec) end
    if not read then
      local decoded, t = false, nil
      if checked and #spec <= MAX_SPEC then decoded, t = pcall(cjson.decode, spec) end
      if decoded and plain_ok(t, spec, mode, recurs) then
        url = t.url
      else  -- a call without 'c', or a spec plain_ok leaves to the whole gate (which names the refusal)
        check_spec = check_spec or spec_gate()
        url = check_spec(spec, mode, recurs)
      end
    end
    if url then origins[task] = origin_of(url) end
    names[2 * task - 1], names[2 * task] = member, topic
  end
end

local passed, refusal = pcall(check_all)
if not passed then
  if type(refusal) ~= 'string' or string.sub(refusal, 1, #REFUSED) ~= REFUSED then error(refusal, 0) end
  return redis.error_reply('ERR ' .. refusal .. ' (task ' .. task .. ' of the call)')
end

local schedules  -- the recurring index (lib: recurring_index), made for the first task that needs it
local head = redis.pcall('ZRANGE', delayed, '0', '0', 'WITHSCORES')  -- (text: a Lua number is formatted per call)
if head['err'] then
  expect('zset', delayed)
  head = {}
end
local head_due = tonumber(head[2] or math.huge)

local function replacing()
  --[[lib]]
  local leases, done_ok, done_failed, done_deleted = tag .. 'leases', tag .. 'done:ok', tag .. 'done:failed',
    tag .. 'done:deleted'
  expect('zset', leases, done_ok, done_failed, done_deleted)
  local quarantine_key = tag .. 'quarantine'
  expect('hash', quarantine_key)
  -- Clears what the old record (its fields `old_*`, nil when its key is not a hash) left in the bucket's
  -- indexes; returns the new record's claim token.
  return function(task_key, member, topic, recurs, old_status, old_queued, old_priority, old_host, old_claim,
                  old_created)
    -- A live ready-list entry of the old record goes stale with it; a URL task still to be delivered
    -- no longer waits for its host.
    if old_queued == '1' then count_ready(old_priority, topic, -1) end
    if PENDING[old_status] then count_host(old_host, -1) end
    redis.call('HDEL', quarantine_key, member)  -- a quarantine reason belongs to the old record
    redis.call('DEL', task_key)
    zrem_counted(leases, member, 'running', topic)
    zrem_counted(done_ok, member, 'ok', topic)
    zrem_counted(done_failed, member, 'failed', topic)
    zrem_counted(done_deleted, member, 'deleted', topic)
    local parked = parked_key(tag .. 'paused', topic)
    expect('zset', parked)
    zrem_counted(parked, member, 'parked', topic)
    if not recurs then
      schedules = schedules or recurring_index(tag .. 'recurring')
      schedules.remove(member)
    end
    return claim_token(old_claim, old_created) + 1
  end
end

local replace  -- replacing()'s function, once a task of this call replaces one
local earliest, earliest_member = math.huge, nil  -- the batch's earliest due time, and a member due then
-- Times go to Redis as text made here once: a Lua number passed to redis.call is formatted
-- (sprintf %.17g) at every use, which costs more than the rest of a task's HSET.
local now_text = string.format('%d', now)
local written = 0
local by_topic = {}  -- topic -> {due, member, ...}: one ZADD per topic, not per task
for n = 1, task do
  local spec, priority, mode, value = unpack(ARGV, 4 * n - 1, 4 * n + 2)
  local task_key, member, topic = records[1 + n], names[2 * n - 1], names[2 * n]
  -- EXISTS first: a fresh task (the usual case) needs nothing else. A record without a
  -- status is corrupt, and its fields must not leak into the new one; a key that is not
  -- a hash is no task (record_fields gives false): it is replaced, even with nx.
  local exists = redis.call('EXISTS', task_key) == 1
  -- The old record: `old` true when there is one (its key a hash), and its fields.
  local old, old_status, old_queued, old_priority, old_claim, old_created, old_runs, old_since, old_host
  if exists then
    old, old_status, old_queued, old_priority, old_claim, old_created, old_runs, old_since, old_host =
      record_fields(task_key, 'status', 'queued', 'priority', 'claim', 'created', 'runs', 'since', 'host')
  end
  local recurs = mode == 'delay*' or mode == 'at*' or mode == 'next*'
  if not (nx and old) then
    local due, since = tonumber(value), nil
    if mode == 'delay' or mode == 'delay*' or mode == 'next*' then
      due = now + due
    elseif mode == 'debounce' then
      -- Debounce: due `wait` ms from now, but never later than `most` ms after the first add of
      -- the pending run (`since`): the old record's, when it is delayed and has not run yet.
      local wait, most = string.match(value, '^(%d+):(%d*)$')
      since = now
      if old_status == 'delayed' and (old_runs or '0') == '0' then since = int_of(old_since or old_created) or now end
      due = now + tonumber(wait)
      if most ~= '' and since + tonumber(most) < due then due = math.max(now, since + tonumber(most)) end
    end
    local due_text = string.format('%d', due)
    -- A fresh record leaves out runs (0), the default priority, and claim: its
    -- token is `created` (now), unless it replaces a record whose token is
    -- already that high (bumped more than once a ms), which must still go up.
    local token = now
    if exists then
      replace = replace or replacing()
      token = replace(task_key, member, topic, recurs, old_status, old_queued, old_priority, old_host, old_claim,
                      old_created)
    end
    local url = is_url(spec)
    local first = mode == 'next*'
    if not url and priority == DEFAULT_PRIORITY and token <= now and not first and not since then  -- the usual case
      redis.call('HSET', task_key, 'spec', spec, 'status', 'delayed', 'created', now_text, 'due', due_text)
    else
      local fields = {'spec', spec, 'status', 'delayed', 'created', now_text, 'due', due_text}
      -- A URL task is flagged `url=1`, so promote picks its ready list without reading the spec, and
      -- names its origin (`host`): claim checks it against the disabled hosts, and it is counted waiting
      -- for that host until it finishes (count_host).
      if url then
        fields[#fields + 1] = 'url'
        fields[#fields + 1] = '1'
        local host = origins[n]
        if host then
          fields[#fields + 1] = 'host'
          fields[#fields + 1] = host
          count_host(host, 1)
        end
      end
      if priority ~= DEFAULT_PRIORITY then
        fields[#fields + 1] = 'priority'
        fields[#fields + 1] = priority
      end
      if token > now then
        fields[#fields + 1] = 'claim'
        fields[#fields + 1] = token
      end
      -- A cron task without a first due time: due now, and its first claim gives it the calendar's
      -- next time after `created` instead of running it (delayd.workers.queue.claims, first_due).
      if first then
        fields[#fields + 1] = 'first'
        fields[#fields + 1] = 'cron'
      end
      -- A debounced add: when its pending run was first added (for the next debounced add's max wait).
      if since then
        fields[#fields + 1] = 'since'
        fields[#fields + 1] = string.format('%d', since)
      end
      redis.call('HSET', task_key, unpack(fields))
    end
    local scores = by_topic[topic]
    if not scores then
      scores = {}
      by_topic[topic] = scores
    end
    scores[#scores + 1] = due_score(due_text, priority)
    scores[#scores + 1] = member
    if recurs then
      schedules = schedules or recurring_index(tag .. 'recurring')
      schedules.add(member)
    end
    if due < earliest then earliest, earliest_member = due, member end
    written = written + 1
  end
end
-- `waiting` is counted here, straight to Redis (it only grows); a replacement's other
-- counts go through `counts` (flush_counts).
local counts_key = tag .. 'counts'
for topic, scores in pairs(by_topic) do
  local added = redis.call('ZADD', delayed, unpack(scores))
  if added > 0 then hincrby(counts_key, 'waiting|' .. topic, added) end
end
-- The bucket process is woken once per batch, if the batch moved its head earlier: '<ms> <member>'
-- (the member's record for its promote call to declare).
if earliest < head_due then redis.call('PUBLISH', channel, wake_message(earliest, earliest_member)) end
if next(counts) then flush_counts(counts_key) end
return written
