-- Shared helpers: a script is loaded with the ones it uses in front of it (delayd/store/lua_lib.py),
-- or, for functions only a rare path of it uses, inside the function that holds a `--[[lib]]`
-- line. Each top-level definition starts at column 0 (`local function name`, `local a, b =`),
-- with its comment lines just above it; Redis runs them on every call of the script.

-- Redis's clock in milliseconds: every due time and lease is on this clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The same clock in microseconds (for a process that sleeps until a due time).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Stored data is not under our control: anyone with access to Redis can write
-- it, and Redis does not roll a script back when it fails half-way. So nothing a
-- script reads may make it fail: numbers are read with `int_of(x) or default`,
-- records through `read_record` (a key that is not a hash reads as nil), and the
-- bucket's own keys are checked with `expect` before anything is written, or each
-- command on them is sent through `on`.

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

-- Each key that exists with another type than `kind` (a string where a sorted set
-- belongs) is renamed aside to `<key>:corrupt`, kept for a person to look at; the
-- script then goes on as if the key were empty, instead of failing on WRONGTYPE.
local function expect(kind, ...)
  for _, key in ipairs({...}) do
    local t = key_type(key)
    if t ~= kind and t ~= 'none' then redis.call('RENAME', key, key .. ':corrupt') end
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

-- HMGET of a task record; nil when the key holds something other than a hash.
local function read_record(task_key, ...)
  local r = redis.pcall('HMGET', task_key, ...)
  if r['err'] then return nil end
  return r
end

-- Wake the bucket process when `member` became the earliest entry of `zset`.
local function wake_if_head(zset, member, channel, score)
  local head = redis.call('ZRANGE', zset, 0, 0)
  if head[1] == member then
    redis.call('PUBLISH', channel, score)
  end
end

-- Statistics (docs/redis-layout.md, "Counters"). Each script adds up its changes
-- in these tables, by topic, and writes them once at the end with one HINCRBY per
-- field: the Redis cost is per batch and per distinct topic, not per task.
--   counts[topic][state]: change of the number of tasks in that state (a live gauge)
--   runs[topic][event]:   events (runs by outcome, starts, lateness buckets)
-- Fields in Redis are '<state or event>|<topic>'.
local counts, runs = {}, {}

-- Upper bounds (ms) of the lateness histogram; stats.py has the same list.
local LATENESS_MS = {1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000}
local WINDOW_MS = 10000      -- one hash of recent runs per 10 s
local WINDOW_TTL_MS = 130000 -- long enough for the last 7 windows that stats reads
local MINUTE_MS = 60000       -- and one per minute, '<window_prefix>m:<n>', for the dashboard's
local MINUTE_TTL_MS = 3900000 -- charts of the last hour (65 minutes kept)
local READY = {['3'] = 'ready:3', ['2'] = 'ready:2', ['1'] = 'ready:1'}

-- URL tasks wait in ready lists of their own (ready:u3, ready:u2, ready:u1), which
-- queue processes claim for their event loop apart from call and push tasks (for
-- their thread pool): a backlog of one kind never holds back the other. The state
-- counts (ready:3 ...) are per priority, whatever the list. Task.spec_json writes
-- the target first, so a URL task's spec starts with {"url": add flags such a record
-- `url=1`, which promote reads (a small field, not the spec: call tasks pay nothing).
local function is_url(spec)
  return type(spec) == 'string' and string.sub(spec, 1, 7) == '{"url":'
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

-- The zset of a paused topic's due tasks, set aside so they neither start nor keep the
-- head of `delayed` (which would wake the bucket process again and again):
-- `P{N}:paused:<topic>`, next to the bucket's `P{N}:paused` hash of paused topics.
local function parked_key(paused_key, topic)
  return paused_key .. ':' .. topic
end

-- The generation of the pause a flag of the `paused` hash holds, or nil when it holds none: no
-- flag, or 'r' (a resume is moving the parked tasks back). A pause's flag is its generation (see
-- pause.lua); '1', written by earlier versions, and any other value read as the oldest pause, and
-- so does one more than a minute ahead of this bucket's clock, which no pause wrote (written by
-- hand or damaged, it would hold the topic against every resume).
local function pause_generation(flag)
  if not flag or flag == 'r' then return nil end
  local generation = int_of(flag)
  if not generation or generation > now_us() + 60000000 then return 0 end
  return generation
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

