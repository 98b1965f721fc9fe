#!lua name=delayd_1730b7db2ec19540
local KEYS, ARGV
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
-- records through `record_fields` (a key that is not a hash reads as `false`), and the
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

-- A bucket's wake message: the new earliest due time (ms), and the member due then, whose record
-- the bucket process declares in its next promote call (docs/redis-layout.md, "Declared keys").
local function wake_message(due, member)
  return string.format('%d', due) .. ' ' .. member
end

-- Wake the bucket process when `member` became the earliest entry of `delayed`, due at `score`.
local function wake_if_head(zset, member, channel, score)
  local head = redis.call('ZRANGE', zset, 0, 0)
  if head[1] == member then
    redis.call('PUBLISH', channel, wake_message(score, member))
  end
end

-- URL tasks wait in ready lists of their own (ready:u3, ready:u2, ready:u1), which
-- queue processes claim for their event loop apart from call and push tasks (for
-- their thread pool): a backlog of one kind never holds back the other. The state
-- counts (ready:3 ...) are per priority, whatever the list. Task.spec_json writes
-- the target first, so a URL task's spec starts with {"url": add flags such a record
-- `url=1`, which promote reads (a small field, not the spec: call tasks pay nothing).
local function is_url(spec)
  return type(spec) == 'string' and string.sub(spec, 1, 7) == '{"url":'
end

-- scheme://host:port of a URL (default ports made explicit), as delayd.model.origin.origin writes it:
-- the unit of host health, disabling and replay; nil when it has none (the URL cannot be sent).
local function origin_of(url)
  if type(url) ~= 'string' then return nil end
  local scheme, authority = string.match(url, '^(%a[%w+.-]*)://([^/?#]*)')
  if not scheme then return nil end
  scheme, authority = string.lower(scheme), string.lower(string.match(authority, '([^@]*)$'))
  local host, port = string.match(authority, '^(%[.*%]):?(%d*)$')
  if not host then host, port = string.match(authority, '^([^:]*):?(%d*)$') end
  port = tonumber(port)
  if not host or host == '' or (port and port > 65535) then return nil end
  if not port or port == 0 then port = scheme == 'https' and 443 or 80 end  -- (urlsplit's port 0 reads as none)
  return scheme .. '://' .. host .. ':' .. string.format('%d', port)
end

-- Record fields left out when they hold their default (docs/redis-layout.md):
-- priority 2, runs 0, and claim, whose default is the record's `created` time.
-- Every pending task saves their bytes.
local DEFAULT_PRIORITY = '2'

-- A task's score in `delayed`: its due time (ms), a quarter of a ms earlier for priority 3 and later for
-- priority 1, so that of the tasks due in one ms the higher priorities come first (then by name) in every
-- batch promote takes, and in its ready messages (issue 41). Promote takes the scores up to now +
-- DUE_SKEW, so none moves before its ms.
local DUE_SKEW = 0.25
local function due_score(due, priority)
  if priority == '3' then return tonumber(due) - DUE_SKEW end
  if priority == '1' then return tonumber(due) + DUE_SKEW end
  return due
end
-- The due time (ms) a score of `delayed` stands for.
local function due_of_score(score)
  return math.floor(tonumber(score) + 0.5)
end

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

-- A task set aside on purpose from `now` on (its topic paused, its host disabled): not lateness, as a
-- limit's hold is not. Its first park counts (`parked`); promote notes when it lets it go (`unparked`),
-- and claim takes the time between off its lateness.
local function mark_parked(task_key, now)
  redis.call('HSETNX', task_key, 'parked', now)
end

-- The generation of the pause a flag of the `paused` hash holds, or nil when it holds none: no
-- flag, or 'r' (a resume is moving the parked tasks back). A pause's flag is its generation (see
-- pause.lua); any other value reads as the oldest pause, and so does one more than a minute ahead
-- of this bucket's clock, which no pause wrote (written by hand or damaged, it would hold the topic
-- against every resume).
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

-- Arguments per command when a list of them is unpacked: Lua's unpack fails beyond
-- ~8,000 values (LUAI_MAXCSTACK), and a call's batch is not bounded below that (a queue
-- process finishes every run that ended since its last turn, thousands after an outage).
local UNPACK_MAX = 2000

-- State counts and run statistics (docs/redis-layout.md, "Counters"), read as part of the lib after _lib.lua
-- (delayd/store/scripts.py, LIB_FILES), and the moves that keep them in step with the indexes.

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
local MINUTE_MS = 60000       -- and one per minute, `P{N}:w:m:<n>`, for the dashboard's
local MINUTE_TTL_MS = 3900000 -- charts of the last hour (65 minutes kept)
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
  local field = bound == 'inf' and 'le:inf' or 'le:' .. string.format('%d', bound)  -- (%d: not %.14g, dearer)
  t[field] = (t[field] or 0) + 1
  t.lateness_ms = (t.lateness_ms or 0) + lateness
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

