-- Redis's clock in milliseconds: every due time and lease is on this clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- A stored count, time (ms) or token as an integer, or nil. tonumber alone also reads
-- nan, inf, 1e400, fractions and exponents: ZADD refuses a nan score (failing the script
-- after its first write), and a token like 1.5 or 1e17 goes back to the worker as another
-- number than the one stored, so its run could never finish and would run again forever.
local function int_of(text)
  local n = tonumber(text)
  if n and n == math.floor(n) and n >= -2^53 and n <= 2^53 then return n end
  return nil
end

local function key_type(key)
  return redis.call('TYPE', key)['ok']
end

-- Keys set aside (expect) kept per slot, the oldest dropped first; a DUMP larger than this is not
-- kept (only why the key was set aside is).
local CORRUPT_KEPT, CORRUPT_DUMP_MAX = 16, 1048576

-- Set `key` (found a `found` where a `kind` belongs) aside in the hash `<tag>corrupt` of its slot
-- (`P{N}:corrupt`, `P{limits}:corrupt`, ...; every call that may do so passes it in KEYS): field
-- `<key>` its DUMP (RESTORE brings it back under any name), `<key>|why` '<ms> a <found> where a <kind>
-- belongs'; then the key is deleted. A set-aside hash that is not a hash, or full of fields that are
-- not ours, is deleted first.
local function set_aside(key, found, kind)
  local aside = string.match(key, '^[^{]*{[^}]*}:') .. 'corrupt'
  local payload = redis.call('DUMP', key)
  local why = now_ms() .. ' a ' .. found .. ' where a ' .. kind .. ' belongs'
  if #payload > CORRUPT_DUMP_MAX then
    why = why .. ' (its DUMP of ' .. #payload .. ' bytes is not kept)'
    payload = ''
  end
  local fields = redis.pcall('HKEYS', aside)
  if fields['err'] then
    redis.call('DEL', aside)
    fields = {}
  end
  if #fields >= 2 * CORRUPT_KEPT and redis.call('HEXISTS', aside, key) == 0 then
    local oldest, oldest_at = nil, math.huge
    for _, field in ipairs(fields) do
      local at = string.sub(field, -4) == '|why'
        and int_of(string.match(redis.call('HGET', aside, field) or '', '^%d+'))
      if at and at < oldest_at then oldest, oldest_at = string.sub(field, 1, -5), at end
    end
    if oldest then redis.call('HDEL', aside, oldest, oldest .. '|why') else redis.call('DEL', aside) end
  end
  redis.call('HSET', aside, key, payload, key .. '|why', why)
  redis.call('DEL', key)
end

-- Each key that exists with another type than `kind` (a string where a sorted set
-- belongs) is set aside (set_aside), kept for a person to look at; the script then
-- goes on as if the key were empty, instead of failing on WRONGTYPE.
local function expect(kind, ...)
  for _, key in ipairs({...}) do
    local t = key_type(key)
    if t ~= kind and t ~= 'none' then set_aside(key, t, kind) end
  end
end

-- `cmd` on the bucket's own key `key` (of type `kind`), its reply. A key of another type
-- makes the command fail (WRONGTYPE) before it changes anything: the key is then set aside
-- (expect) and the command runs on the empty key instead. One command where a TYPE check
-- before each key used would be two: a script pays only for the keys it touches.
local function on(kind, cmd, key, ...)
  local reply = redis.pcall(cmd, key, ...)
  if type(reply) == 'table' and reply['err'] then
    expect(kind, key)
    reply = redis.call(cmd, key, ...)
  end
  return reply
end

-- The fields named of a task record (HMGET), after `true`; only `false` when the key holds something other
-- than a hash: `local hash, status, due = record_fields(key, 'status', 'due')`.
local function record_fields(task_key, ...)
  local fields = redis.pcall('HMGET', task_key, ...)
  if fields['err'] then return false end
  return true, unpack(fields)
end