local function add_to(tables, topic, name, delta)
  local t = tables[topic]
  if not t then
    t = {}
    tables[topic] = t
  end
  t[name] = (t[name] or 0) + delta
end

local function count(state, topic, delta)
  add_to(counts, topic, state, delta)
end

-- `priority` as read from a record: nil is the default.
local function count_ready(priority, topic, delta)
  add_to(counts, topic, READY[priority or DEFAULT_PRIORITY] or 'ready:?', delta)
end

local function tally(name, topic, delta)
  add_to(runs, topic, name, delta or 1)
end

-- A run of `topic` started `lateness` ms after it was due.
local function tally_lateness(topic, lateness)
  if lateness < 0 then lateness = 0 end
  local bound = 'inf'
  for _, b in ipairs(LATENESS_MS) do
    if lateness <= b then
      bound = b
      break
    end
  end
  local t = runs[topic]
  if not t then
    t = {}
    runs[topic] = t
  end
  local field = 'le:' .. bound
  t[field] = (t[field] or 0) + 1
  t.lateness_ms = (t.lateness_ms or 0) + lateness
end

-- ZREM / ZADD that keep the state count of `member` in step with the index.
local function zrem_counted(zset, member, state, topic)
  if on('zset', 'ZREM', zset, member) == 1 then count(state, topic or topic_of(member), -1) end
end

local function zadd_counted(zset, score, member, state, topic)
  if on('zset', 'ZADD', zset, score, member) == 1 then count(state, topic or topic_of(member), 1) end
end