-- `states[zset]`: the state counted for that zset's members; `sign` 1 to add, -1 to remove.
local function flush_counted(batch, states, sign)
  local cmd = sign > 0 and 'ZADD' or 'ZREM'
  for zset, by_key in pairs(batch) do
    for topic, args in pairs(by_key) do
      for i = 1, #args, UNPACK_MAX do  -- (even: a ZADD's score and member stay together)
        local changed = on('zset', cmd, zset, unpack(args, i, math.min(i + UNPACK_MAX - 1, #args)))
        if changed ~= 0 then count_state(states[zset], topic, sign * changed) end
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

-- Of two declared consecutive window keys (`first` ends in its number n, `second` is n + 1) the one
-- of `now`, or the nearer one when `now` is in neither: the caller names them from its estimate of
-- Redis's clock (delayd.store.windows), which the clock in the script's reply corrects.
local function declared_window(first, second, now, width)
  local n = tonumber(string.match(first, '(%d+)$'))
  if n and math.floor(now / width) > n then return second end
  return first
end

-- Write what the script counted: state counts (flush_counts); run events to the lifetime totals and to
-- the 10-second window and the minute of `now` (which expire), of the declared keys of windows n, n + 1
-- (`windows`, `next_window`) and minutes m, m + 1 (`minutes`, `next_minute`).
local function flush_stats(counts_key, totals_key, windows, next_window, minutes, next_minute, now)
  flush_counts(counts_key)
  if next(runs) then
    local window = declared_window(windows, next_window, now, WINDOW_MS)
    local minute = declared_window(minutes, next_minute, now, MINUTE_MS)
    -- The script that makes a window or minute hash sees a counter equal to its change
    -- and sets its expiry; later scripts (counters already there) leave it as it is.
    local new_window, new_minute = false, false
    for topic, t in pairs(runs) do
      for name, delta in pairs(t) do
        local field, text = name .. '|' .. topic, string.format('%d', delta)  -- (one conversion, not three)
        hincrby(totals_key, field, text)
        if hincrby(window, field, text) == delta then new_window = true end
        if hincrby(minute, field, text) == delta then new_minute = true end
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
-- A task that was still to be delivered no longer waits for its URL host (count_host).
local function quarantine(aside, task_key, member, reason)
  if key_type(task_key) ~= 'hash' then
    redis.call('DEL', task_key)
  else
    local _, status, host = record_fields(task_key, 'status', 'host')
    if PENDING[status] then count_host(host, -1) end
  end
  redis.call('HSET', task_key, 'status', 'failed', 'queued', '0', 'error', 'quarantined: ' .. reason)
  on('hash', 'HSET', aside.quarantine, member, reason)
  index_finished(member, aside.failed, aside.now, task_key, aside.retention, 'failed', topic_of(member))
end
-- The helpers of limits per topic, read as part of the lib (delayd/store/scripts.py, LIB_FILES), linked the
-- same way. Limits per topic (docs/redis-layout.md, "Limits"): a rate (GCRA: one theoretical arrival time
-- per topic, in µs) and a concurrency (the topic's runs in flight, a zset run_id -> lease expiry),
-- kept beside the limits set under `L` = `P{limits}:` and read by the daemon's scripts on a
-- single Redis only (Redis Cluster: `L` is '' and nothing is limited). A rate lets at most
-- LIMIT_BURST_US of its starts through at once (at least one), so 100/s starts 10 per 100 ms.
local LIMIT_BURST_US = 100000
local LIMIT_PAUSE_MS = 5000  -- a held topic is looked at again this often, whatever it waits for
-- A released task's slot, taken by promote (its entry in `run:<topic>` is the bare member), is kept
-- this long for its claim, which makes it the run's; a claim that skips or parks the task gives it back.
local LIMIT_RESERVE_MS = 30000

-- A run's entry in `run:<topic>`: the member and its claim token (names have no spaces), so that the
-- run's end frees its own slot, whatever became of the record (deleted, replaced) meanwhile: a later run
-- of the same member has another token and keeps its own.
local function run_id(member, token)
  if type(token) == 'number' then token = string.format('%d', token) end  -- (as finish and renew get it)
  return member .. ' ' .. token
end

-- The limits set, topic -> {every = µs between starts (0: no rate), burst = starts let through at
-- once, slots = runs in flight allowed (0: no cap)}; nil when none is set or `lp` is ''. A value
-- that is not 'N PERIOD_MS K' (written by hand) limits nothing.
local function limits_of(lp)
  if lp == '' then return nil end
  local flat = redis.pcall('HGETALL', lp .. 'conf')
  if type(flat) ~= 'table' or flat['err'] or #flat == 0 then return nil end
  local set = nil
  for i = 1, #flat, 2 do
    local nine = '(%d%d?%d?%d?%d?%d?%d?%d?%d?)'  -- at most nine digits: an exact Lua number
    local n, period, slots = string.match(flat[i + 1], '^' .. nine .. ' (%d+) ' .. nine .. '$')
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

-- Take one start (and slot) for `id` (a run_id, or a released member), its slot held until `expiry`
-- (ms); false when the limit holds it back.
local function gate_take(g, id, expiry)
  if gate_room(g) < 1 then return false end
  if g.l.every > 0 then
    g.tat = math.max(g.tat, g.now) + g.l.every
    g.dirty = true
  end
  if g.l.slots > 0 then
    g.flight = g.flight + 1
    g.taken[#g.taken + 1] = expiry
    g.taken[#g.taken + 1] = id
  end
  return true
end

-- Claim a task that took its start before: promote released it, taking its start and slot then, or its
-- run lapsed and runs again (a rate start is taken once per run). It starts as run `id`, its slot held
-- until `expiry`: the one its release took, else a free one; false when none is.
local function gate_claim_started(g, member, id, expiry)
  if g.l.slots > 0 then
    if redis.call('ZREM', g.runs, member) == 0 then
      if g.flight >= g.l.slots then return false end
      g.flight = g.flight + 1
    end
    g.taken[#g.taken + 1] = expiry
    g.taken[#g.taken + 1] = id
  end
  return true
end

-- When (ms) the gate may next let `want` starts through (at most LIMIT_PAUSE_MS ahead).
-- (At most half a burst is waited for: a wake-up that comes late finds the starts that came due
-- meanwhile still in the burst, where waiting for a whole burst would lose them and run slow.)
local function gate_next(g, want)
  local l, now_ms = g.l, math.floor(g.now / 1000)
  local at = now_ms
  if l.every > 0 then
    want = math.min(want, math.ceil(l.burst / 2))
    local ready = math.max(g.tat, g.now) - (l.burst - 1) * l.every + (want - 1) * l.every
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
-- and a wake for its bucket process): a slot came free, or the limit changed. `reach` (a set of
-- keys, or nil: all): only the buckets whose `limited` is in it (promote's declared keys).
local function wake_held(lp, topic, now, reach)
  local store_prefix = string.sub(lp, 1, #lp - #'{limits}:')
  local buckets = redis.pcall('SMEMBERS', lp .. 'where:' .. topic)
  if type(buckets) ~= 'table' or buckets['err'] then return end
  for _, b in ipairs(buckets) do
    local limited = store_prefix .. '{' .. b .. '}:limited'
    if int_of(b) and (not reach or reach[limited]) then
      redis.pcall('ZADD', limited, 'XX', 'LT', now, topic)
      redis.call('PUBLISH', store_prefix .. 'wake:' .. b, now)
    end
  end
end

-- Runs of limited topics ended or lapsed, or released tasks that will not start (`freed`: topic ->
-- {run_id or member, ...}): their slots are free (`reach`: see wake_held).
local function free_slots(lp, freed, now, reach)
  for topic, members in pairs(freed) do
    local runs = lp .. 'run:' .. topic
    expect('zset', runs)
    local removed = 0
    for i = 1, #members, UNPACK_MAX do
      removed = removed + redis.call('ZREM', runs, unpack(members, i, math.min(i + UNPACK_MAX - 1, #members)))
    end
    if removed > 0 then wake_held(lp, topic, now, reach) end
  end
end
-- Written by scripts/build-clients (delayd/store/lua_fields.py) from delayd/model/fields.py, the table of task
-- fields: do not edit. add.lua's gate (_gate.lua) reads a decoded spec's fields with these: which it may have,
-- and the check of each field of a kind the table says (the gate checks the others, and the rules between
-- fields, itself). A string cjson decoded from a spec of UTF-8 text is UTF-8 text (it refuses a lone surrogate).

-- True if every field of decoded spec `t` is a known one and none is null: the known ones present are all there
-- are (counted without a table of names, which would be made on every call). (A null is no value of any field:
-- cjson's null is not nil, so it would pass for one given, where the daemon's reader reads None.)
local function only_known(t)
  local known = (t.call ~= nil and 1 or 0) + (t.url ~= nil and 1 or 0) + (t.push ~= nil and 1 or 0) +
    (t.callback ~= nil and 1 or 0) + (t.timeout ~= nil and 1 or 0) + (t.every ~= nil and 1 or 0) +
    (t.cron ~= nil and 1 or 0) + (t.method ~= nil and 1 or 0) + (t.body ~= nil and 1 or 0) +
    (t.params ~= nil and 1 or 0) + (t.intervals ~= nil and 1 or 0) + (t.persistent ~= nil and 1 or 0) +
    (t.retries ~= nil and 1 or 0) + (t.tz ~= nil and 1 or 0) + (t.signing_key ~= nil and 1 or 0) +
    (t.trace ~= nil and 1 or 0) + (t.group ~= nil and 1 or 0)
  for _, value in pairs(t) do
    if value == cjson.null then return false end
    known = known - 1
  end
  return known == 0
end

-- For the whole gate (spec_gate, made only for a call that decodes specs in full): unknown_field(t), a field of
-- decoded spec `t` the table does not know, or nil; refused_field(t), the first field of `t` the check of its kind
-- refuses and why, or nil.
local function spec_fields()
  local function unknown_field(t)
    local known = {call = true, url = true, push = true, callback = true, timeout = true, every = true, cron = true,
      method = true, body = true, params = true, intervals = true, persistent = true, retries = true,
      tz = true, signing_key = true, trace = true, group = true}
    for name in pairs(t) do
      if not known[name] then return name end
    end
  end

  local function refused_field(t)
    local v
    v = t.timeout
    if v ~= nil and (type(v) ~= 'number' or not (v > 0) or not (v <= 86400)) then
      return 'timeout', 'must be a number of seconds in (0, 86400]'
    end
    v = t.every
    if v ~= nil and type(v) ~= 'number' then return 'every', 'must be a number of seconds' end
    if v ~= nil and (type(v) ~= 'number' or not (v >= 1) or not (v <= 315360000)) then
      return 'every', 'must be between 1 s and ten years'
    end
    v = t.method
    if v ~= nil and (v ~= 'GET' and v ~= 'POST') then
      return 'method', 'must be GET or POST'
    end
    v = t.body
    if v ~= nil and (v ~= 'form' and v ~= 'json') then
      return 'body', "must be 'form' or 'json'"
    end
    v = t.persistent
    if v ~= nil and (type(v) ~= 'boolean') then
      return 'persistent', 'must be true or false'
    end
    v = t.retries
    if v ~= nil and (type(v) ~= 'number' or v % 1 ~= 0 or v < 0 or v > 10000) then
      return 'retries', 'must be an integer from 0 to 10000'
    end
    if t.tz ~= nil and t.cron == nil then
      return 'tz', 'is the zone of a cron schedule: give it with cron'
    end
    v = t.signing_key
    if v ~= nil and (type(v) ~= 'string' or #v < 1 or #v > 128 or not string.find(v, '^[A-Za-z0-9%_%.%:%-]*$')) then
      return 'signing_key', "must be 1-128 letters, digits, '_', '.', ':' or '-'"
    end
    if t.signing_key ~= nil and t.url == nil then
      return 'signing_key', 'is for a url task: only URL requests are signed'
    end
    v = t.group
    if v ~= nil and (type(v) ~= 'string' or string.find(v, '[%z\1-\31\127]') or string.find(v, '\194[\128-\159]') or
        #string.gsub(v, '[\128-\191]', '') < 1 or #string.gsub(v, '[\128-\191]', '') > 128) then
      return 'group', 'must be 1-128 characters, none of them a control character'
    end
  end
  return unknown_field, refused_field
end
-- The gate's refusal and its checks of text (add.lua's gate of validity: _gate.lua, docs/protocol.md section 7),
-- read as part of the lib after _fields.lua (delayd/store/scripts.py, LIB_FILES): refuse(), which every check of
-- the gate raises through, and the checks of what a task names as text: UTF-8, a topic's, id's or push list's
-- name, a URL task's URL, a trace context. add.lua checks each task's topic and id with them, _gate.lua a spec's
-- fields; kept apart from the gate so that each file holds one concern.

local REFUSED = 'delayd:bad-task '  -- the start of what refuse() raises (no Lua error starts so)

local function refuse(field, reason)
  error(REFUSED .. field .. ': ' .. reason, 0)
end

local MAX_NAME = 512  -- the most characters of a topic, id or push list

-- UTF-8 text: ASCII at once, else every sequence well formed (no overlong forms, surrogates or
-- code points past U+10FFFF), as Python's decoder reads it.
local function utf8_ok(text)
  if string.find(text, '^[%z\1-\127]*$') then return true end
  local i, n = 1, #text
  while i <= n do
    local c = string.byte(text, i)
    local len, low, high = 1, 128, 191
    if c < 128 then len = 1
    elseif c >= 194 and c <= 223 then len = 2
    elseif c >= 224 and c <= 239 then
      len = 3
      if c == 224 then low = 160 elseif c == 237 then high = 159 end
    elseif c >= 240 and c <= 244 then
      len = 4
      if c == 240 then low = 144 elseif c == 244 then high = 143 end
    else return false end
    for j = 1, len - 1 do
      local b = string.byte(text, i + j)
      if not b or b < (j == 1 and low or 128) or b > (j == 1 and high or 191) then return false end
    end
    i = i + len
  end
  return true
end

-- A topic, id or push list: 1-512 characters of UTF-8, no space or control character. (Printable
-- ASCII, the usual name, is one anchored pattern: far cheaper in Lua than a search for a class.)
local function check_name(field, text)
  if type(text) ~= 'string' then refuse(field, 'must be a string') end
  if #text <= MAX_NAME and string.find(text, '^[!-~]+$') then return end
  if text == '' then refuse(field, 'must not be empty') end
  if string.find(text, '[%z\1-\32\127]') then refuse(field, 'must not contain spaces or control characters') end
  if not utf8_ok(text) then refuse(field, 'is not valid UTF-8 text') end
  if #text > MAX_NAME and #string.gsub(text, '[\128-\191]', '') > MAX_NAME then
    refuse(field, 'is longer than ' .. MAX_NAME .. ' characters')
  end
end

-- A URL task's URL: http(s) with a host, and a port, if any, from 1 to 65535 (SPEC section 9).
local function check_url(url)
  -- The authority past any user info: a [bracketed] or plain host, then nothing or ':' and a port from 1
  -- to 65535 (delayd.model.checks.url_authority_error); an international host in its xn-- form.
  local authority = type(url) == 'string' and string.match(url, '^[Hh][Tt][Tt][Pp][Ss]?://([^/?#]*)')
  local host, rest = nil, nil
  if authority then
    authority = string.match(authority, '([^@]*)$')
    host, rest = string.match(authority, '^(%[[^%]]+%])(.*)$')
    if not host then host, rest = string.match(authority, '^([^:%[%]]*)(.*)$') end
  end
  if not host or host == '' or string.find(url, '[%z\1-\32\127]') then
    refuse('url', 'must be an http:// or https:// URL with a host, without spaces or control characters')
  end
  local port = rest == '' and '' or string.match(rest, '^:(%d*)$')
  if not port or port ~= '' and (#port > 5 or tonumber(port) < 1 or tonumber(port) > 65535) then
    refuse('url', 'has a port that is not a number from 1 to 65535')
  end
  if string.find(host, '[\128-\255]') then
    refuse('url', 'has a host that is not ASCII: give an international name in its xn-- form (IDNA)')
  end
end

-- A task's W3C trace context: a traceparent of version 00 (lowercase hex, ids not all zero), then nothing,
-- or a space and a tracestate of 1-512 printable characters (delayd.model.task.trace_of).
local function trace_ok(trace)
  if type(trace) ~= 'string' or #trace > 568 then return false end
  local hex = '[0-9a-f]'
  local trace_id, span_id = string.match(trace, '^00%-(' .. string.rep(hex, 32) .. ')%-(' .. string.rep(hex, 16)
    .. ')%-' .. hex .. hex)
  if not trace_id or not string.find(trace_id, '[1-9a-f]') or not string.find(span_id, '[1-9a-f]') then
    return false
  end
  local rest = string.sub(trace, 56)
  return rest == '' or string.find(rest, '^ [!-~][ -~]*$') ~= nil and string.find(rest, '[!-~]$') ~= nil
end
-- The gate's JSON agreement (docs/protocol.md section 7; tests/store/test_json_agreement.py), read as part of the
-- lib after _gate_text.lua (delayd/store/scripts.py, LIB_FILES): what Redis's cjson decodes but the daemon's
-- reader, Python's json, reads otherwise or refuses (numbers, control characters in strings, a field named
-- twice), which the whole gate (spec_gate, _gate.lua) refuses. Made by json_checks(), called by spec_gate, so that
-- a call which never decodes a spec in full never builds these functions. delayd/model/json_rules.py is the
-- same rules on the Python side.

-- check_json(text, ascii, t), for spec_gate: refuses JSON `text` that cjson and Python's json read apart.
local function json_checks()
  -- The first name that JSON object `text` gives twice at its top (each key decoded by cjson, escapes and all),
  -- for the refusal's message: escapes masked (positions kept), then strings and brackets walked.
  local function named_twice(text)
    local masked, depth, seen, at = string.gsub(text, '\\.', '\1\1'), 0, {}, 1
    while true do
      local from, _, c = string.find(masked, '([{}%[%]"])', at)
      if not from then return '?' end
      at = from + 1
      if c == '"' then
        at = string.find(masked, '"', at, true) + 1
        if depth == 1 and string.find(masked, '^%s*:', at) then
          local name = cjson.decode(string.sub(text, from, at - 1))
          if seen[name] then return name end
          seen[name] = true
        end
      else
        depth = depth + ((c == '{' or c == '[') and 1 or -1)
      end
    end
  end

  -- What cjson decodes (as it did `text`) but the daemon's reader, Python's json, reads otherwise or refuses
  -- (docs/protocol.md section 7; tests/store/test_json_agreement.py): a number JSON does not have (hex, `+1`,
  -- `01`, `1.`, `.5`, nan and inf, which cjson takes; NaN and Infinity, which both do) or beyond a double's
  -- range (cjson's infinity, Python's exact integer), a control character in a string or after the object
  -- (unless `ascii`: printable ASCII has none), and, for a spec whose fields passed their checks (`t`, its
  -- decoding), a field named twice (both keep the last; add.lua's pattern of a checked spec reads the first).
  -- Read in `text` less its strings: numbers, words, brackets, ',' and ':'. (Each pattern searched costs
  -- per byte: most are tried only once a plain search found the character they are about.)
  local function check_json(text, ascii, t)
    local bare = string.find(text, '\\', 1, true) and string.gsub(text, '\\.', '') or text
    local strings = string.gsub(bare, '"[^"]*"', '')
    if not ascii and string.find(text, '[%z\1-\31]') and (string.find(text, '[%z\1-\8\11\12\14-\31]')
        or select(2, string.gsub(bare, '[\t\n\r]', '')) > select(2, string.gsub(strings, '[\t\n\r]', ''))) then
      refuse('spec', 'holds a control character in a string (JSON escapes it) or after the object')
    end
    bare = strings
    -- (cjson's numbers beyond JSON's spell nan, inf or hex with one of these letters, which true, false and
    -- null have not, or 'na'; or have a '+' not after an exponent's e, a '.' not followed by a digit, or after
    -- '-' (cjson refuses one after anything else), a leading 0)
    local letter = string.find(bare, '%a')
    if letter and (string.find(bare, '[iIxXNA]', letter) or string.find(bare, 'na', letter, true))
        or string.find(bare, '+', 1, true) and string.find(bare, '[^eE]%+')
        or string.find(bare, '.', 1, true) and (string.find(bare, '%.%D') or string.find(bare, '-.', 1, true))
        or string.find(bare, '0', 1, true) and string.find(bare, '[%s:,%[]%-?0%d') then
      refuse('spec', 'holds a number JSON does not have (NaN, Infinity, hex, +1, 01, 1.)')
    end
    if #bare > 309 or letter and string.find(bare, '[eE][+-]?%d%d%d', letter) then  -- (what may be past 1.8e308)
      for number in string.gmatch(bare, '[%d.eE+-]+') do
        local value = tonumber(number)
        if value == math.huge or value == -math.huge then
          refuse('spec', "holds a number beyond a double's range (about 1.8e308)")
        end
      end
    end
    if t then  -- a ':' for each member at its top, once params go (its other fields hold no object)
      local fields, colons = 0, 0
      for _ in pairs(t) do fields = fields + 1 end
      local top = string.sub(bare, string.find(bare, '{', 1, true) + 1)
      if t.params then top = string.gsub(top, '%b{}', '') end
      local at = string.find(top, ':', 1, true)
      while at do
        colons = colons + 1
        at = string.find(top, ':', at + 1, true)
      end
      if colons ~= fields then refuse('spec', 'names the field ' .. cjson.encode(named_twice(text)) .. ' twice') end
    end
  end
  return check_json
end
-- add.lua's gate of validity (docs/protocol.md, section 7), in the lib so that the function library makes its
-- functions once, at load, not on every add. Whatever would make the daemon misread a record is refused with
-- `ERR delayd:bad-task <field>: <reason>`, every task of the call checked before anything is written. Clients
-- check first, for messages their users can act on (delayd.model.task); this is what holds when one does not.
-- A call flagged 'c' says its producer did: of its specs add.lua reads only what the scripts themselves
-- depend on (unread_ok), and a record bad otherwise is set aside at its first claim, never run.
-- Redis runs this for every task of every add, so the common case is kept cheap: one pcall for
-- the whole call (not one per task), names of printable ASCII proven by one anchored pattern,
-- a topic and a target checked once while they repeat, and a spec decoded at most once.
-- This file is the gate proper: a checked call's reading of a spec (unread_ok, plain_ok) and the whole gate
-- (spec_gate). It comes last of the gate's lib files (delayd/store/scripts.py, LIB_FILES), after refuse() and the
-- checks of text (_gate_text.lua) and the checks that cjson and Python read JSON alike (_gate_json.lua).
local MAX_SPEC, TEN_YEARS = 1048576, 315360000

-- A checked call's spec that unread_ok leaves in doubt (`t`, decoded): only what the daemon would read
-- otherwise than it was written is checked here: an unknown or null field, a `push` that is no string or
-- `intervals` that are no list of numbers, a schedule other than the mode says (the `recurring` index), a bad
-- trace, and a URL task's URL (SPEC section 9), which must be the one its pattern reads first: a spec naming
-- `"url"` again, or escaping a lowercase letter (which could spell it), whose decoded URL is another (cjson keeps
-- the last of a name given twice) goes to the whole gate, which refuses a field named twice. (`"url"` in params
-- is no field; a URL named twice alike is written, and set aside by the reader.) False: the whole gate decides,
-- and names what it refuses.
local function plain_ok(t, spec, mode, recurs)
  if type(t) ~= 'table' or t[1] ~= nil or not only_known(t) then return false end
  if t.trace ~= nil and not trace_ok(t.trace) then return false end
  if t.push ~= nil and type(t.push) ~= 'string' then return false end
  local list = t.intervals
  if list ~= nil then
    if type(list) ~= 'table' or list[1] == nil then return false end
    for _, gap in ipairs(list) do
      if type(gap) ~= 'number' then return false end
    end
  end
  if recurs ~= (t.every ~= nil or t.cron ~= nil) or mode == 'next*' and t.cron == nil then return false end
  if t.url ~= nil then
    if not is_url(spec) then return false end
    local escape = string.find(spec, '\\u', 1, true)
    if (string.find(spec, '"url"', 8, true) or escape and string.find(spec, '\\u00[67]', escape))
        and t.url ~= string.match(spec, '^{"url":"([^"\\]*)"') then
      return false  -- (named twice: cjson kept another than the first)
    end
    check_url(t.url)
  end
  return true
end

-- A checked call's spec of a task whose mode does not recur, read without decoding it: true when it has no
-- schedule, which it cannot have without naming `every` or `cron` (or holding a \u escape of a lowercase ASCII
-- letter, `\u006x` or `\u007x`: JSON's one way to spell such a name otherwise; the escapes of other text, which
-- producers write for what is not ASCII, are looked for only once one is found), and, for a URL task, when its
-- URL (written first, without escapes; a spec naming `"url"` elsewhere, or again, is decoded: the daemon reads a
-- field named twice by its last) passes check_url (SPEC section 9); then also the URL. Such a spec is written as
-- it is: what else is wrong with it the daemon finds when it reads the record, and sets the record aside at its
-- first claim with the reason, never runs it (delayd.model.record.from_record; tests/store/test_checked_adds.py).
-- False: the spec is decoded (plain_ok) and, if that leaves doubt, held to the whole gate.
local function unread_ok(spec)
  if #spec > MAX_SPEC or string.find(spec, '"every"', 1, true) or string.find(spec, '"cron"', 1, true) then
    return false
  end
  local escape = string.find(spec, '\\u', 1, true)
  if escape and string.find(spec, '\\u00[67]', escape) then return false end
  if not is_url(spec) then return not string.find(spec, '"url"', 1, true) end  -- (a url elsewhere: decoded)
  local url = string.match(spec, '^{"url":"([^"\\]*)"')
  if not url or string.find(spec, '"url"', 8, true) then return false end
  check_url(url)
  return true, url
end

-- The whole gate of a spec (check_spec): made only for a call that decodes specs here (a producer's call
-- without 'c', or a spec the checked path leaves to it), so a checked call never builds its functions.
local function spec_gate()
  local MAX_DEPTH = 64  -- how deep params may nest, the params object being level 1 (delayd.model.checks)
  -- The patterns of check_spec's fast paths: a target's name of identifier characters (no quote or
  -- backslash), params of printable ASCII from `{` to the `}` before the spec's last.
  local TARGET = '([A-Za-z_][%w_.]*:[A-Za-z_][%w_.]*)'
  local ONLY_CALL = '^{"call":"' .. TARGET .. '"}$'
  local CALL_FIRST, CALLBACK_NEXT = '^{"call":"' .. TARGET .. '"()', '^,"callback":"' .. TARGET .. '"()'
  local PARAMS = '^({[ -~]*})}$'
  -- The start of the last spec with params, `{"call":"<name>","callback":"<name>","params":` (or without the
  -- callback), and its names: a batch repeats it, and a spec that starts the same has the same names.
  local usual
  local unknown_field, refused_field = spec_fields()  -- (the table of fields' checks: _fields.lua)

  -- `package.module:function`: dotted identifiers on both sides of one ':' (each '.' followed by a
  -- letter or '_'; the dots found by plain search, far cheaper than a pattern searched for). Checked
  -- once per call for each distinct name: a batch repeats a few.
  local good_targets = {}
  local function check_target(field, text)
    if good_targets[text] then return end
    local shaped = type(text) == 'string' and string.find(text, '^[A-Za-z_][%w_.]*:[A-Za-z_][%w_.]*$')
    local dot = shaped and string.find(text, '.', 1, true)
    while dot do
      local after = string.byte(text, dot + 1) or 0
      if not (after == 95 or (after >= 65 and after <= 90) or (after >= 97 and after <= 122)) then shaped = false end
      dot = shaped and string.find(text, '.', dot + 1, true)
    end
    if not shaped then refuse(field, 'must look like package.module:function') end
    good_targets[text] = true
  end

  local function check_number(field, value, low, high, low_open)
    if type(value) ~= 'number' or value ~= value or value < low or value > high or (low_open and value == low) then
      refuse(field, 'must be a number ' .. (low_open and '> ' or '>= ') .. low .. ' and <= ' .. high)
    end
  end

  -- True if the arrays and objects of JSON `text` nest more than `limit` deep, counted without decoding
  -- (delayd.model.checks.nested_deeper counts the same way: escapes dropped, then strings, then brackets).
  local function nested_deeper(text, limit)
    if #text <= 2 * limit then return false end  -- (each level takes two brackets: most specs end here)
    local opens = 0  -- counted by plain finds (memchr), stopping past the limit: a pattern costs ~35 ns a byte
    for _, bracket in ipairs({'{', '['}) do
      local at = string.find(text, bracket, 1, true)
      while at and opens <= limit do
        opens, at = opens + 1, string.find(text, bracket, at + 1, true)
      end
    end
    if opens <= limit then return false end
    local depth = 0
    for bracket in string.gmatch(string.gsub(string.gsub(text, '\\.', ''), '"[^"]*"', ''), '[%[%]{}]') do
      depth = depth + ((bracket == '[' or bracket == '{') and 1 or -1)
      if depth > limit then return true end
    end
    return false
  end

  -- Params (decoded) nested more than MAX_DEPTH deep are refused, as every client refuses them: counted in
  -- `text` (their JSON, or the spec's: one level more) only when a value is a container, so the usual flat
  -- params cost a look at each value.
  local function check_depth(params, text, limit)
    for _, value in pairs(params) do
      if type(value) == 'table' then
        if nested_deeper(text, limit) then refuse('params', 'are nested more than ' .. MAX_DEPTH .. ' levels deep') end
        return
      end
    end
  end

  local check_json = json_checks()  -- (cjson's and Python's reading of JSON held alike: _gate_json.lua)

  -- The spec of a task whose mode says whether it recurs: decoded, every field checked. (A table
  -- cjson decodes is a JSON array exactly when its [1] is set: arrays are dense, nulls are
  -- cjson.null, an object's keys are strings; [] and {} both decode to an empty table.)
  local function check_spec(spec, mode, recurs)
    if #spec > MAX_SPEC then refuse('spec', 'is ' .. #spec .. ' bytes, more than ' .. MAX_SPEC) end
    -- A spec that is only a call target, `{"call":"<name>"}` with a name of identifier characters (no
    -- quote or backslash: cjson would decode it to {call = name} and nothing else), is checked without
    -- decoding: the name's shape, and a mode that does not recur, are all the rules below ask of it.
    local only_call = string.byte(spec, -2) == 34  -- ends in `"}`: else not tried (a spec with params ends `}}`)
      and string.match(spec, ONLY_CALL)
    if only_call then
      check_target('call', only_call)
      if recurs then refuse('mode', "ends in '*' for a task with every or cron, and only then") end
      return
    end
    -- So is a call's spec with `,"callback":"<name>"` then `,"params":{...}` (each optional, in the order
    -- delayd's clients write them) before its `}`, up to 1,000 bytes (params nested 1,000 deep, which the
    -- whole would fail on, do not fit): params (printable ASCII) are decoded alone, to an object; the names
    -- are not matched again while specs start as the last one with params did. A spec this path does not
    -- take goes the whole way below, which says why.
    -- (Only a spec ending in `"}` or `}}` can fit: any other, such as one with intervals or persistent last, goes
    -- straight to the whole way, without first trying this one's patterns.)
    local call, callback, params, at
    local last_two = string.byte(spec, -2)
    if #spec <= 1000 and string.byte(spec, -1) == 125 and (last_two == 34 or last_two == 125) then
      if usual and string.sub(spec, 1, #usual.head) == usual.head then  -- the last one's names (checked below)
        call, callback = usual.call, usual.callback
        params = string.match(spec, PARAMS, #usual.head + 1)
      else
        call, at = string.match(spec, CALL_FIRST)
        if call then
          local after
          callback, after = string.match(spec, CALLBACK_NEXT, at)
          at = after or at
          if string.sub(spec, at, at + 9) == ',"params":' then
            usual = {head = string.sub(spec, 1, at + 9), call = call, callback = callback}
            params = string.match(spec, PARAMS, at + 10)
          end
        end
      end
    end
    local fits = call and at == #spec
    if params then
      local decoded, t = pcall(cjson.decode, params)
      fits = decoded and type(t) == 'table' and t[1] == nil
      if fits then
        check_depth(t, params, MAX_DEPTH)
        check_json(params, true)
      end
    end
    if fits then
      check_target('call', call)
      if callback then check_target('callback', callback) end
      if recurs then refuse('mode', "ends in '*' for a task with every or cron, and only then") end
      return
    end
    local ascii = string.find(spec, '^[ -~]*$')
    if not ascii and not utf8_ok(spec) then refuse('spec', 'is not valid UTF-8 text') end
    local decoded, t = pcall(cjson.decode, spec)
    if not decoded or type(t) ~= 'table' or t[1] ~= nil then refuse('spec', 'is not a JSON object') end
    -- No unknown field (the table of names is made only to name one), and each of a kind the table checks.
    local unknown = not only_known(t) and unknown_field(t)
    if unknown then refuse('spec', 'unknown field ' .. cjson.encode(unknown)) end
    local refused, why = refused_field(t)
    if refused then refuse(refused, why) end
    local call, url, push = t.call, t.url, t.push
    local targets = (call ~= nil and call ~= '' and call ~= cjson.null and 1 or 0)
      + (url ~= nil and url ~= '' and url ~= cjson.null and 1 or 0)
      + (push ~= nil and push ~= '' and push ~= cjson.null and 1 or 0)
    if targets ~= 1 then refuse('target', 'give exactly one of call, url or push') end
    if call ~= nil then check_target('call', call) end
    if t.callback ~= nil then check_target('callback', t.callback) end
    if push ~= nil then check_name('push', push) end
    if url ~= nil then
      check_url(url)
      if not is_url(spec) then refuse('url', 'the spec of a URL task must start with {"url":') end
    end
    if t.trace ~= nil and not trace_ok(t.trace) then
      refuse('trace', 'must be a W3C traceparent 00-<32 hex>-<16 hex>-<2 hex>, then maybe a space and a tracestate')
    end
    -- (cjson decodes [] as it decodes {}: an empty one must be written as an object)
    if t.params ~= nil and (type(t.params) ~= 'table' or t.params[1] ~= nil
        or next(t.params) == nil and not string.find(spec, '"params"%s*:%s*{')) then
      refuse('params', 'must be a JSON object')
    end
    if t.params ~= nil then check_depth(t.params, spec, MAX_DEPTH + 1) end
    local every, cron = t.every, t.cron
    local schedules = 0
    if t.intervals ~= nil then
      schedules = 1
      local list = t.intervals
      if type(list) ~= 'table' or list[1] == nil or #list > 1000 then
        refuse('intervals', 'must be a list of 1 to 1000 numbers of seconds')
      end
      for _, gap in ipairs(list) do check_number('intervals', gap, 0, TEN_YEARS) end
    end
    if every ~= nil then schedules = schedules + 1 end
    if cron ~= nil then
      schedules = schedules + 1
      local fields = 0
      if type(cron) == 'string' then
        for word in string.gmatch(cron, '%S+') do
          fields = fields + 1
          if not string.find(word, '^[%w%*/,%-%?#]+$') then fields = 99 end
        end
      end
      if fields ~= 5 then refuse('cron', 'must be five fields: minute hour day-of-month month day-of-week') end
    end
    if schedules > 1 then refuse('schedule', 'give one of intervals, every or cron') end
    if t.tz ~= nil then
      if type(t.tz) ~= 'string' or #t.tz > 64 or not string.find(t.tz, '^[%w_%+%-/]+$') then
        refuse('tz', 'must be an IANA zone name like Europe/Berlin')
      end
    end
    if t.retries ~= nil then
      if schedules > 0 then refuse('retries', 'is for a task without intervals, every or cron') end
      if t.persistent == false then refuse('retries', 'give retries or persistent=false, not both') end
    end
    if recurs ~= (every ~= nil or cron ~= nil) then
      refuse('mode', "ends in '*' for a task with every or cron, and only then")
    end
    if mode == 'next*' and cron == nil then refuse('mode', 'next* is for a cron task') end
    check_json(spec, ascii, t)
    return url
  end
  return check_spec
end
-- One promote call, the bucket's tick (promote.lua), as its jobs share it (_due.lua, _release.lua, _reap.lua,
-- _trim.lua): `tick`, the table promote.lua makes per call, holds what they read (the clock, the batch, the
-- keys) and what they add up (`moved`, `reaped`, `kinds` of ready lists that got some, `asked`, `cut`).
--
-- Learned keys: a call touches no key it did not declare. The keys it can only know from what it reads
-- (the records of due and lapsed members, a paused topic's parked set, a limited topic's held set, the
-- limits' keys) are checked with may_touch(); where one is missing the work stops there (due order kept:
-- nothing after it is done this call), the keys go in the reply (`tick.asked`), and `tick.cut` is set, so
-- the caller calls again at once declaring them. The reply also names the keys the next call will probably
-- need (look_ahead), which the caller declares then: in the common case no call is cut.

-- Whether the call declared `key` (its KEYS made a set at the first question: an idle tick asks none).
local function is_declared(tick, key)
  if not tick.declared then
    tick.declared = {}
    for _, k in ipairs(KEYS) do tick.declared[k] = true end
  end
  return tick.declared[key]
end

-- Name `key` in the reply, once: the next call declares it.
local function ask_key(tick, key)
  if not tick.named[key] then
    tick.named[key] = true
    tick.asked[#tick.asked + 1] = key
  end
end

-- Whether the call may touch `key`; if not, it is asked for.
local function may_touch(tick, key)
  if is_declared(tick, key) then return true end
  ask_key(tick, key)
  return false
end

-- Whether the call may touch all of `keys`; if not, all of them are asked for (the next call needs
-- the whole set).
local function may_touch_all(tick, keys)
  local all = true
  for _, key in ipairs(keys) do all = is_declared(tick, key) and all end
  if not all then for _, key in ipairs(keys) do ask_key(tick, key) end end
  return all
end

local LIMIT_KEY_KINDS = {'tat:', 'run:', 'where:'}

-- `keys` and the limits' keys a release or a freed slot of `topic` touches (a single Redis only:
-- `tick.limits_prefix` is '' on Redis Cluster).
local function topic_limit_keys(tick, topic, keys)
  local lp = tick.limits_prefix
  if lp ~= '' then
    for _, kind in ipairs(LIMIT_KEY_KINDS) do keys[#keys + 1] = lp .. kind .. topic end
    keys[#keys + 1] = lp .. 'conf'
    keys[#keys + 1] = lp .. 'corrupt'
  end
  return keys
end

-- The ready list of a task by its `url` flag and priority (see is_url), and its kind, which the ready
-- messages name ('' call/push, 'u' URL).
local function ready_list(tick, url, priority)
  if url == '1' then return tick.url_lists[priority], 'u' end
  return tick.lists[priority], ''
end

-- Why an entry of `index` cannot be handled where a `wanted` status belongs, or nil: its record (`hash`
-- false when its key is not a hash) with `status` and `priority`.
local function entry_defect(tick, task_key, hash, status, priority, index, wanted)
  if not hash then return 'record is a ' .. key_type(task_key) .. ', not a hash' end
  if not status then return index .. ' entry without a record' end
  if status ~= wanted then return index .. ' entry with status ' .. string.sub(status, 1, 40) end
  if not tick.lists[priority or DEFAULT_PRIORITY] then return 'record with a bad priority' end
end

-- The pause of `topic`: false (nothing parks), or {key = its parked set, known, after}. The `paused` hash
-- is never read whole (a call costs the same whatever the number of topics paused: issue 41); each topic
-- of a member this call handles is looked up once (HGET). A topic being resumed ('r', see resume.lua)
-- parks only what is due after its earliest task still parked, so that the batches of a resume keep due
-- order. A flagged topic whose parked set this call may not touch is not `known`: its tasks are not moved
-- this call (the set is asked for).
local function pause_of(tick, topic)
  local pause = tick.pauses[topic]
  if pause ~= nil then return pause end
  if tick.none_paused == nil then tick.none_paused = on('hash', 'HLEN', tick.paused) == 0 end
  pause = false
  local flag = not tick.none_paused and on('hash', 'HGET', tick.paused, topic)
  if flag then
    local key = parked_key(tick.paused, topic)
    pause = {key = key, known = is_declared(tick, key), after = -math.huge}
    if pause.known then
      expect('zset', key)
      if flag == 'r' then
        pause.after = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2])
        if not pause.after then pause = false end
      end
    end
  end
  tick.pauses[topic] = pause
  return pause
end

-- Whether a task of `topic` due at `score` waits in its topic's parked set.
local function parks(tick, topic, score)
  local pause = pause_of(tick, topic)
  return pause and score > pause.after
end

-- Whether the call may move `member` (its record `task_key` declared, its topic's pause known); if not,
-- the call is cut there and the keys are asked for.
local function movable(tick, member, task_key)
  local pause = pause_of(tick, topic_of(member))
  local known = not pause or may_touch(tick, pause.key)
  if may_touch(tick, task_key) and known then return true end
  tick.cut = true
  return false
end

-- Members of a zset at scores no script writes (past 2^53 ms: inf, 1e300), with their scores: such an
-- entry would never come due, lapse or expire, and would be counted as waiting forever.
local function timeless(tick, key)
  return on('zset', 'ZRANGEBYSCORE', key, '(9007199254740992', '+inf', 'WITHSCORES', 'LIMIT', '0', tick.batch_text)
end

local AHEAD_MS = 50

-- When the bucket needs looking at again: the next due time (the earlier of the heads of `delayed` and of
-- `limited`) and the next lease expiry (ms, or -1 for none). Asks for the keys the next call will probably
-- need: the records of the members of `delayed` due within AHEAD_MS of its head or of now, whichever is
-- later (at most a batch: a backlog's next batch), and of leases lapsing within AHEAD_MS of now (with the
-- parked sets of their topics that are paused, and their topics' limits' keys).
local function look_ahead(tick)
  local now, prefix = tick.now, tick.prefix
  local head = redis.call('ZRANGE', tick.delayed, 0, 0, 'WITHSCORES')
  if head[2] then
    local horizon = math.max(now, due_of_score(head[2])) + AHEAD_MS + DUE_SKEW
    for _, member in ipairs(redis.call('ZRANGEBYSCORE', tick.delayed, '-inf', horizon, 'LIMIT', '0',
                                       tick.batch_text)) do
      ask_key(tick, prefix .. member)
      local pause = pause_of(tick, topic_of(member))
      if pause then ask_key(tick, pause.key) end
    end
  end
  local lease_head = redis.call('ZRANGE', tick.leases, 0, 0, 'WITHSCORES')
  if lease_head[2] and tonumber(lease_head[2]) <= now + AHEAD_MS then
    local lapsing = redis.call('ZRANGEBYSCORE', tick.leases, '-inf', now + AHEAD_MS, 'LIMIT', '0', tick.batch_text)
    for _, member in ipairs(lapsing) do
      ask_key(tick, prefix .. member)
      local pause = pause_of(tick, topic_of(member))
      if pause then ask_key(tick, pause.key) end
      for _, key in ipairs(topic_limit_keys(tick, topic_of(member), {})) do ask_key(tick, key) end
    end
  end
  local limited_head = redis.call('ZRANGE', tick.limited, 0, 0, 'WITHSCORES')
  local next_due = head[2] and due_of_score(head[2]) or -1
  if limited_head[2] and (next_due < 0 or tonumber(limited_head[2]) < next_due) then
    next_due = tonumber(limited_head[2])
  end
  return next_due, tonumber(lease_head[2] or -1)
end
-- Due tasks, the first job of a promote call (promote.lua, _tick.lua): the members of `delayed` due now, a
-- batch at most, go to the back of their kind's and priority's ready list in due order (one RPUSH per list
-- for the whole batch), `queued=1`. A due task of a paused topic is parked instead (with its due time), so
-- it leaves the head of `delayed`. A member whose record is missing or corrupt (not a hash, a status or
-- priority it cannot have there) is quarantined, and so is an entry at a score no script writes (never
-- due). Returns how many members were due (a whole batch: the caller calls again at once).
local function move_due(tick)
  local now, prefix = tick.now, tick.prefix
  local found, scores = {}, {}
  local entries = on('zset', 'ZRANGEBYSCORE', tick.delayed, '-inf', now + DUE_SKEW, 'WITHSCORES', 'LIMIT', '0',
                     tick.batch_text)
  for i = 1, #entries, 2 do
    found[#found + 1] = entries[i]
    scores[entries[i]] = entries[i + 1]
  end
  -- In due order, up to the first member the call may not move (it and the rest are asked for).
  local moving = {}
  for _, member in ipairs(found) do
    if tick.cut or not movable(tick, member, prefix .. member) then
      ask_key(tick, prefix .. member)
    else
      moving[#moving + 1] = member
    end
  end
  local pushes = {}  -- ready list -> its members, in due order
  for _, member in ipairs(moving) do
    local task_key = prefix .. member
    local hash, status, priority, url, parked_at = record_fields(task_key, 'status', 'priority', 'url', 'parked')
    local topic = topic_of(member)
    count_state('waiting', topic, -1)
    local reason = entry_defect(tick, task_key, hash, status, priority, 'delayed', 'delayed')
    if reason then
      quarantine(tick.quarantine_to, task_key, member, reason)
    elseif parks(tick, topic, tonumber(scores[member]) or now) then
      mark_parked(task_key, now)
      zadd_counted(pause_of(tick, topic).key, scores[member], member, 'parked', topic)
    else
      priority = priority or DEFAULT_PRIORITY
      if parked_at then
        redis.call('HSET', task_key, 'queued', '1', 'unparked', now)  -- set aside until now (mark_parked)
      else
        redis.call('HSET', task_key, 'queued', '1')
      end
      local list, kind = ready_list(tick, url, priority)
      local pushed = pushes[list] or {}
      pushes[list] = pushed
      pushed[#pushed + 1] = member
      tick.kinds[kind] = true
      count_ready(priority, topic, 1)
      tick.moved = tick.moved + 1
    end
  end
  for list, members in pairs(pushes) do on('list', 'RPUSH', list, unpack(members)) end
  if #moving > 0 then redis.call('ZREM', tick.delayed, unpack(moving)) end
  local never = timeless(tick, tick.delayed)
  for i = 1, #never, 2 do
    local member, score = never[i], never[i + 1]
    if may_touch(tick, prefix .. member) then
      count_state('waiting', topic_of(member), -1)
      quarantine(tick.quarantine_to, prefix .. member, member, 'delayed entry due at ' .. score .. ' ms: never due')
      redis.call('ZREM', tick.delayed, member)
    else
      tick.cut = true
    end
  end
  return #found
end
-- Held tasks, the second job of a promote call (promote.lua, _tick.lua). Tasks held back by a limit
-- (claim.lua) are released when the topic's time in `limited` comes: as many as the limit lets start now,
-- earliest due first, to the front of their ready lists (all of them, a batch at a time, when the topic has
-- no limit any more), marked `released`, their starts and slots taken for them (so that buckets releasing
-- at the same time never release more than the limit). A held entry whose record is no longer that held
-- task (deleted, replaced, run meanwhile) is dropped; an entry of `limited` for a topic that holds nothing
-- here any more leaves `limited` and the topic's `where`. A topic whose held set or limits' keys the call
-- may not touch waits for the next call; so do the held members from the first whose record it may not
-- touch (with the topic's keys asked for again).

-- Release what the limit of `topic` lets start of its held set `held_set` (`topic_keys`: the keys that
-- takes), each member pushed to the front of its list in `fronts` (list -> members, the first due first).
-- Returns true when the topic's entry is to be looked at again at once (its limit is gone).
local function release_topic(tick, topic, held_set, topic_keys, fronts)
  local now, lp = tick.now, tick.limits_prefix
  tick.limits = tick.limits or limits_of(lp) or {}
  expect('zset', held_set)
  local limit = tick.limits[topic]
  local g = limit and gate(lp, topic, limit, tick.clock)
  local room = math.min(tick.batch, g and gate_room(g) or tick.batch)
  local stale, stopped = false, false
  if room > 0 then
    local entries = redis.call('ZRANGE', held_set, 0, room - 1, 'WITHSCORES')
    for i = 1, #entries, 2 do
      local member, due = entries[i], entries[i + 1]
      local task_key = tick.prefix .. member
      if stopped then
        ask_key(tick, task_key)
      elseif not may_touch(tick, task_key) then
        stopped = true
      else
        local hash, status, queued, held_at, priority, url =
          record_fields(task_key, 'status', 'queued', 'held', 'priority', 'url')
        zrem_counted(held_set, member, 'throttled', topic)
        if not (hash and status == 'delayed' and queued ~= '1' and held_at) then
          stale = true
        elseif parks(tick, topic, tonumber(due) or now) then
          redis.call('HDEL', task_key, 'held')
          mark_parked(task_key, now)
          zadd_counted(pause_of(tick, topic).key, due, member, 'parked', topic)
        elseif not tick.lists[priority or DEFAULT_PRIORITY] then
          quarantine(tick.quarantine_to, task_key, member, 'record with a bad priority')
        else
          redis.call('HSET', task_key, 'queued', '1', 'released', now)
          local list, kind = ready_list(tick, url, priority or DEFAULT_PRIORITY)
          fronts[list] = fronts[list] or {}
          table.insert(fronts[list], 1, member)
          tick.kinds[kind] = true
          count_ready(priority, topic, 1)
          tick.moved = tick.moved + 1
          if g then gate_take(g, member, now + LIMIT_RESERVE_MS) end
        end
      end
    end
  end
  if stopped then
    tick.cut = true
    for _, key in ipairs(topic_keys) do ask_key(tick, key) end
  end
  if g then gate_close(g) end
  local left = redis.call('ZCARD', held_set)
  if left == 0 then
    redis.call('ZREM', tick.limited, topic)
    if lp ~= '' then redis.pcall('SREM', lp .. 'where:' .. topic, tick.bucket) end
  elseif not g or stale or stopped then
    redis.call('ZADD', tick.limited, now, topic)  -- no limit any more, stale entries, cut: again at once
    return not g
  else
    redis.call('ZADD', tick.limited, gate_next(g, left), topic)
  end
  return false
end

-- The topics of `limited` whose time came, a batch at most: each releases what its limit lets start (LPUSH
-- of each list's batch in reverse: the earliest first). Returns true when some topic is to be looked at
-- again at once.
local function release_held(tick)
  local again = false
  local fronts = {}  -- ready list -> its released members, the first due first
  for _, topic in ipairs(on('zset', 'ZRANGEBYSCORE', tick.limited, '-inf', tick.now, 'LIMIT', '0', tick.batch_text)) do
    local held_set = held_key(tick.limited, topic)
    local topic_keys = topic_limit_keys(tick, topic, {held_set})
    local pause = pause_of(tick, topic)
    if pause then topic_keys[#topic_keys + 1] = pause.key end
    if not may_touch_all(tick, topic_keys) then
      tick.cut = true
    elseif release_topic(tick, topic, held_set, topic_keys, fronts) then
      again = true
    end
  end
  for list, members in pairs(fronts) do on('list', 'LPUSH', list, unpack(members)) end
  return again
end
-- Lapsed leases, the third job of a promote call (promote.lua, _tick.lua): the worker died, hung or lost
-- Redis. Its run is fenced off (claim + 1) and the task runs again soon, to the front of its ready list,
-- keeping its run number (the same idempotency key); a task of a paused topic is parked instead. A lease of
-- a task that finished meanwhile is simply dropped; one whose record cannot be a running task is
-- quarantined. A lapsed lease of a topic with a concurrency limit frees its slot (free_slots).
local FINISHED = {ok = true, failed = true, deleted = true}

-- The leases lapsed by now, a batch at most, and those that would never lapse (as lapsed now), in expiry
-- order up to the first the call may not handle (with, on a single Redis, its topic's limits' keys, for the
-- slot it frees). Returns how many leases were lapsed (a whole batch: the caller calls again at once).
local function reap_lapsed(tick)
  local now, prefix, lp = tick.now, tick.prefix, tick.limits_prefix
  local expired = on('zset', 'ZRANGEBYSCORE', tick.leases, '-inf', now, 'LIMIT', '0', tick.batch_text)
  local endless = timeless(tick, tick.leases)
  for i = 1, #endless, 2 do expired[#expired + 1] = endless[i] end
  local lapsed, stop = {}, false
  for _, member in ipairs(expired) do
    local task_key = prefix .. member
    if stop or not (movable(tick, member, task_key)
                    and may_touch_all(tick, topic_limit_keys(tick, topic_of(member), {}))) then
      stop, tick.cut = true, true
      ask_key(tick, task_key)
    else
      lapsed[#lapsed + 1] = member
    end
  end
  local backs = {}  -- ready list -> its lapsed members, the last lapsed first
  local freed = nil  -- topic -> the lapsed runs of topics with a concurrency limit
  for _, member in ipairs(lapsed) do
    local task_key = prefix .. member
    local hash, status, priority, claim, created, due, url =
      record_fields(task_key, 'status', 'priority', 'claim', 'created', 'due', 'url')
    local topic = topic_of(member)
    count_state('running', topic, -1)
    if lp ~= '' and hash then  -- (the lapsed run's token is the record's; without a record its slot lapses alone)
      freed = freed or {}
      freed[topic] = freed[topic] or {}
      table.insert(freed[topic], run_id(member, claim_token(claim, created)))
    end
    if not FINISHED[status] then
      local reason = entry_defect(tick, task_key, hash, status, priority, 'leased', 'running')
      local token = hash and claim_token(claim, created) + 1
      if reason then
        quarantine(tick.quarantine_to, task_key, member, reason)
      elseif parks(tick, topic, int_of(due) or now) then
        -- Its topic is paused: it waits, parked at its due time, to run again on resume.
        redis.call('HSET', task_key, 'status', 'delayed', 'queued', '0', 'lapsed', '1', 'claim', token)
        mark_parked(task_key, now)
        zadd_counted(pause_of(tick, topic).key, int_of(due) or now, member, 'parked', topic)
        tally('lapsed', topic)
      else
        redis.call('HSET', task_key, 'status', 'delayed', 'queued', '1', 'lapsed', '1', 'claim', token)
        local list, kind = ready_list(tick, url, priority or DEFAULT_PRIORITY)
        tick.kinds[kind] = true
        backs[list] = backs[list] or {}
        table.insert(backs[list], 1, member)
        count_ready(priority, topic, 1)
        tally('lapsed', topic)
        tick.reaped = tick.reaped + 1
      end
    end
  end
  -- To the front of their lists in expiry order, the first lapsed first (one LPUSH of each list's in reverse).
  for list, members in pairs(backs) do on('list', 'LPUSH', list, unpack(members)) end
  if #lapsed > 0 then redis.call('ZREM', tick.leases, unpack(lapsed)) end
  if freed then
    local limits = limits_of(lp)
    for topic in pairs(freed) do
      if not (limits and limits[topic] and limits[topic].slots > 0) then freed[topic] = nil end
    end
    is_declared(tick, tick.delayed)  -- (other buckets' `limited` only if declared: docs/redis-layout.md)
    free_slots(lp, freed, now, tick.declared)
  end
  return #expired
end
-- Finished-task indexes, the fourth job of a promote call (promote.lua, _tick.lua): they keep only what is
-- inside the retention period (the records themselves expire on their own with PEXPIRE), a batch at most
-- a call per index; an entry finished at a time that never comes (timeless) is past retention too.

-- Trim the index `done_key` of tasks counted `state`, and their reasons in `reasons` (the quarantine hash,
-- which keeps a reason for as long as its task is in done:failed), if given.
local function trim_index(tick, done_key, state, reasons)
  local old = on('zset', 'ZRANGEBYSCORE', done_key, '-inf', tick.now - tick.retention, 'LIMIT', '0', tick.batch_text)
  local never = timeless(tick, done_key)
  for i = 1, #never, 2 do old[#old + 1] = never[i] end
  if #old > 0 then
    redis.call('ZREM', done_key, unpack(old))
    if reasons then on('hash', 'HDEL', reasons, unpack(old)) end
    for _, member in ipairs(old) do count_state(state, topic_of(member), -1) end
  end
end

-- The three finished-task indexes of the bucket, and the quarantine hash with done:failed.
local function trim_finished(tick, done_ok, done_failed, done_deleted, quarantine_key)
  trim_index(tick, done_ok, 'ok')
  trim_index(tick, done_failed, 'failed', quarantine_key)
  trim_index(tick, done_deleted, 'deleted')
end
redis.register_function{function_name='delayd_1730b7db2ec19540_add', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
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

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_aside', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- aside: the topics of one bucket that may hold URL tasks set aside for a disabled host (claim.lua),
-- forgetting those of the given topics whose parked set is empty now (a resume moved their tasks back).
-- KEYS[1]      aside     P{N}:aside            set of topics
-- KEYS[2]      corrupt   P{N}:corrupt          (declared only: set_aside names it)
-- KEYS[2 + t]  parked    P{N}:paused:<topic>   topic t's parked set
-- ARGV[t]      topic     topic t to look at (Store.enable_steps: none on its first call, which only lists them)
-- Reply: {topics...}, the topics kept. O(topics in the set).
local aside = KEYS[1]
local parked_sets = KEYS  -- topic t's parked set: parked_sets[2 + t]

expect('set', aside)
for t, topic in ipairs(ARGV) do
  local parked = parked_sets[2 + t]
  expect('zset', parked)
  if redis.call('ZCARD', parked) == 0 then redis.call('SREM', aside, topic) end
end
return redis.call('SMEMBERS', aside)

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_browse', flags={'no-writes'}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- browse: read one page of a bucket's index (a zset of members) in order, keeping the
-- members that match, with bounded work (the dashboard's task list; changes nothing).
-- KEYS[1]  index          P{N}:delayed|P{N}:leases|P{N}:done:<status>
-- ARGV[1]  order          'asc' or 'desc'
-- ARGV[2]  cursor_score   '' = from the start
-- ARGV[3]  cursor_member
-- ARGV[4]  topic          '' = any
-- ARGV[5]  id_prefix      '' = any
-- ARGV[6]  limit          matches
-- ARGV[7]  budget         entries examined
-- Reply: {matches, examined, stop_score, stop_member, size, kind}
--   matches: {member, score, ...}; examined: index entries looked at; stop_score, stop_member: the last entry
--   examined (false when the index was read to its end); size: the index's; kind, only when the index is not
--   a sorted set, the key's type (then nothing was read: this script only reads, so it leaves the key for
--   the writers' `expect` to set aside)
-- Order is (score, member) ascending, or its reverse. The cursor is the last entry the
-- caller has seen; the page starts right after it, found with ZRANK when the member is
-- still in this index at that score, else by ZCOUNT and a skip over equal scores.
local index = KEYS[1]
local order, cursor_score, cursor_member, topic, id_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local limit, budget = tonumber(ARGV[6]), tonumber(ARGV[7])
local desc = order == 'desc'
local kind = key_type(index)
if kind ~= 'zset' and kind ~= 'none' then return {{}, 0, false, false, 0, kind} end
local range = desc and 'ZREVRANGE' or 'ZRANGE'

local start, skip_ties = 0, false
if cursor_score ~= '' then
  local score = redis.call('ZSCORE', index, cursor_member)
  if score and tonumber(score) == tonumber(cursor_score) then
    start = redis.call(desc and 'ZREVRANK' or 'ZRANK', index, cursor_member) + 1
  else
    if desc then
      start = redis.call('ZCOUNT', index, '(' .. cursor_score, '+inf')
    else
      start = redis.call('ZCOUNT', index, '-inf', '(' .. cursor_score)
    end
    skip_ties = true
  end
end

-- A member is topic:id and an id holds no ':', so with a topic the test is a plain prefix
-- compare plus "no ':' after the topic"; a scan stays cheap per entry.
local head = topic ~= '' and (topic .. ':' .. id_prefix) or nil
local function matches(member)
  if head then
    return string.sub(member, 1, #head) == head and not string.find(member, ':', #topic + 2, true)
  end
  return id_prefix == '' or string.sub(string.match(member, '[^:]*$'), 1, #id_prefix) == id_prefix
end

local found, examined, last_score, last_member = {}, 0, false, false
local target = tonumber(cursor_score)
local size = redis.call('ZCARD', index)
local pos = start  -- index of the next entry not examined
while #found < 2 * limit and examined < budget and pos < size do
  local page = redis.call(range, index, pos, pos + math.min(200, budget - examined) - 1, 'WITHSCORES')
  if #page == 0 then break end
  for i = 1, #page, 2 do
    local member, score = page[i], page[i + 1]
    examined, pos = examined + 1, pos + 1
    last_score, last_member = score, member
    -- entries that share the cursor's score and come before it in this order were seen
    local seen = skip_ties and tonumber(score) == target and
                 ((desc and member >= cursor_member) or (not desc and member <= cursor_member))
    if not seen then
      skip_ties = false
      if matches(member) then
        found[#found + 1] = member
        found[#found + 1] = score
        if #found == 2 * limit then break end
      end
    end
  end
end
if pos >= size then last_score, last_member = false, false end
return {found, examined, last_score, last_member, size}

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_claim', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
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

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_delete', flags={'allow-oom'}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
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

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_finish', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
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

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_host_switch', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- host_switch: disable or enable URL hosts (delayd hosts disable|enable), counting the event.
-- KEYS[1]      off        P{hosts}:off             hash origin -> when disabled (ms)
-- KEYS[2]      events     P{hosts}:events          hash disabled|enabled -> times
-- KEYS[3]      corrupt    P{hosts}:corrupt         (declared only: set_aside names it)
-- KEYS[3 + o]  health     P{hosts}:h:<origin>      to enable, origin o's health hash
-- ARGV[1]      action     'disable' or 'enable'
-- ARGV[1 + o]  origin     origin o (scheme://host:port)
-- Reply: changed, how many origins changed
-- Disabling flags the origins: from then on claim.lua sets their due URL tasks aside (runs in flight
-- finish). Enabling unflags them, and forgets since when they had been failing (`P{hosts}:h:<origin>`),
-- so that url_disable_after counts afresh; Store.enable_steps then resumes the topics holding tasks set aside.
-- An origin already in the asked state is left as it is and not counted. O(origins).
local off, events = KEYS[1], KEYS[2]
local health = KEYS  -- origin o's health hash: health[3 + o]
local action = ARGV[1]
local origins = ARGV  -- origin o: origins[1 + o]

expect('hash', off, events)
local changed = 0
for o = 1, #origins - 1 do
  if action == 'disable' then
    changed = changed + redis.call('HSETNX', off, origins[1 + o], now_ms())
  else
    changed = changed + redis.call('HDEL', off, origins[1 + o])
    redis.pcall('HDEL', health[3 + o], 'failing_since')
  end
end
if changed > 0 then redis.call('HINCRBY', events, action .. 'd', changed) end
return changed

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_hosts', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- hosts: fold one queue process's delivery tallies into the health of each URL host (delayd hosts).
-- KEYS[1]          seen           P{hosts}:seen           zset: origin -> last report (ms)
-- KEYS[2]          off            P{hosts}:off
-- KEYS[3]          events         P{hosts}:events
-- KEYS[4]          corrupt        P{hosts}:corrupt        (declared only: set_aside names it)
-- KEYS[4 + h]      health         P{hosts}:h:<origin>     host h's hash
-- ARGV[5h - 4]     deliveries     to host h
-- ARGV[5h - 3]     failures
-- ARGV[5h - 2]     last           the last outcome, 'ok' or 'fail'
-- ARGV[5h - 1]     err            the last error ('' when none failed)
-- ARGV[5h]         open_ms        ms the host's circuit stays open from now (0: closed)
-- ARGV[5hosts + 1] disable_after  ms of continuous failure after which a host is disabled (url_disable_after;
--                                 0: never)
-- Reply: now, Redis's clock (ms)
-- A host's hash: `m<minute % 60>` = '<minute>,<deliveries>,<failures>' (a ring: the last hour,
-- minute by minute), `error` and `error_at` (the last failure), `ok_at` (the last success),
-- `failing_since` (the first failure after the last success; removed by a success), `open_until`.
-- A host whose `failing_since` is that long ago is disabled as host_switch.lua disables it (`P{hosts}:off`,
-- the event counted in `P{hosts}:events`).
-- Bounded: a hash expires a day after its last report, and the index forgets hosts not reported
-- for a day (at most 100 per call). Times are Redis's clock.
local seen, off, events = KEYS[1], KEYS[2], KEYS[3]
local health, hosts = KEYS, #KEYS - 4  -- host h's hash: health[4 + h]; its values: unpack(ARGV, 5h - 4, 5h)
local disable_after = tonumber(ARGV[5 * hosts + 1]) or 0

local now = now_ms()
local DAY = 86400000
local host_prefix = string.sub(seen, 1, -5) .. 'h:'  -- `P{hosts}:h:` of `P{hosts}:seen`
local minute = math.floor(now / 60000)
local slot = 'm' .. (minute % 60)
for h = 1, hosts do
  local key = health[4 + h]
  local deliveries, failures, last, err, open_ms = unpack(ARGV, 5 * h - 4, 5 * h)
  deliveries, failures, open_ms = tonumber(deliveries) or 0, tonumber(failures) or 0, tonumber(open_ms) or 0
  local ring = on('hash', 'HGET', key, slot)
  local at, d, f = string.match(ring or '', '^(%d+),(%d+),(%d+)$')
  if tonumber(at) ~= minute then d, f = 0, 0 end
  local fields = {slot, minute .. ',' .. (d + deliveries) .. ',' .. (f + failures), 'open_until', now + open_ms}
  if failures > 0 then
    for _, v in ipairs({'error', err, 'error_at', now}) do fields[#fields + 1] = v end
  end
  if last == 'ok' then
    fields[#fields + 1], fields[#fields + 2] = 'ok_at', now
    redis.call('HDEL', key, 'failing_since')
  else
    local since = int_of(redis.call('HGET', key, 'failing_since'))
    if not since then
      since = now
      fields[#fields + 1], fields[#fields + 2] = 'failing_since', now
    end
    if disable_after > 0 and now - since >= disable_after
        and redis.call('HSETNX', off, string.sub(key, #host_prefix + 1), now) == 1 then
      redis.call('HINCRBY', events, 'disabled', 1)
    end
  end
  redis.call('HSET', key, unpack(fields))
  redis.call('PEXPIRE', key, DAY)
  on('zset', 'ZADD', seen, now, string.sub(key, #host_prefix + 1))
end
local gone = redis.call('ZRANGEBYSCORE', seen, '-inf', '(' .. (now - DAY), 'LIMIT', 0, 100)
if #gone > 0 then redis.call('ZREM', seen, unpack(gone)) end
return now

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_limit', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- limit: set or clear one topic's limit (docs/redis-layout.md, "Limits"). A single Redis only:
-- the buckets holding the topic's tasks are told, in their own slots.
-- KEYS[1]      conf           P{limits}:conf
-- KEYS[2]      tat            P{limits}:tat:<topic>
-- KEYS[3]      run            P{limits}:run:<topic>
-- KEYS[4]      where          P{limits}:where:<topic>   (declared only: wake_held names it)
-- KEYS[5]      corrupt        P{limits}:corrupt         (declared only: set_aside names it)
-- KEYS[5 + b]  limited        P{N}:limited              every bucket's (declared only: wake_held names them)
-- ARGV[1]      topic
-- ARGV[2]      limit          'N PERIOD_MS K' (N starts per PERIOD_MS, 0 = no rate; K runs in flight, 0 = no
--                             cap), or '' to clear it
-- ARGV[3]      limits_prefix  P{limits}:
-- Reply: had, 1 if the topic had a limit, else 0
-- A new limit holds from the next claim (runs already in flight are not counted against it); the
-- buckets holding tasks of the topic look at them again at once, so a higher limit lets more start
-- and a cleared one releases them all, in due order. Clearing forgets the rate state and the runs
-- in flight.
local conf, tat, run = KEYS[1], KEYS[2], KEYS[3]
local topic, limit, limits_prefix = ARGV[1], ARGV[2], ARGV[3]

local now = now_ms()
expect('hash', conf)
local had = redis.call('HEXISTS', conf, topic)
if limit == '' then
  redis.call('HDEL', conf, topic)
  redis.call('DEL', tat, run)
else
  redis.call('HSET', conf, topic, limit)
end
wake_held(limits_prefix, topic, now)
return had

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_park', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
-- park: set aside the tasks of a paused topic that were in one ready list when it was paused,
-- a bounded chunk per call (Client.pause walks each ready list of each bucket after pause.lua).
-- KEYS[1]      paused        P{N}:paused
-- KEYS[2]      ready         P{N}:ready:*         one ready list
-- KEYS[3]      counts_key    P{N}:counts
-- KEYS[4]      parked        P{N}:paused:<topic>  the topic's parked set
-- KEYS[5]      corrupt       P{N}:corrupt         (declared only: set_aside names it)
-- KEYS[5 + m]  record        P{N}:t:<member>      the records of the members the previous call returned
-- ARGV[1]      prefix        the task-key prefix P{N}:t:
-- ARGV[2]      topic
-- ARGV[3]      generation    the pause's
-- ARGV[4]      position      entries counted from the list's tail that earlier calls looked at (-1: none
--                            left to look at)
-- ARGV[5]      chunk         entries to look at
-- Reply: {parked, position, members...}
--   parked: tasks parked; position: the next call's, -1 at the head, or -2 (and nothing else) when the bucket no longer
--   holds this pause or a later one (a resume that began after it has resumed the topic here); members:
--   the topic's members looked at, for the next call
-- A script touches only the records its call declares, so each chunk takes two calls: one
-- looks at the `chunk` entries before `position` from the tail and returns the topic's members
-- among them, the next parks those whose record is still live (`queued=1`: `queued=0`, into
-- `paused:<topic>` at their due time; the list entries go stale, as a delete leaves them) and
-- looks at the following chunk. A member taken by a worker or deleted between the two calls is
-- no longer live and is left alone; a live record is a ready task of the paused topic wherever
-- its entry is now. Walking from the tail misses none: workers pop at the head and lapsed tasks
-- are pushed there, which moves no entry's distance from the tail, and what promote appends at
-- the tail while the topic is paused is of other topics (it only moves the walk's window back
-- over entries already seen). Costs O(chunk), whatever the list's length.
local paused, ready, counts_key, parked = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local records = KEYS  -- the m-th member's record: records[5 + m]
local prefix, topic, generation = ARGV[1], ARGV[2], tonumber(ARGV[3])
local position, chunk = tonumber(ARGV[4]), tonumber(ARGV[5])

expect('hash', paused)
local flagged = pause_generation(redis.call('HGET', paused, topic))  -- the pause the bucket holds
if not flagged or flagged < generation then return {0, -2} end
expect('list', ready)
expect('zset', parked)
local now = now_ms()
local moved = 0
for m = 1, #records - 5 do
  local task_key = records[5 + m]
  local member = string.sub(task_key, #prefix + 1)
  if string.sub(task_key, 1, #prefix) == prefix and topic_of(member) == topic then
    local hash, queued, due, priority = record_fields(task_key, 'queued', 'due', 'priority')
    if hash and queued == '1' then
      redis.call('HSET', task_key, 'queued', '0')
      mark_parked(task_key, now)
      count_ready(priority, topic, -1)
      zadd_counted(parked, int_of(due) or now, member, 'parked', topic)
      moved = moved + 1
    end
  end
end
flush_counts(counts_key)
if position < 0 then return {moved, -1} end
local entries = redis.call('LRANGE', ready, -(position + chunk), -(position + 1))
local reply = {moved, #entries < chunk and -1 or position + chunk}
for _, member in ipairs(entries) do
  if topic_of(member) == topic then reply[#reply + 1] = member end
end
return reply

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_pause', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- pause: flag one topic as paused in one bucket (Client.pause runs it on every bucket, then
-- park.lua on their ready lists).
-- KEYS[1]  paused            P{N}:paused
-- KEYS[2]  corrupt           P{N}:corrupt   (declared only: set_aside names it)
-- ARGV[1]  topic
-- ARGV[2]  given_generation  the pause's, '' on the first bucket: it is taken there
-- Reply: generation, the pause's
-- Promote reads the flag: from now on the topic's due tasks (and lapsed leases) are parked in
-- `paused:<topic>` instead of made ready. The flag's value is the pause's generation: Redis's
-- clock in µs when the pause reached its first bucket, and later than the generation held there
-- before, so a pause's generation is later than that of every resume that began before it
-- (resume.lua takes its own on the same bucket). A resume acts only on pauses of earlier
-- generations: a pause wins, on every bucket, over a resume that began before it. A bucket keeps
-- the latest generation it is given. O(1).
local paused = KEYS[1]
local topic, given_generation = ARGV[1], ARGV[2]

expect('hash', paused)
local flagged = pause_generation(redis.call('HGET', paused, topic))  -- the pause the bucket holds
local generation = int_of(given_generation) or math.max(now_us(), (flagged or 0) + 1)
if not flagged or flagged < generation then
  redis.call('HSET', paused, topic, string.format('%d', generation))
end
return generation

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_promote', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
-- promote: the bucket's tick. Four jobs, in this order, each in a file of the lib: due tasks to the ready
-- lists (_due.lua), held tasks their limit lets start (_release.lua), lapsed leases back to run again
-- (_reap.lua), finished-task indexes trimmed to the retention (_trim.lua); then the ready messages, and the
-- keys the next call will need (_tick.lua: a call touches no key it did not declare).
-- KEYS[1]    delayed        P{N}:delayed
-- KEYS[2]    leases         P{N}:leases
-- KEYS[3]    ready_3        P{N}:ready:3
-- KEYS[4]    ready_2        P{N}:ready:2
-- KEYS[5]    ready_1        P{N}:ready:1
-- KEYS[6]    done_ok        P{N}:done:ok
-- KEYS[7]    done_failed    P{N}:done:failed
-- KEYS[8]    done_deleted   P{N}:done:deleted
-- KEYS[9]    quarantine_key P{N}:quarantine
-- KEYS[10]   counts_key     P{N}:counts
-- KEYS[11]   totals_key     P{N}:totals
-- KEYS[12]   paused         P{N}:paused
-- KEYS[13]   ready_u3       P{N}:ready:u3
-- KEYS[14]   ready_u2       P{N}:ready:u2
-- KEYS[15]   ready_u1       P{N}:ready:u1
-- KEYS[16]   limited        P{N}:limited
-- KEYS[17]   window         P{N}:w:<n>        the run-event windows of the caller's clock (flush_stats)
-- KEYS[18]   next_window    P{N}:w:<n+1>
-- KEYS[19]   minute         P{N}:w:m:<m>
-- KEYS[20]   next_minute    P{N}:w:m:<m+1>
-- KEYS[21]   corrupt        P{N}:corrupt      (declared only: set_aside names it)
-- KEYS[22..] learned        *                 the keys the previous call's reply named, then the records of
--                                             the members wake messages named
-- ARGV[1]    prefix         the task-key prefix P{N}:t:
-- ARGV[2]    batch          the most entries a job takes of one index in one call
-- ARGV[3]    retention      ms
-- ARGV[4]    ready_channel  Pready
-- ARGV[5]    bucket         N
-- ARGV[6]    limits_prefix  P{limits}:, or '' on Redis Cluster
-- Reply: {moved, reaped, next_due, next_lease, clock_us, full, learned...}
--   moved: tasks made ready (due or released); reaped: lapsed leases made ready again;
--   next_due: ms, the earlier of the heads of `delayed` and of `limited`, or -1; next_lease: ms, the
--   earliest lease expiry, or -1; clock_us: Redis's clock (µs); full: 1 if a batch was full or the call was
--   cut for want of keys (call again at once), else 0; learned: the keys the next call is to declare.
local delayed, leases, ready_3, ready_2, ready_1 = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local done_ok, done_failed, done_deleted, quarantine_key = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local counts_key, totals_key, paused = KEYS[10], KEYS[11], KEYS[12]
local ready_u3, ready_u2, ready_u1, limited = KEYS[13], KEYS[14], KEYS[15], KEYS[16]
local window, next_window, minute, next_minute = KEYS[17], KEYS[18], KEYS[19], KEYS[20]
local prefix, batch, retention = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local ready_channel, bucket, limits_prefix = ARGV[4], ARGV[5], ARGV[6]

local clock = now_us()
local now = math.floor(clock / 1000)
local tick = {
  now = now, clock = clock, prefix = prefix, batch = batch, retention = retention, bucket = bucket,
  limits_prefix = limits_prefix, delayed = delayed, leases = leases, paused = paused, limited = limited,
  -- The batch as text once: a Lua number given to redis.call is formatted per argument (%.17g).
  batch_text = string.format('%d', batch),
  lists = {['3'] = ready_3, ['2'] = ready_2, ['1'] = ready_1},
  url_lists = {['3'] = ready_u3, ['2'] = ready_u2, ['1'] = ready_u1},
  quarantine_to = {failed = done_failed, quarantine = quarantine_key, now = now, retention = retention},
  moved = 0, reaped = 0, kinds = {}, cut = false, asked = {}, named = {}, pauses = {},
}
local due_found = move_due(tick)
local release_again = release_held(tick)
local leases_found = reap_lapsed(tick)
trim_finished(tick, done_ok, done_failed, done_deleted, quarantine_key)
flush_stats(counts_key, totals_key, window, next_window, minute, next_minute, now)
-- `N` for call/push tasks, `uN` for URL tasks: a queue process claims only the kind announced.
for kind in pairs(tick.kinds) do redis.call('PUBLISH', ready_channel, kind .. bucket) end
local next_due, next_lease = look_ahead(tick)
local full = (due_found == batch or leases_found == batch or release_again or tick.cut) and 1 or 0
return {tick.moved, tick.reaped, next_due, next_lease, clock, full, unpack(tick.asked)}

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_register', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- register: refresh (or remove) one daemon's entry in the registry of live daemons.
-- KEYS[1]  info      P{daemons}:info      hash: daemon id -> JSON entry
-- KEYS[2]  expires   P{daemons}:expires   sorted set: daemon id -> expiry (ms)
-- KEYS[3]  corrupt   P{daemons}:corrupt   (declared only: set_aside names it)
-- ARGV[1]  id        the daemon's id
-- ARGV[2]  entry     its JSON entry ('' removes the entry: a graceful stop)
-- ARGV[3]  ttl       ms
-- Reply: now, the Redis time (ms) of the call
-- Entries whose expiry has passed (a daemon that died without a stop) are dropped
-- on every call, so the registry never grows with dead daemons.
local info, expires = KEYS[1], KEYS[2]
local id, entry, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])

local now = now_ms()
expect('hash', info)
expect('zset', expires)
local dead = redis.call('ZRANGEBYSCORE', expires, '-inf', now)
for _, gone in ipairs(dead) do
  redis.call('HDEL', info, gone)
  redis.call('ZREM', expires, gone)
end
if entry == '' then
  redis.call('HDEL', info, id)
  redis.call('ZREM', expires, id)
else
  redis.call('HSET', info, id, entry)
  redis.call('ZADD', expires, now + ttl, id)
end
return now

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_renew', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- renew: extend the leases of runs still in progress.
-- KEYS[1]          leases         P{N}:leases
-- KEYS[2]          corrupt        P{N}:corrupt      (declared only: set_aside names it)
-- KEYS[2 + r]      record         P{N}:t:<member>   run r's record
-- KEYS[3 + runs..] limit_keys     P{limits}:*       on a single Redis, the limits' keys of the runs' topics
-- ARGV[1]          lease_ms       the new lease, from now
-- ARGV[2]          limits_prefix  P{limits}:, or '' on Redis Cluster
-- ARGV[1 + 2r]     member         run r's task
-- ARGV[2 + 2r]     claim          its claim token
-- Reply: {renewed...}, per run 1 (renewed) or 0 (lost: the run was fenced off)
-- A run of a topic with a concurrency limit holds its slot as long as its lease: renewed with it, and
-- renewed alone while the run goes on fenced off (SPEC 9: its slot is the run's until the run ends).
local leases = KEYS[1]
local records = KEYS  -- run r's record: records[2 + r]; its values: unpack(ARGV, 1 + 2r, 2 + 2r)
local lease_ms, limits_prefix = tonumber(ARGV[1]), ARGV[2]

local now = now_ms()
local limits = limits_of(limits_prefix)
expect('zset', leases)
local renewed = {}
for r = 1, (#ARGV - 2) / 2 do
  local member, claim = unpack(ARGV, 1 + 2 * r, 2 + 2 * r)
  local hash, stored_claim, status = record_fields(records[2 + r], 'claim', 'status')
  local limit = limits and limits[topic_of(member)]
  local slot = limit and limit.slots > 0 and limits_prefix .. 'run:' .. topic_of(member)
  if hash and stored_claim == claim and status == 'running' and redis.call('ZSCORE', leases, member) then
    redis.call('ZADD', leases, 'XX', now + lease_ms, member)
    -- (not XX: a run renewed after its lease expired, before promote reaped it, takes its slot back)
    if slot then redis.pcall('ZADD', slot, now + lease_ms, run_id(member, claim)) end
    renewed[#renewed + 1] = 1
  else
    -- Fenced off (its record deleted or replaced), the run goes on: it keeps the slot it still has.
    if slot then redis.pcall('ZADD', slot, 'XX', now + lease_ms, run_id(member, claim)) end
    renewed[#renewed + 1] = 0
  end
end
return renewed

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_resume', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
-- resume: start the tasks of one topic in one bucket again, a batch at a time.
-- KEYS[1]  paused         P{N}:paused
-- KEYS[2]  delayed        P{N}:delayed
-- KEYS[3]  counts_key     P{N}:counts
-- KEYS[4]  parked         P{N}:paused:<topic>  the topic's parked set
-- KEYS[5]  corrupt        P{N}:corrupt         (declared only: set_aside names it)
-- ARGV[1]  topic
-- ARGV[2]  wake_channel   Pwake:N
-- ARGV[3]  batch_size     the most tasks moved back
-- ARGV[4]  given_generation  the resume's ('' on its first call, on the first bucket: it is taken there,
--                            later than the pause flagged there)
-- Reply: {moved, left, generation, overtaken}
--   moved: tasks moved back; left: tasks still parked; generation: the resume's; overtaken: 1 if a later
--   pause holds the bucket, else 0
-- Moves the earliest `batch` parked tasks back into `delayed` at their due times, so
-- promote makes them ready in due order, and wakes the bucket. While some stay parked
-- the flag reads 'r' (resuming): promote then makes ready only the topic's due tasks
-- that are not later than the earliest one still parked, and parks the others, so
-- due order holds across batches. The last batch clears the flag.
-- A bucket flagged by a pause of this generation or a later one (a pause that began after this
-- resume: see pause.lua) is left as it is, and the call says so: the pause wins.
local paused, delayed, counts_key, parked = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local topic, wake_channel, batch_size, given_generation = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]

expect('hash', paused)
expect('zset', delayed, parked)
local flagged = pause_generation(redis.call('HGET', paused, topic))  -- the pause the bucket holds
local generation = int_of(given_generation) or math.max(now_us(), (flagged or 0) + 1)
if flagged and flagged >= generation then
  return {0, redis.call('ZCARD', parked), generation, 1}
end
local batch = redis.call('ZRANGE', parked, 0, batch_size - 1, 'WITHSCORES')
local moved = #batch / 2
if moved > 0 then
  local args = {}
  for i = 1, #batch, 2 do
    args[#args + 1] = batch[i + 1]
    args[#args + 1] = batch[i]
  end
  count_state('waiting', topic, redis.call('ZADD', delayed, unpack(args)))
  count_state('parked', topic, -redis.call('ZREMRANGEBYRANK', parked, 0, moved - 1))
  redis.call('PUBLISH', wake_channel, batch[2])
end
local left = redis.call('ZCARD', parked)
if left == 0 then
  redis.call('HDEL', paused, topic)
else
  redis.call('HSET', paused, topic, 'r')
end
flush_counts(counts_key)
return {moved, left, generation, 0}

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_retry', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
-- retry: put a finished task back to run now (one more run by its schedule): a failed one (retry), or
-- a failed or ok one finished inside a time span (replay: the same task, so the same webhook-id).
-- KEYS[1]  task_key        P{N}:t:<member>
-- KEYS[2]  delayed         P{N}:delayed
-- KEYS[3]  done            P{N}:done:<status>   the index of `status`
-- KEYS[4]  counts_key      P{N}:counts
-- KEYS[5]  quarantine_key  P{N}:quarantine
-- KEYS[6]  corrupt         P{N}:corrupt         (declared only: set_aside names it)
-- KEYS[7]  recurring       P{N}:recurring
-- ARGV[1]  member          topic:id
-- ARGV[2]  wake_channel    Pwake:N
-- ARGV[3]  status          'failed' (also when left out) or 'ok'
-- ARGV[4]  span_from       for a replay, the span (ms) its finish time (its score in done:<status>) must be
-- ARGV[5]  span_to         in (both left out for a retry)
-- Reply: code, 1 if the task was of that status (and finished in the span) and is now delayed, 0 if
--   missing (or its key is not a hash), -1 if not
-- A recurring task (every, cron) recurs again: back in the `recurring` index its last run took it out of.
local task_key, delayed, done, counts_key, quarantine_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local recurring = KEYS[7]
local member, wake_channel, status = ARGV[1], ARGV[2], ARGV[3] or 'failed'
local span_from, span_to = ARGV[4], ARGV[5]

local now = now_ms()
expect('zset', delayed, done)
expect('hash', quarantine_key)
local hash, stored_status, host, priority, spec = record_fields(task_key, 'status', 'host', 'priority', 'spec')
if not (hash and stored_status) then return 0 end
if stored_status ~= status then return -1 end
if span_from then
  local finished = tonumber(redis.call('ZSCORE', done, member))
  if not (finished and finished >= tonumber(span_from) and finished <= tonumber(span_to)) then return -1 end
end
redis.call('HSET', task_key, 'status', 'delayed', 'due', now)
redis.call('PERSIST', task_key)
redis.call('HDEL', quarantine_key, member)  -- no longer in done:failed
local topic = topic_of(member)
zrem_counted(done, member, status, topic)
zadd_counted(delayed, due_score(now, priority), member, 'waiting', topic)
count_host(host, 1)  -- a URL task waits for its host again
local ok, decoded = pcall(cjson.decode, spec or '')
local null = cjson.null  -- a null every/cron is no schedule (docs/protocol.md section 7)
if ok and type(decoded) == 'table' and ((decoded.every or null) ~= null or (decoded.cron or null) ~= null) then
  recurring_index(recurring).add(member)
end
wake_if_head(delayed, member, wake_channel, now)
flush_counts(counts_key)
return 1

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_run_now', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
-- run_now: make a waiting task due now (a recurring one then continues on its schedule).
-- KEYS[1]  task_key      P{N}:t:<member>
-- KEYS[2]  delayed       P{N}:delayed
-- KEYS[3]  paused        P{N}:paused         (declared only: the topic's parked set is KEYS[5])
-- KEYS[4]  counts_key    P{N}:counts
-- KEYS[5]  parked        P{N}:paused:<topic>
-- KEYS[6]  corrupt       P{N}:corrupt        (declared only: set_aside names it)
-- ARGV[1]  member        topic:id
-- ARGV[2]  wake_channel  Pwake:N
-- Reply: {code, status}
--   code: 1 due now; 2 due now but its topic is paused (it runs first on resume); 3 already due (in a ready
--   list, waiting for a worker: nothing changed); 0 no such task; -1 not delayed (running or finished:
--   nothing changed); status: the task's, '' when there is none
local task_key, delayed, counts_key, parked = KEYS[1], KEYS[2], KEYS[4], KEYS[5]
local member, wake_channel = ARGV[1], ARGV[2]

local now = now_ms()
local hash, status, queued, priority = record_fields(task_key, 'status', 'queued', 'priority')
if not (hash and status) then return {0, ''} end
if status ~= 'delayed' then return {-1, status} end
if queued == '1' then return {3, status} end
local topic = topic_of(member)
expect('zset', delayed, parked)
redis.call('HSET', task_key, 'due', now)
if redis.call('ZSCORE', parked, member) then
  redis.call('ZADD', parked, now, member)
  return {2, status}
end
zadd_counted(delayed, due_score(now, priority), member, 'waiting', topic)
wake_if_head(delayed, member, wake_channel, now)
flush_counts(counts_key)
return {1, status}

end}
redis.register_function{function_name='delayd_1730b7db2ec19540_stats', flags={'no-writes'}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- stats: read one bucket's statistics (changes nothing): the part whose cost does not grow with the
-- number of topics. The per-topic hashes (counts, totals, the windows, paused) are read by the caller a
-- page at a time (HSCAN), so that no call blocks Redis in proportion to the topics (issue 41).
-- KEYS[1]          delayed           P{N}:delayed
-- KEYS[2]          quarantine_key    P{N}:quarantine
-- KEYS[3]          first_window_key  P{N}:w:<n>   the first of the run-event windows w:<n-k+1> ... w:<n+1>
--                                               (only their names are read): the k windows the caller expects
--                                               to be the last, and the next one (delayd.store.windows)
-- KEYS[4..3 + k]   windows           P{N}:w:<n>   (declared only) the others
-- KEYS[4 + k..]    heads             P{N}:t:<member>   the records of the members the caller found at the heads
--                                               of the bucket's ready lists (a peek first: a script reads
--                                               only the records its call declares)
-- ARGV[1]          prefix          the task-key prefix P{N}:t:
-- ARGV[2]          windows_count   k
-- ARGV[3]          scan_limit      the most overdue entries of `delayed` looked at
-- ARGV[4]          truncated       1 if a ready list held more entries than the peek looked at, else 0
-- Reply: {now, first_window, head_due, quarantined, lag, truncated}
--   now: Redis's clock (ms); first_window: the first window's number (the caller reads windows first ...
--   first + k - 1); head_due: the due time of the delayed head (or false); quarantined: how many; lag:
--   {topic, earliest due, ...} of tasks due but not started; truncated: 1 if a scan hit the limit (the
--   per-topic due times may then be late ones), else 0
-- It writes nothing, not even to set a corrupt key aside: a key of the wrong type
-- reads as empty, an unreadable due time is not seen.
local delayed, quarantine_key, first_window_key = KEYS[1], KEYS[2], KEYS[3]
local heads = KEYS  -- the h-th head's record: heads[3 + k + h]
local prefix, windows_count, scan_limit, truncated = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

local now = now_ms()

-- The reply of a read, or `default` when it fails on stored data (WRONGTYPE).
local function read(default, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply['err'] then return default end
  return reply
end

-- The last `windows` windows of Redis's clock, among the declared ones; if the caller's clock was
-- off by more than half a window, the declared ones nearest to them (the reply's `first` says which).
local declared = tonumber(string.match(first_window_key, '(%d+)$'))
local first = math.min(math.max(math.floor(now / WINDOW_MS) - windows_count + 1, declared), declared + 1)

-- The due time (ms) a score of `delayed` stands for (due_of_score: a priority's skew removed). One below
-- any time a script writes (-inf, -1e300: written by someone else) counts as due now, since promote moves
-- such an entry at once; one past 2^53 (+inf) is left as it is.
local function due_time(score)
  local n = tonumber(score)
  if n and n < -2^53 then return now end
  if n and n < 2^53 then return due_of_score(n) end
  return score
end

-- Earliest due time per topic of tasks that are due and not running: the past-due
-- head of `delayed` (not promoted yet) and the live heads of the ready lists (the records
-- declared: a member a worker took since the peek is no longer live).
local earliest = {}
local function seen(member, due)
  if not due then return end
  local topic = topic_of(member)
  if earliest[topic] == nil or due < earliest[topic] then earliest[topic] = due end
end
local overdue = read({}, 'ZRANGEBYSCORE', delayed, '-inf', now + DUE_SKEW, 'WITHSCORES', 'LIMIT', 0, scan_limit)
for i = 1, #overdue, 2 do seen(overdue[i], tonumber(due_time(overdue[i + 1]))) end
if #overdue == 2 * scan_limit then truncated = 1 end
for h = 1, #heads - (3 + windows_count) do
  local task_key = heads[3 + windows_count + h]
  local hash, queued, due = record_fields(task_key, 'queued', 'due')
  if hash and queued == '1' and due then seen(string.sub(task_key, #prefix + 1), int_of(due)) end
end
local lag = {}
for topic, due in pairs(earliest) do
  lag[#lag + 1] = topic
  lag[#lag + 1] = due
end

local head = read({}, 'ZRANGE', delayed, 0, 0, 'WITHSCORES')
return {now, first, head[2] and due_time(head[2]) or false, read(0, 'HLEN', quarantine_key), lag, truncated}

end}