-- Record fields left out when they hold their default (docs/redis-layout.md):
-- priority 2, runs 0, and claim, whose default is the record's `created` time.
-- Every pending task saves their bytes.
local DEFAULT_PRIORITY = '2'

-- The claim token of a record from its `claim` and `created` fields. A fresh
-- or replaced record's tokens start from the time it was written, so they stay
-- near Redis's clock (each bump is +1, and there is rarely more than one per ms
-- on one task). After a hard delete, which leaves nothing to bump, a re-added
-- task therefore still never hands out a token a worker of the deleted one holds.
-- A corrupt (not an integer) field reads as missing rather than failing the whole script.
local function claim_token(claim, created)
  return int_of(claim) or int_of(created) or 0
end

-- The bucket's index of recurring tasks, `P{N}:recurring`: a zset of members, all at score 0
-- so that it reads in name order (the dashboard's schedules page). The key is looked at on
-- first use only, so a call that touches no recurring task pays nothing for it, and removal
-- from an index that does not exist costs one TYPE per call, not a command per task.
local function recurring_index(key)
  local kind
  local function look()
    if kind == nil then
      kind = key_type(key)
      if kind ~= 'zset' and kind ~= 'none' then
        expect('zset', key)
        kind = 'none'
      end
    end
  end
  return {
    add = function(member)
      look()
      redis.call('ZADD', key, 0, member)
      kind = 'zset'
    end,
    remove = function(member)
      look()
      if kind == 'zset' then redis.call('ZREM', key, member) end
    end,
  }
end

local function topic_of(member)
  return string.match(member, '^(.*):') or member
end

-- Statistics (docs/redis-layout.md, "Counters"). Each script adds up its changes
-- in these tables, by topic, and writes them once at the end with one HINCRBY per
-- field: the Redis cost is per batch and per distinct topic, not per task.
--   counts[topic][state]: change of the number of tasks in that state (a live gauge)
--   runs[topic][event]:   events (runs by outcome, starts, lateness buckets)
-- Fields in Redis are '<state or event>|<topic>'.
local counts, runs = {}, {}

local READY = {['3'] = 'ready:3', ['2'] = 'ready:2', ['1'] = 'ready:1'}

local function add_to(tables, topic, name, delta)
  local t = tables[topic]
  if not t then
    t = {}
    tables[topic] = t
  end
  t[name] = (t[name] or 0) + delta
end

local function count_state(state, topic, delta)
  add_to(counts, topic, state, delta)
end

-- `priority` as read from a record: nil is the default.
local function count_ready(priority, topic, delta)
  add_to(counts, topic, READY[priority or DEFAULT_PRIORITY] or 'ready:?', delta)
end

-- A URL task's record names its origin (`host`, written by add) and is counted, while it is to be
-- delivered (status delayed or running), as `host|<origin>` in `counts` (delayd hosts: the tasks waiting
-- for a host). A record without the field (a URL without an origin) is not counted.
local PENDING = {delayed = true, running = true}

local function count_host(host, delta)
  if host then add_to(counts, host, 'host', delta) end
end

-- ZREM / ZADD that keep the state count of `member` in step with the index.
local function zrem_counted(zset, member, state, topic)
  local removed = on('zset', 'ZREM', zset, member) == 1
  if removed then count_state(state, topic or topic_of(member), -1) end
  return removed
end

local function zadd_counted(zset, score, member, state, topic)
  if on('zset', 'ZADD', zset, score, member) == 1 then count_state(state, topic or topic_of(member), 1) end
end

-- HINCRBY that cannot fail on stored data: a counter that is not an integer starts
-- again from this change, and a key that is not a hash is set aside first.
local function hincrby(key, field, delta)
  local value = redis.pcall('HINCRBY', key, field, delta)
  if type(value) == 'number' then return value end
  expect('hash', key)
  redis.call('HSET', key, field, delta)
  return tonumber(delta)  -- (a count given as text: flush_stats)
end

-- Write the state counts the script changed to `counts_key`. A state count never goes
-- below 0: an index entry someone else wrote (never counted in) that a script takes out
-- would make it negative; it stops at 0 instead (gone).
local function flush_counts(counts_key)
  for topic, t in pairs(counts) do
    for state, delta in pairs(t) do
      local field = state .. '|' .. topic
      if delta ~= 0 and hincrby(counts_key, field, delta) <= 0 then
        redis.call('HDEL', counts_key, field)
      end
    end
  end
end

-- Index `member` as finished (`state`: ok, failed or deleted) and let its record expire.
local function index_finished(member, done_key, now, task_key, retention, state, topic)
  zadd_counted(done_key, now, member, state, topic)
  redis.call('PEXPIRE', task_key, retention)
end


-- delete: soft (status 'deleted', kept for the retention period) or hard (gone).
-- KEYS[1]   task_key        P{N}:t:<member>
-- KEYS[2]   delayed         P{N}:delayed
-- KEYS[3]   leases          P{N}:leases
-- KEYS[4]   done_ok         P{N}:done:ok
-- KEYS[5]   done_failed     P{N}:done:failed
-- KEYS[6]   done_deleted    P{N}:done:deleted
-- KEYS[7]   quarantine_key  P{N}:quarantine
-- KEYS[8]   counts_key      P{N}:counts
-- KEYS[9]   recurring       P{N}:recurring
-- KEYS[10]  parked          P{N}:paused:<topic>   the topic's parked set
-- KEYS[11]  corrupt         P{N}:corrupt          (declared only: set_aside names it)
-- ARGV[1]   member          topic:id
-- ARGV[2]   hard            '1' (every trace removed) or '0' (soft)
-- ARGV[3]   retention       ms
-- Reply: code, 0 if there was no such task; 1 if it was deleted while no run of it was claimed (delayed,
--   ready, parked, held or finished): claim.lua pops, checks and leases in one call, so no run of it starts
--   after this; 2 if it was deleted while a run was claimed (in `leases`): that run's handler may be starting
--   or running (its finish is fenced off as below)
-- A soft delete bumps the claim token, so a run in progress cannot finish it and
-- a stale ready-list entry is skipped. Either leaves no quarantine entry (that is
-- kept only for tasks in done:failed). A task key that is not a hash is removed,
-- and a soft delete leaves a record that says `deleted`. Either ends a recurring task:
-- it leaves the `recurring` index (also when its record is already gone).
local task_key, delayed, leases, done_ok, done_failed = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local done_deleted, quarantine_key, counts_key, recurring, parked = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local member, hard, retention = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])