-- The same for many members at once: one ZADD (or ZREM) per zset and topic per call instead
-- of one per task. `batch_add(batch, zset, topic, member, score)` notes a member in the table
-- `batch` (with a score: to add; without: to remove); `flush_counted` then writes them all.
local function batch_add(batch, zset, topic, member, score)
  local by_key = batch[zset]
  if not by_key then
    by_key = {}
    batch[zset] = by_key
  end
  local args = by_key[topic]
  if not args then
    args = {}
    by_key[topic] = args
  end
  if score then args[#args + 1] = score end
  args[#args + 1] = member
end

-- Arguments per command when a list of them is unpacked: Lua's unpack fails beyond
-- ~8,000 values (LUAI_MAXCSTACK), and a call's batch is not bounded below that (a queue
-- process finishes every run that ended since its last turn, thousands after an outage).
local UNPACK_MAX = 2000

-- `states[zset]`: the state counted for that zset's members; `sign` 1 to add, -1 to remove.
local function flush_counted(batch, states, sign)
  local cmd = sign > 0 and 'ZADD' or 'ZREM'
  for zset, by_key in pairs(batch) do
    for topic, args in pairs(by_key) do
      for i = 1, #args, UNPACK_MAX do  -- (even: a ZADD's score and member stay together)
        local changed = on('zset', cmd, zset, unpack(args, i, math.min(i + UNPACK_MAX - 1, #args)))
        if changed ~= 0 then count(states[zset], topic, sign * changed) end
      end
    end
  end
end

-- HINCRBY that cannot fail on stored data: a counter that is not an integer starts
-- again from this change, and a key that is not a hash is set aside first.
local function hincrby(key, field, delta)
  local value = redis.pcall('HINCRBY', key, field, delta)
  if type(value) == 'number' then return value end
  expect('hash', key)
  redis.call('HSET', key, field, delta)
  return delta
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

-- Write what the script counted: state counts (flush_counts); run events to the
-- lifetime totals and to the 10-second window of `now` (which expires).
local function flush_stats(counts_key, totals_key, window_prefix, now)
  flush_counts(counts_key)
  if next(runs) then
    local window = window_prefix .. math.floor(now / WINDOW_MS)
    local minute = window_prefix .. 'm:' .. math.floor(now / MINUTE_MS)
    -- The script that makes a window or minute hash sees a counter equal to its change
    -- and sets its expiry; later scripts (counters already there) leave it as it is.
    local new_window, new_minute = false, false
    for topic, t in pairs(runs) do
      for name, delta in pairs(t) do
        local field = name .. '|' .. topic
        hincrby(totals_key, field, delta)
        if hincrby(window, field, delta) == delta then new_window = true end
        if hincrby(minute, field, delta) == delta then new_minute = true end
      end
    end
    if new_window then redis.call('PEXPIRE', window, WINDOW_TTL_MS) end
    if new_minute then redis.call('PEXPIRE', minute, MINUTE_TTL_MS) end
  end
end

-- Index `member` as finished (`state`: ok, failed or deleted) and let its record expire.
local function index_finished(member, done_key, now, task_key, retention, state, topic)
  zadd_counted(done_key, now, member, state, topic)
  redis.call('PEXPIRE', task_key, retention)
end

-- A corrupt task is set aside as a failed task (docs/redis-layout.md, "Stored data
-- is not trusted"): status `failed`, error `quarantined: <reason>`, indexed in
-- done:failed and expiring after the retention period like any failed task; the
-- reason also goes in the quarantine hash, which promote trims with done:failed.
-- A key that is not a hash cannot hold that and is replaced by a record that does.
-- `aside`: {failed = done:failed key, quarantine = quarantine key, now =, retention =}.
local function quarantine(aside, task_key, member, reason)
  if key_type(task_key) ~= 'hash' then redis.call('DEL', task_key) end
  redis.call('HSET', task_key, 'status', 'failed', 'queued', '0', 'error', 'quarantined: ' .. reason)
  on('hash', 'HSET', aside.quarantine, member, reason)
  index_finished(member, aside.failed, aside.now, task_key, aside.retention, 'failed', topic_of(member))
end

-- Limits per topic (docs/redis-layout.md, "Limits"): a rate (GCRA: one theoretical arrival time
-- per topic, in µs) and a concurrency (the topic's runs in flight, a zset member -> lease expiry),
-- kept beside the limits set under `L` = `P{limits}:` and read by the daemon's scripts on a
-- single Redis only (Redis Cluster: `L` is '' and nothing is limited). A rate lets at most
-- LIMIT_BURST_US of its starts through at once (at least one), so 100/s starts 10 per 100 ms.
local LIMIT_BURST_US = 100000
local LIMIT_PAUSE_MS = 5000  -- a held topic is looked at again this often, whatever it waits for
-- A released task's slot, taken by promote, is kept this long for its claim (which renews it to its
-- lease); a task deleted before it is claimed gives the slot back then.
local LIMIT_RESERVE_MS = 30000

-- The limits set, topic -> {every = µs between starts (0: no rate), burst = starts let through at
-- once, slots = runs in flight allowed (0: no cap)}; nil when none is set or `lp` is ''. A value
-- that is not 'N PERIOD_MS K' (written by hand) limits nothing.
local function limits_of(lp)
  if lp == '' then return nil end
  local flat = redis.pcall('HGETALL', lp .. 'conf')
  if type(flat) ~= 'table' or flat['err'] or #flat == 0 then return nil end
  local set = nil
  for i = 1, #flat, 2 do
    local n, period, slots = string.match(flat[i + 1], '^(%d%d?%d?%d?%d?%d?%d?%d?%d?) (%d+) (%d%d?%d?%d?%d?%d?%d?%d?%d?)$')
    n, period, slots = tonumber(n), tonumber(period), tonumber(slots)
    if n and period > 0 and period <= 86400000 and (n > 0 or slots > 0) then
      local every = 0
      if n > 0 then every = period * 1000 / n end
      set = set or {}
      set[flat[i]] = {every = every, burst = math.max(1, math.floor(LIMIT_BURST_US / math.max(every, 1))),
                      slots = slots}
    end
  end
  return set
end

-- One topic's limit as one script call sees it (`l` from limits_of, Redis's clock `now_us`): the rate's
-- arrival time and the runs in flight are read once (lapsed ones dropped), changed by gate_take,
-- written back by gate_close.
local function gate(lp, topic, l, now_us)
  local g = {l = l, now = now_us, tat = 0, flight = 0, runs = lp .. 'run:' .. topic,
             tat_key = lp .. 'tat:' .. topic, taken = {}, dirty = false}
  if l.every > 0 then
    local v = redis.pcall('GET', g.tat_key)
    local tat = type(v) == 'string' and tonumber(v)
    -- (an unreadable or absurd value, more than a day ahead: as if no start had been made)
    if tat and tat == tat and tat < now_us + 86400000000 then g.tat = tat end
  end
  if l.slots > 0 then
    expect('zset', g.runs)
    redis.call('ZREMRANGEBYSCORE', g.runs, '-inf', math.floor(now_us / 1000))  -- lapsed: slot back
    g.flight = redis.call('ZCARD', g.runs)
  end
  return g
end

-- How many starts the gate lets through now.
local function gate_room(g)
  local l, room = g.l, math.huge
  if l.every > 0 then
    room = math.floor((g.now + (l.burst - 1) * l.every - math.max(g.tat, g.now)) / l.every) + 1
  end
  if l.slots > 0 then room = math.min(room, l.slots - g.flight) end
  return math.max(0, room)
end

-- Take one start (and slot) for `member`, its slot held until `expiry` (ms); false when the limit
-- holds it back.
local function gate_take(g, member, expiry)
  if gate_room(g) < 1 then return false end
  if g.l.every > 0 then
    g.tat = math.max(g.tat, g.now) + g.l.every
    g.dirty = true
  end
  if g.l.slots > 0 then
    g.flight = g.flight + 1
    g.taken[#g.taken + 1] = expiry
    g.taken[#g.taken + 1] = member
  end
  return true
end

-- Claim a task that promote released, having taken its start and slot then: it starts, its slot
-- held until `expiry`; unless that slot lapsed meanwhile and none is free now (false).
local function gate_claim_released(g, member, expiry)
  if g.l.slots > 0 then
    if not redis.call('ZSCORE', g.runs, member) then
      if g.flight >= g.l.slots then return false end
      g.flight = g.flight + 1
    end
    g.taken[#g.taken + 1] = expiry
    g.taken[#g.taken + 1] = member
  end
  return true
end

-- When (ms) the gate may next let `want` starts through (at most LIMIT_PAUSE_MS ahead).
local function gate_next(g, want)
  local l, now_ms = g.l, math.floor(g.now / 1000)
  local at = now_ms
  if l.every > 0 then
    local ready = math.max(g.tat, g.now) - (l.burst - 1) * l.every + (math.min(want, l.burst) - 1) * l.every
    at = math.max(at, math.ceil(ready / 1000))
  end
  if l.slots > 0 and g.flight >= l.slots then
    local first = redis.call('ZRANGE', g.runs, 0, 0, 'WITHSCORES')
    at = math.max(at, tonumber(first[2]) or now_ms + LIMIT_PAUSE_MS)
  end
  return math.min(at, now_ms + LIMIT_PAUSE_MS)
end

-- Write what gate_take changed: the arrival time (expiring once it is past) and the runs in flight.
local function gate_close(g)
  if g.dirty then
    redis.call('SET', g.tat_key, string.format('%.3f', g.tat), 'PX',
               math.max(1, math.ceil((g.tat - g.now) / 1000)) + 1000)
  end
  for i = 1, #g.taken, UNPACK_MAX do
    redis.call('ZADD', g.runs, unpack(g.taken, i, math.min(i + UNPACK_MAX - 1, #g.taken)))
  end
end

-- The zset of a bucket's tasks of `topic` held back by its limit (member -> due time), next to
-- the bucket's `limited` zset (topic -> when its limit may let some start).
local function held_key(limited_key, topic)
  return limited_key .. ':' .. topic
end

-- Every bucket holding tasks of `topic` looks at them again now (its `limited` entry moved to now,
-- and a wake for its bucket process): a slot came free, or the limit changed.
local function wake_held(lp, topic, now)
  local store_prefix = string.sub(lp, 1, #lp - #'{limits}:')
  local buckets = redis.pcall('SMEMBERS', lp .. 'where:' .. topic)
  if type(buckets) ~= 'table' or buckets['err'] then return end
  for _, b in ipairs(buckets) do
    if int_of(b) then
      redis.pcall('ZADD', store_prefix .. '{' .. b .. '}:limited', 'XX', 'LT', now, topic)
      redis.call('PUBLISH', store_prefix .. 'wake:' .. b, now)
    end
  end
end

-- Runs of limited topics ended or lapsed (`freed`: topic -> {member, ...}): their slots are free.
local function free_slots(lp, freed, now)
  for topic, members in pairs(freed) do
    local runs = lp .. 'run:' .. topic
    expect('zset', runs)
    local removed = 0
    for i = 1, #members, UNPACK_MAX do
      removed = removed + redis.call('ZREM', runs, unpack(members, i, math.min(i + UNPACK_MAX - 1, #members)))
    end
    if removed > 0 then wake_held(lp, topic, now) end
  end
end
