-- add: write (upsert, or insert-if-absent) a batch of tasks of one bucket (docs/protocol.md).
-- KEYS: delayed, counts, recurring, leases, done:ok, done:failed, done:deleted, quarantine,
--       paused (the bucket's keys, all under its tag `P{N}:`), then per task 2 keys: its
--       record `P{N}:t:<topic>:<id>` and its topic's parked set `P{N}:paused:<topic>`
-- ARGV: nx (1/0), wake channel, then per task 4 values: spec JSON, priority, mode, value (ms)
-- mode: 'delay' (value is relative to now) or 'at' (absolute); a recurring task's
-- mode ends in '*' ('delay*', 'at*'), which also puts it in the `recurring` index.
-- A relative delay is resolved here, on Redis's clock. Replacing a task bumps
-- its claim token, so a worker still running the old version cannot finish it.
-- Returns one 1 (written) or 0 (exists, nx) per task.
-- Every key the script may touch is in KEYS (Cluster proxies and Redis-compatible servers
-- route and check by them); the task's member (`topic:id`) is read from its record's key.
-- Redis work per call is what a single add (a web request) waits for, so a fresh task
-- costs TIME, ZRANGE, EXISTS, HSET, ZADD and HINCRBY and nothing else: the keys only a
-- replacement touches are type-checked at the first replacement (a RENAME aside cannot
-- fail, so checking them after earlier tasks' writes keeps the rule), and `delayed`'s
-- type is checked by reading its head with pcall, before any write.
local now = now_ms()
local nx, channel = ARGV[1] == '1', ARGV[2]
local delayed, counts_key, recurring_key = KEYS[1], KEYS[2], KEYS[3]
local tag = string.sub(delayed, 1, -8)  -- `P{N}:` of `P{N}:delayed`
local prefix = tag .. 't:'
local bad_keys = string.sub(delayed, -7) ~= 'delayed' or counts_key ~= tag .. 'counts'
  or recurring_key ~= tag .. 'recurring' or KEYS[4] ~= tag .. 'leases' or KEYS[5] ~= tag .. 'done:ok'
  or KEYS[6] ~= tag .. 'done:failed' or KEYS[7] ~= tag .. 'done:deleted' or KEYS[8] ~= tag .. 'quarantine'
  or KEYS[9] ~= tag .. 'paused' or #KEYS ~= 9 + (#ARGV - 2) / 2 or (#ARGV - 2) % 4 ~= 0
if bad_keys then
  return redis.error_reply('ERR delayd:bad-call KEYS and ARGV do not follow add.lua (docs/protocol.md)')
end
local schedules  -- the recurring index (lib: recurring_index), made for the first task that needs it
local head = redis.pcall('ZRANGE', delayed, 0, 0, 'WITHSCORES')
if head['err'] then
  expect('zset', delayed)
  head = {}
end
local head_due = tonumber(head[2] or math.huge)

local function replacing()
  --[[lib]]
  expect('zset', KEYS[4], KEYS[5], KEYS[6], KEYS[7])
  local quarantine_key = KEYS[8]
  expect('hash', quarantine_key)
  return function(task_key, parked, member, topic, recurs, old)
    -- A live ready-list entry of the old record goes stale with it.
    if old[2] == '1' then count_ready(old[3], topic, -1) end
    redis.call('HDEL', quarantine_key, member)  -- a quarantine reason belongs to the old record
    redis.call('DEL', task_key)
    zrem_counted(KEYS[4], member, 'running', topic)
    zrem_counted(KEYS[5], member, 'ok', topic)
    zrem_counted(KEYS[6], member, 'failed', topic)
    zrem_counted(KEYS[7], member, 'deleted', topic)
    expect('zset', parked)
    zrem_counted(parked, member, 'parked', topic)
    if not recurs then
      schedules = schedules or recurring_index(recurring_key)
      schedules.remove(member)
    end
    return claim_token(old[4], old[5]) + 1
  end
end

local replace  -- replacing()'s function, once a task of this call replaces one
local earliest = math.huge
local written = {}
local by_topic = {}  -- topic -> {due, member, ...}: one ZADD per topic, not per task
for i = 3, #ARGV, 4 do
  local spec, priority, mode = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local value = tonumber(ARGV[i + 3])
  local k = 10 + (i - 3) / 2
  local task_key, parked = KEYS[k], KEYS[k + 1]
  local member = string.sub(task_key, #prefix + 1)
  -- EXISTS first: a fresh task (the usual case) needs nothing else. A record without a
  -- status is corrupt, and its fields must not leak into the new one; a key that is not
  -- a hash is no task (read_record gives nil): it is replaced, even with nx.
  local exists = redis.call('EXISTS', task_key) == 1
  local old  -- the old record's fields; nil when there is none, or the key is not a hash
  if exists then old = read_record(task_key, 'status', 'queued', 'priority', 'claim', 'created') end
  local recurs = mode == 'delay*' or mode == 'at*'
  if nx and old then
    written[#written + 1] = 0
  else
    local due = value
    if mode == 'delay' or mode == 'delay*' then due = now + value end
    local topic = topic_of(member)
    -- A fresh record leaves out runs (0), the default priority, and claim: its
    -- token is `created` (now), unless it replaces a record whose token is
    -- already that high (bumped more than once a ms), which must still go up.
    local token = now
    if exists then
      replace = replace or replacing()
      token = replace(task_key, parked, member, topic, recurs, old or {})
    end
    local url = is_url(spec)
    if not url and priority == DEFAULT_PRIORITY and token <= now then  -- the usual case: no table to build
      redis.call('HSET', task_key, 'spec', spec, 'status', 'delayed', 'created', now, 'due', due)
    else
      local fields = {'spec', spec, 'status', 'delayed', 'created', now, 'due', due}
      -- A URL task is flagged `url=1`, so promote picks its ready list without reading the spec.
      if url then
        fields[#fields + 1] = 'url'
        fields[#fields + 1] = '1'
      end
      if priority ~= DEFAULT_PRIORITY then
        fields[#fields + 1] = 'priority'
        fields[#fields + 1] = priority
      end
      if token > now then
        fields[#fields + 1] = 'claim'
        fields[#fields + 1] = token
      end
      redis.call('HSET', task_key, unpack(fields))
    end
    local scores = by_topic[topic]
    if not scores then
      scores = {}
      by_topic[topic] = scores
    end
    scores[#scores + 1] = due
    scores[#scores + 1] = member
    if recurs then
      schedules = schedules or recurring_index(recurring_key)
      schedules.add(member)
    end
    if due < earliest then earliest = due end
    written[#written + 1] = 1
  end
end
-- `waiting` is counted here, straight to Redis (it only grows); a replacement's other
-- counts go through `counts` (flush_counts).
for topic, scores in pairs(by_topic) do
  local added = redis.call('ZADD', delayed, unpack(scores))
  if added > 0 then hincrby(counts_key, 'waiting|' .. topic, added) end
end
-- The bucket process is woken once per batch, if the batch moved its head earlier.
if earliest < head_due then redis.call('PUBLISH', channel, earliest) end
if replace then flush_counts(counts_key) end
return written