local now = now_ms()
expect('zset', delayed, leases, done_ok, done_failed, done_deleted, parked)
expect('hash', quarantine_key)
redis.call('HDEL', quarantine_key, member)
recurring_index(recurring).remove(member)
if redis.call('EXISTS', task_key) == 0 then return 0 end
local hash, queued, priority, claim, created, status, host =
  record_fields(task_key, 'queued', 'priority', 'claim', 'created', 'status', 'host')
if not hash then redis.call('DEL', task_key) end  -- read as a record of no fields
local topic = topic_of(member)
if queued == '1' then count_ready(priority, topic, -1) end
if PENDING[status] then count_host(host, -1) end  -- a URL task no longer waits for its host
local claimed = zrem_counted(leases, member, 'running', topic)  -- a run of it was claimed (leased)
zrem_counted(delayed, member, 'waiting', topic)
zrem_counted(done_ok, member, 'ok', topic)
zrem_counted(done_failed, member, 'failed', topic)
zrem_counted(done_deleted, member, 'deleted', topic)
zrem_counted(parked, member, 'parked', topic)
if hard then
  redis.call('DEL', task_key)
else
  redis.call('HSET', task_key, 'status', 'deleted', 'queued', '0', 'claim', claim_token(claim, created) + 1)
  index_finished(member, done_deleted, now, task_key, retention, 'deleted', topic)
end
flush_counts(counts_key)
return claimed and 2 or 1
