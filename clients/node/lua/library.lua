#!lua name=delayd_bc22a39995baf47d
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

-- HMGET of a task record; nil when the key holds something other than a hash.
local function read_record(task_key, ...)
  local r = redis.pcall('HMGET', task_key, ...)
  if r['err'] then return nil end
  return r
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
-- DUE_SKEW, so none moves before its ms. A score of the due time alone (priority 2, and any task an
-- earlier version wrote) reads as before; an earlier version's promote moves a priority-1 task 1 ms late.
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

-- A URL task's record names its origin (`host`, written by add) and is counted, while it is to be
-- delivered (status delayed or running), as `host|<origin>` in `counts` (delayd hosts: the tasks waiting
-- for a host). A record without the field (written before it existed) was never counted in.
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
  if removed then count(state, topic or topic_of(member), -1) end
  return removed
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

-- Write what the script counted: state counts (flush_counts); run events to the
-- lifetime totals and to the 10-second window and the minute of `now` (which expire), from
-- the declared keys KEYS[w] .. KEYS[w + 3]: windows n, n + 1 and minutes m, m + 1.
local function flush_stats(counts_key, totals_key, w, now)
  flush_counts(counts_key)
  if next(runs) then
    local window = declared_window(KEYS[w], KEYS[w + 1], now, WINDOW_MS)
    local minute = declared_window(KEYS[w + 2], KEYS[w + 3], now, MINUTE_MS)
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
    local r = redis.call('HMGET', task_key, 'status', 'host')
    if PENDING[r[1]] then count_host(r[2], -1) end
  end
  redis.call('HSET', task_key, 'status', 'failed', 'queued', '0', 'error', 'quarantined: ' .. reason)
  on('hash', 'HSET', aside.quarantine, member, reason)
  index_finished(member, aside.failed, aside.now, task_key, aside.retention, 'failed', topic_of(member))
end
-- The helpers of limits per topic, read as the end of _lib.lua (delayd/store/scripts.py), linked the
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
-- The takes of earlier versions (promote.lua): their take.lua popped ready members into the bucket's
-- `taking` zset, one member per take, for their claim.lua to start in a second call. This version's claim
-- pops and starts in one call; promote still puts back the takes an older queue process left there
-- (killed or hung between its two calls) while daemons of both versions run during an upgrade.
-- A take (hold_take of those versions): per task, in order, `<list> <length> <member>` (its list, so
-- that putting it back needs no record; the length, as a member may hold any byte), at its deadline (ms).

-- The entries of a take (its member of `taking`), in the order popped: {list name ('3', 'u2', ...), member}.
local function take_entries(take)
  local entries, at = {}, 1
  while true do
    local list, length, from = string.match(take, '^(u?[123]) (%d+) ()', at)
    if not from then break end
    at = from + tonumber(length)
    entries[#entries + 1] = {list, string.sub(take, from, at - 1)}
  end
  return entries
end

-- Takes of `taking` past their hold at `now` (ms): their queue process died or hung between take and
-- claim. Their members go back to the front of their lists (`lists`: list name -> key), in the order
-- they were popped, each passed to `found(list name, member)`; a claim that comes later finds its take
-- gone and starts nothing. At most `limit` members a call (whole takes, at least one), the newest takes
-- first, so that the older ones, put back by the next call, go in front of them: one call never pushes
-- 200 takes of 200 members (issue 41: 40,000 members in one call). Returns how many takes went back, and
-- whether lost takes are left (call again at once).
local function put_back_lost(taking, now, limit, lists, found)
  local lost = on('zset', 'ZREVRANGEBYSCORE', taking, now, '-inf', 'LIMIT', 0, limit + 1)
  if #lost == 0 then return 0, false end
  local chosen, size = {}, 0
  for _, take in ipairs(lost) do
    local entries = take_entries(take)
    if #chosen == limit or (#chosen > 0 and size + #entries > limit) then break end
    chosen[#chosen + 1] = {take, entries}
    size = size + #entries
  end
  local back = {}  -- list -> its members to push, the last first
  for t = 1, #chosen do  -- newest take first: pushed first, so that the older ones end up in front
    local entries = chosen[t][2]
    for i = #entries, 1, -1 do
      local list = lists[entries[i][1]]
      back[list] = back[list] or {}
      back[list][#back[list] + 1] = entries[i][2]
    end
  end
  for t = #chosen, 1, -1 do
    for _, entry in ipairs(chosen[t][2]) do found(entry[1], entry[2]) end
  end
  local taken = {}
  for t, take in ipairs(chosen) do taken[t] = take[1] end
  for list, members in pairs(back) do
    for i = 1, #members, UNPACK_MAX do
      on('list', 'LPUSH', list, unpack(members, i, math.min(i + UNPACK_MAX - 1, #members)))
    end
  end
  redis.call('ZREM', taking, unpack(taken))
  return #chosen, #lost > #chosen
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
-- add.lua's gate of validity (docs/protocol.md, section 7), in the lib so that the function library makes its
-- functions once, at load, not on every add. Whatever would make the daemon misread a record is refused with
-- `ERR delayd:bad-task <field>: <reason>`, every task of the call checked before anything is written. Clients
-- check first, for messages their users can act on (delayd.model.task); this is what holds when one does not.
-- A call flagged 'c' says its producer did: of its specs add.lua reads only what the scripts themselves
-- depend on (unread_ok), and a record bad otherwise is set aside at its first claim, never run.
-- Redis runs this for every task of every add, so the common case is kept cheap: one pcall for
-- the whole call (not one per task), names of printable ASCII proven by one anchored pattern,
-- a topic and a target checked once while they repeat, and a spec decoded at most once.
local MAX_NAME, MAX_SPEC, TEN_YEARS = 512, 1048576, 315360000
local REFUSED = 'delayd:bad-task '  -- the start of what refuse() raises (no Lua error starts so)

local function refuse(field, reason)
  error(REFUSED .. field .. ': ' .. reason, 0)
end

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
redis.register_function{function_name='delayd_bc22a39995baf47d_add', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
-- add: write (upsert, or insert-if-absent) a batch of tasks of one bucket (docs/protocol.md).
-- KEYS, in one of two forms (docs/protocol.md, section 3):
--   short (version 4): the bucket's `delayed` (`P{N}:delayed`), then per task its record
--       `P{N}:t:<topic>:<id>`; the script names the bucket's other keys from its tag `P{N}:`, so a
--       call passes no key it would not read (each costs Redis on every call), and Redis Cluster routes
--       it by that tag, which all of them share;
--   long (versions 1-3): delayed, counts, recurring, leases, done:ok, done:failed, done:deleted,
--       quarantine, paused, corrupt (corrupt may be left out, as producers before it did), then per task
--       2 keys: its record and its topic's parked set `P{N}:paused:<topic>`; every key the script may
--       touch is declared, for servers that refuse undeclared keys; they are checked against those names.
-- ARGV: flags, wake channel, then per task 4 values: spec JSON, priority, mode, value (ms)
-- flags: '1' nx (insert only) or '0' (replace), then 'c' ('1c', '0c') when the producer checked every
-- task itself (docs/protocol.md version 2, section 7): a spec is then read only for what the scripts
-- depend on (unread_ok, _gate.lua), not held to the whole gate, and the reply is the count written
-- mode: 'delay' (value is relative to now) or 'at' (absolute); a recurring task's
-- mode ends in '*' ('delay*', 'at*'), which also puts it in the `recurring` index;
-- 'next*' (value 0): a cron task whose first due time the daemon resolves (docs/protocol.md);
-- 'debounce' (value 'WAIT:MOST', ms, MOST may be empty): due WAIT from now, but never later than MOST
-- after the first add of the pending run (the record's `since`; docs/protocol.md).
-- A relative delay is resolved here, on Redis's clock. Replacing a task bumps
-- its claim token, so a worker still running the old version cannot finish it.
-- Returns the number of tasks written ('c'), or one 1 (written) or 0 (exists, nx) per task (protocol 1).
-- The task's member (`topic:id`) is read from its record's key.
-- Redis work per call is what a single add (a web request) waits for, so a fresh task
-- costs TIME, ZRANGE, EXISTS, HSET, ZADD and HINCRBY and nothing else: the keys only a
-- replacement touches are type-checked at the first replacement (a set-aside cannot
-- fail, so checking them after earlier tasks' writes keeps the rule), and `delayed`'s
-- type is checked by reading its head with pcall, before any write.
local now = now_ms()
local flags, channel = ARGV[1], ARGV[2]
local nx, checked = flags == '1' or flags == '1c', flags == '0c' or flags == '1c'
local delayed = KEYS[1]
local tag = string.sub(delayed, 1, -8)  -- `P{N}:` of `P{N}:delayed`
local prefix = tag .. 't:'
local tasks = (#ARGV - 2) / 4
local short = #KEYS == 1 + tasks
local lead, stride = 1, 1  -- task n's record is KEYS[lead + stride * (n - 1) + 1] (and the long form's parked set next)
local bad_keys = string.sub(delayed, -7) ~= 'delayed' or (#ARGV - 2) % 4 ~= 0
if not short and not bad_keys then
  lead, stride = KEYS[10] == tag .. 'corrupt' and 10 or 9, 2  -- (a record key is never that)
  bad_keys = KEYS[2] ~= tag .. 'counts' or KEYS[3] ~= tag .. 'recurring' or KEYS[4] ~= tag .. 'leases'
    or KEYS[5] ~= tag .. 'done:ok' or KEYS[6] ~= tag .. 'done:failed' or KEYS[7] ~= tag .. 'done:deleted'
    or KEYS[8] ~= tag .. 'quarantine' or KEYS[9] ~= tag .. 'paused' or #KEYS ~= lead + 2 * tasks
end
if bad_keys then
  return redis.error_reply('ERR delayd:bad-call KEYS and ARGV do not follow add.lua (docs/protocol.md)')
end

-- Every task of the call, in order: its key(s), priority, mode, value and spec. Fills `names`
-- with each task's member and topic (2n - 1, 2n), and `origins` with a URL task's origin (its record's
-- `host`); `task` is the task being checked.
local names, origins, task = {}, {}, 0
local check_spec  -- spec_gate()'s, made for the first spec that needs it
local function check_all()
  local prefix_len, parked_prefix = #prefix, tag .. 'paused:'
  local last_topic, last_parked  -- a topic and parked key already checked
  for i = 3, #ARGV, 4 do
    task = task + 1
    local task_key = KEYS[lead + stride * (task - 1) + 1]
    local parked = not short and KEYS[lead + 2 * task] or nil
    local priority, mode, value = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    if string.sub(task_key, 1, prefix_len) ~= prefix then
      refuse('key', 'not a record key of this bucket: ' .. prefix .. '<topic>:<id>')
    end
    local member = string.sub(task_key, prefix_len + 1)
    local topic, id = string.match(member, '^(.*):([^:]*)$')
    if not topic then refuse('id', 'the record key is not <prefix>t:<topic>:<id>') end
    local known = topic == last_topic and parked == last_parked
    if not known then check_name('topic', topic) end
    check_name('id', id)
    if not known then
      if parked and parked ~= parked_prefix .. topic then
        refuse('key', "the task's second key must be " .. parked_prefix .. '<topic>')
      end
      last_topic, last_parked = topic, parked
    end
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
    local spec = ARGV[i]
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
  return function(task_key, member, topic, recurs, old)
    -- A live ready-list entry of the old record goes stale with it; a URL task still to be delivered
    -- no longer waits for its host.
    if old[2] == '1' then count_ready(old[3], topic, -1) end
    if PENDING[old[1]] then count_host(old[8], -1) end
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
    return claim_token(old[4], old[5]) + 1
  end
end

local replace  -- replacing()'s function, once a task of this call replaces one
local earliest, earliest_member = math.huge, nil  -- the batch's earliest due time, and a member due then
-- Times go to Redis as text made here once: a Lua number passed to redis.call is formatted
-- (sprintf %.17g) at every use, which costs more than the rest of a task's HSET.
local now_text = string.format('%d', now)
local written = not checked and {} or nil  -- protocol 1's reply: 1 or 0 per task
local count = 0
local by_topic = {}  -- topic -> {due, member, ...}: one ZADD per topic, not per task
for n = 1, task do
  local i = 4 * n - 1
  local spec, priority, mode = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local value = tonumber(ARGV[i + 3])
  local task_key, member, topic = KEYS[lead + stride * (n - 1) + 1], names[2 * n - 1], names[2 * n]
  -- EXISTS first: a fresh task (the usual case) needs nothing else. A record without a
  -- status is corrupt, and its fields must not leak into the new one; a key that is not
  -- a hash is no task (read_record gives nil): it is replaced, even with nx.
  local exists = redis.call('EXISTS', task_key) == 1
  local old  -- the old record's fields; nil when there is none, or the key is not a hash
  if exists then
    old = read_record(task_key, 'status', 'queued', 'priority', 'claim', 'created', 'runs', 'since', 'host')
  end
  local recurs = mode == 'delay*' or mode == 'at*' or mode == 'next*'
  if nx and old then
    if written then written[n] = 0 end
  else
    local due, since = value, nil
    if mode == 'delay' or mode == 'delay*' or mode == 'next*' then
      due = now + value
    elseif mode == 'debounce' then
      -- Debounce: due `wait` ms from now, but never later than `most` ms after the first add of
      -- the pending run (`since`): the old record's, when it is delayed and has not run yet.
      local wait, most = string.match(ARGV[i + 3], '^(%d+):(%d*)$')
      since = now
      if old and old[1] == 'delayed' and (old[6] or '0') == '0' then since = int_of(old[7] or old[5]) or now end
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
      token = replace(task_key, member, topic, recurs, old or {})
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
    count = count + 1
    if written then written[n] = 1 end
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
return written or count

end}
redis.register_function{function_name='delayd_bc22a39995baf47d_aside', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- aside: the topics of one bucket that may hold URL tasks set aside for a disabled host (claim.lua),
-- forgetting those of the given topics whose parked set is empty now (a resume moved their tasks back).
-- KEYS: aside (set of topics), corrupt (set_aside), then the parked set (paused:<topic>) of each given topic
-- ARGV: the topics to look at (Store.enable_steps: none on its first call, which only lists them)
-- Returns the topics kept. O(topics in the set).
expect('set', KEYS[1])
for i, topic in ipairs(ARGV) do
  local parked = KEYS[i + 2]
  expect('zset', parked)
  if redis.call('ZCARD', parked) == 0 then redis.call('SREM', KEYS[1], topic) end
end
return redis.call('SMEMBERS', KEYS[1])

end}
redis.register_function{function_name='delayd_bc22a39995baf47d_browse', flags={'no-writes'}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- browse: read one page of a bucket's index (a zset of members) in order, keeping the
-- members that match, with bounded work (the dashboard's task list; changes nothing).
-- KEYS: the index (delayed, leases or done:<status>)
-- ARGV: order ('asc' or 'desc'), cursor score ('' = from the start), cursor member,
--       topic ('' = any), id prefix ('' = any), limit (matches), budget (entries examined)
-- Order is (score, member) ascending, or its reverse. The cursor is the last entry the
-- caller has seen; the page starts right after it, found with ZRANK when the member is
-- still in this index at that score, else by ZCOUNT and a skip over equal scores.
-- Returns {{member, score, ...} of matches, examined, stop score or false, stop member
--          (false when the index was read to its end), size of the index}, and a sixth
-- value, the key's type, when the index is not a sorted set (then nothing was read:
-- this script only reads, so it leaves the key for the writers' `expect` to set aside).
local key, order = KEYS[1], ARGV[1]
local cursor_score, cursor_member = ARGV[2], ARGV[3]
local topic, prefix = ARGV[4], ARGV[5]
local limit, budget = tonumber(ARGV[6]), tonumber(ARGV[7])
local desc = order == 'desc'
local kind = key_type(key)
if kind ~= 'zset' and kind ~= 'none' then return {{}, 0, false, false, 0, kind} end
local range = desc and 'ZREVRANGE' or 'ZRANGE'

local start, skip_ties = 0, false
if cursor_score ~= '' then
  local score = redis.call('ZSCORE', key, cursor_member)
  if score and tonumber(score) == tonumber(cursor_score) then
    start = redis.call(desc and 'ZREVRANK' or 'ZRANK', key, cursor_member) + 1
  else
    if desc then
      start = redis.call('ZCOUNT', key, '(' .. cursor_score, '+inf')
    else
      start = redis.call('ZCOUNT', key, '-inf', '(' .. cursor_score)
    end
    skip_ties = true
  end
end

-- A member is topic:id and an id holds no ':', so with a topic the test is a plain prefix
-- compare plus "no ':' after the topic"; a scan stays cheap per entry.
local head = topic ~= '' and (topic .. ':' .. prefix) or nil
local function matches(member)
  if head then
    return string.sub(member, 1, #head) == head and not string.find(member, ':', #topic + 2, true)
  end
  return prefix == '' or string.sub(string.match(member, '[^:]*$'), 1, #prefix) == prefix
end

local found, examined, last_score, last_member = {}, 0, false, false
local target = tonumber(cursor_score)
local size = redis.call('ZCARD', key)
local pos = start  -- index of the next entry not examined
while #found < 2 * limit and examined < budget and pos < size do
  local page = redis.call(range, key, pos, pos + math.min(200, budget - examined) - 1, 'WITHSCORES')
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
redis.register_function{function_name='delayd_bc22a39995baf47d_claim', flags={}, callback=function(keys, argv)
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
-- KEYS: leases, counts, totals, done:failed, quarantine, limited, paused, aside,
--       the run-event windows w:<n>, w:<n+1>, w:m:<m>, w:m:<m+1> (flush_stats), corrupt (set_aside),
--       the ready lists of priority 3, 2, 1 of the kind claimed (ready:3 ... or ready:u3 ...),
--       then on a single Redis the limits' conf (P{limits}:conf) and, for URL tasks, the disabled
--       hosts (P{hosts}:off)
-- ARGV: lease (ms), wake channel, retention (ms), limits prefix (P{limits}:, or '' on Redis Cluster),
--       bucket id, task-key prefix (P{N}:t:), the quotas of priority 3, 2, 1, n
-- Pops as pop_ready below says. Takes an older version left in `taking` (its take.lua) are not this
-- script's: promote puts them back when their hold runs out, and that version's claim starts them.
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
-- the record's `host` (from the spec, for a record written before add wrote the field), looked at only
-- while some host is disabled: otherwise a claim pays one HKEYS of an empty key.
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

-- The origin of a URL task whose record has no `host` (written before add wrote it): from its spec.
local function spec_origin(spec)
  local ok, decoded = pcall(cjson.decode, spec)
  if ok and type(decoded) == 'table' then return origin_of(decoded.url) end
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
  if reason or held_on_purpose or off and off[r[14] or spec_origin(r[2]) or ''] then
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
flush_stats(KEYS[2], KEYS[3], 9, now)
return out

end}
redis.register_function{function_name='delayd_bc22a39995baf47d_delete', flags={'allow-oom'}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
-- delete: soft (status 'deleted', kept for the retention period) or hard (gone).
-- KEYS: task, delayed, leases, done:ok, done:failed, done:deleted, quarantine, counts, paused, recurring,
--       the topic's parked set (paused:<topic>; named here from `paused` when a producer leaves it out),
--       corrupt (where a key of the wrong type is set aside; named the same way when left out)
-- ARGV: member, hard (1/0), retention (ms)
-- A soft delete bumps the claim token, so a run in progress cannot finish it and
-- a stale ready-list entry is skipped. Either leaves no quarantine entry (that is
-- kept only for tasks in done:failed). A task key that is not a hash is removed,
-- and a soft delete leaves a record that says `deleted`. Either ends a recurring task:
-- it leaves the `recurring` index (also when its record is already gone).
-- Returns 0 if there was no such task; 1 if it was deleted while no run of it was claimed (delayed, ready,
-- parked, held or finished): claim.lua pops, checks and leases in one call, so no run of it starts after
-- this; 2 if it was deleted while a run was claimed (in `leases`): that run's handler may be starting or
-- running (its finish is fenced off as above).
local now = now_ms()
local member, hard, retention = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])
local states = {nil, 'waiting', 'running', 'ok', 'failed', 'deleted'}
local parked = KEYS[11] or parked_key(KEYS[9], topic_of(member))
expect('zset', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6])
expect('hash', KEYS[7])
expect('zset', parked)
redis.call('HDEL', KEYS[7], member)
recurring_index(KEYS[10]).remove(member)
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local old = read_record(KEYS[1], 'queued', 'priority', 'claim', 'created', 'status', 'host')
if not old then
  redis.call('DEL', KEYS[1])
  old = {}
end
local topic = topic_of(member)
if old[1] == '1' then count_ready(old[2], topic, -1) end
if PENDING[old[5]] then count_host(old[6], -1) end  -- a URL task no longer waits for its host
local claimed = zrem_counted(KEYS[3], member, 'running', topic)  -- a run of it was claimed (leased)
for _, k in ipairs({2, 4, 5, 6}) do zrem_counted(KEYS[k], member, states[k], topic) end
zrem_counted(parked, member, 'parked', topic)
if hard then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 'status', 'deleted', 'queued', '0', 'claim', claim_token(old[3], old[4]) + 1)
  index_finished(member, KEYS[6], now, KEYS[1], retention, 'deleted', topic)
end
flush_counts(KEYS[8])
return claimed and 2 or 1

end}
redis.register_function{function_name='delayd_bc22a39995baf47d_finish', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
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
flush_stats(KEYS[6], KEYS[7], 9, now)
return applied

end}
redis.register_function{function_name='delayd_bc22a39995baf47d_host_switch', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- host_switch: disable or enable URL hosts (delayd hosts disable|enable), counting the event.
-- KEYS: off (hash origin -> when disabled, ms), events (hash disabled|enabled -> times), corrupt
--       (set_aside), then to enable
--       each origin's health hash (`P{hosts}:h:<origin>`)
-- ARGV: 'disable' or 'enable', then the origins (scheme://host:port)
-- Disabling flags the origins: from then on claim.lua sets their due URL tasks aside (runs in flight
-- finish). Enabling unflags them, and forgets since when they had been failing (`P{hosts}:h:<origin>`),
-- so that url_disable_after counts afresh; Store.enable_steps then resumes the topics holding tasks set aside.
-- An origin already in the asked state is left as it is and not counted. O(origins).
-- Returns how many origins changed.
local action = ARGV[1]
expect('hash', KEYS[1], KEYS[2])
local changed = 0
for i = 2, #ARGV do
  if action == 'disable' then
    changed = changed + redis.call('HSETNX', KEYS[1], ARGV[i], now_ms())
  else
    changed = changed + redis.call('HDEL', KEYS[1], ARGV[i])
    redis.pcall('HDEL', KEYS[i + 2], 'failing_since')
  end
end
if changed > 0 then redis.call('HINCRBY', KEYS[2], action .. 'd', changed) end
return changed

end}
redis.register_function{function_name='delayd_bc22a39995baf47d_hosts', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- hosts: fold one queue process's delivery tallies into the health of each URL host (delayd hosts).
-- KEYS: seen (zset: origin -> last report, ms), off, events, corrupt (set_aside), then one hash per host,
--       `P{hosts}:h:<origin>`
-- ARGV: per host 5 values: deliveries, failures, last outcome ('ok' or 'fail'), last error
--       ('' when none failed), ms the host's circuit stays open from now (0: closed); then the ms of
--       continuous failure after which a host is disabled (url_disable_after; 0: never)
-- A host's hash: `m<minute % 60>` = '<minute>,<deliveries>,<failures>' (a ring: the last hour,
-- minute by minute), `error` and `error_at` (the last failure), `ok_at` (the last success),
-- `failing_since` (the first failure after the last success; removed by a success), `open_until`.
-- A host whose `failing_since` is that long ago is disabled as host_switch.lua disables it (`P{hosts}:off`,
-- the event counted in `P{hosts}:events`).
-- Bounded: a hash expires a day after its last report, and the index forgets hosts not reported
-- for a day (at most 100 per call). Times are Redis's clock.
local now = now_ms()
local DAY = 86400000
local seen, off, events = KEYS[1], KEYS[2], KEYS[3]
local host_prefix = string.sub(seen, 1, -5) .. 'h:'  -- `P{hosts}:h:` of `P{hosts}:seen`
local disable_after = tonumber(ARGV[(#KEYS - 4) * 5 + 1]) or 0
local minute = math.floor(now / 60000)
local slot = 'm' .. (minute % 60)
for i = 5, #KEYS do
  local key, j = KEYS[i], (i - 5) * 5
  local deliveries, failures = tonumber(ARGV[j + 1]) or 0, tonumber(ARGV[j + 2]) or 0
  local last, err, open_ms = ARGV[j + 3], ARGV[j + 4], tonumber(ARGV[j + 5]) or 0
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
redis.register_function{function_name='delayd_bc22a39995baf47d_limit', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- limit: set or clear one topic's limit (docs/redis-layout.md, "Limits"). A single Redis only:
-- the buckets holding the topic's tasks are told, in their own slots.
-- KEYS: conf, tat:<topic>, run:<topic>, where:<topic>, corrupt (set_aside; all under P{limits}:),
--       every bucket's limited
-- ARGV: topic, the limit as 'N PERIOD_MS K' (N starts per PERIOD_MS, 0 = no rate; K runs in
--       flight, 0 = no cap) or '' to clear it, the limits prefix P{limits}:
-- A new limit holds from the next claim (runs already in flight are not counted against it); the
-- buckets holding tasks of the topic look at them again at once, so a higher limit lets more start
-- and a cleared one releases them all, in due order. Clearing forgets the rate state and the runs
-- in flight. Returns 1 if the topic had a limit, else 0.
local now = now_ms()
local topic, value, lp = ARGV[1], ARGV[2], ARGV[3]
expect('hash', KEYS[1])
local had = redis.call('HEXISTS', KEYS[1], topic)
if value == '' then
  redis.call('HDEL', KEYS[1], topic)
  redis.call('DEL', KEYS[2], KEYS[3])
else
  redis.call('HSET', KEYS[1], topic, value)
end
wake_held(lp, topic, now)
return had

end}
redis.register_function{function_name='delayd_bc22a39995baf47d_park', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
-- park: set aside the tasks of a paused topic that were in one ready list when it was paused,
-- a bounded chunk per call (Client.pause walks each ready list of each bucket after pause.lua).
-- KEYS: paused, ready list, counts, the topic's parked set (paused:<topic>), corrupt (set_aside), then
--       the records (`<task-key prefix><member>`) of the members the previous call returned
-- ARGV: task-key prefix, topic, the pause's generation, position (entries counted from the
--       list's tail that earlier calls looked at; -1: none left to look at), chunk
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
-- Returns {parked, next position (-1 at the head), the topic's members looked at}, or {0, -2}
-- when the bucket no longer holds this pause or a later one (a resume that began after it has
-- resumed the topic here).
local prefix, topic, generation = ARGV[1], ARGV[2], tonumber(ARGV[3])
local position, chunk = tonumber(ARGV[4]), tonumber(ARGV[5])
local parked = KEYS[4]
expect('hash', KEYS[1])
local held = pause_generation(redis.call('HGET', KEYS[1], topic))
if not held or held < generation then return {0, -2} end
expect('list', KEYS[2])
expect('zset', parked)
local now = now_ms()
local moved = 0
for i = 6, #KEYS do
  local task_key = KEYS[i]
  local member = string.sub(task_key, #prefix + 1)
  if string.sub(task_key, 1, #prefix) == prefix and topic_of(member) == topic then
    local r = read_record(task_key, 'queued', 'due', 'priority')
    if r and r[1] == '1' then
      redis.call('HSET', task_key, 'queued', '0')
      mark_parked(task_key, now)
      count_ready(r[3], topic, -1)
      zadd_counted(parked, int_of(r[2]) or now, member, 'parked', topic)
      moved = moved + 1
    end
  end
end
flush_counts(KEYS[3])
if position < 0 then return {moved, -1} end
local entries = redis.call('LRANGE', KEYS[2], -(position + chunk), -(position + 1))
local reply = {moved, #entries < chunk and -1 or position + chunk}
for _, member in ipairs(entries) do
  if topic_of(member) == topic then reply[#reply + 1] = member end
end
return reply

end}
redis.register_function{function_name='delayd_bc22a39995baf47d_pause', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- pause: flag one topic as paused in one bucket (Client.pause runs it on every bucket, then
-- park.lua on their ready lists).
-- KEYS: paused, corrupt (set_aside)
-- ARGV: topic, generation ('' on the first bucket: it is taken there)
-- Promote reads the flag: from now on the topic's due tasks (and lapsed leases) are parked in
-- `paused:<topic>` instead of made ready. The flag's value is the pause's generation: Redis's
-- clock in µs when the pause reached its first bucket, and later than the generation held there
-- before, so a pause's generation is later than that of every resume that began before it
-- (resume.lua takes its own on the same bucket). A resume acts only on pauses of earlier
-- generations: a pause wins, on every bucket, over a resume that began before it. A bucket keeps
-- the latest generation it is given. O(1). Returns the generation.
local topic = ARGV[1]
expect('hash', KEYS[1])
local held = pause_generation(redis.call('HGET', KEYS[1], topic))
local generation = int_of(ARGV[2]) or math.max(now_us(), (held or 0) + 1)
if not held or held < generation then
  redis.call('HSET', KEYS[1], topic, string.format('%d', generation))
end
return generation

end}
redis.register_function{function_name='delayd_bc22a39995baf47d_promote', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
-- promote: the bucket's tick. Moves due tasks to the ready lists, puts tasks whose
-- lease lapsed back at the front of them, and trims finished-task indexes.
-- KEYS: delayed, leases, ready:3, ready:2, ready:1, done:ok, done:failed,
--       done:deleted, quarantine, counts, totals, paused, ready:u3, ready:u2, ready:u1, limited,
--       the run-event windows w:<n>, w:<n+1>, w:m:<m>, w:m:<m+1> (flush_stats), corrupt (set_aside), taking,
--       then the learned keys (below)
-- ARGV: task-key prefix, batch limit, retention (ms), ready channel, bucket id,
--       limits prefix (P{limits}:, or '' on Redis Cluster)
-- Tasks held back by a limit (claim.lua) are released when the topic's time in `limited` comes:
-- as many as the limit lets start now, earliest due first, to the front of their ready lists
-- (all of them, a batch at a time, when the topic has no limit any more), their starts and slots
-- taken for them (so that buckets releasing at the same time never release more than the limit).
-- A lapsed lease of a limited topic frees its slot (free_slots).
-- A member whose record is missing or corrupt (not a hash, a status or priority it
-- cannot have there) is quarantined: set aside as a failed task with the reason.
-- Learned keys: the script touches no key its call did not declare. The keys it can only know from
-- what it reads (the records of due and lapsed members, a paused topic's parked set, a limited topic's
-- held set, the limits' keys) are checked with use(); where one is missing the work stops there (due
-- order kept: nothing after it is done this call), the keys go in the reply, and `full` is set, so the
-- caller calls again at once declaring them. The reply also names the keys the next call will probably
-- need (the records of the members due soonest and of leases about to lapse, and the parked sets of
-- those members' topics that are paused), which the caller declares then: in the common case no call is cut.
-- Returns {moved, reaped, next due (ms or -1), next lease expiry or `taking` deadline (ms or -1),
--          Redis's clock (µs), 1 if a batch was full or cut (call again at once) else 0,
--          then the keys to declare on the next call}
--          (next due: the earlier of the head of `delayed` and of `limited`)
local clock = now_us()
local now = math.floor(clock / 1000)
local prefix, limit, retention = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
-- The batch limit as text once: a Lua number given to redis.call is formatted per argument (%.17g).
local limit_text = string.format('%d', limit)
local ready = {['3'] = KEYS[3], ['2'] = KEYS[4], ['1'] = KEYS[5]}
local ready_url = {['3'] = KEYS[13], ['2'] = KEYS[14], ['1'] = KEYS[15]}
-- Due tasks pushed per ready list (in due order), and the kinds of list that got
-- some, which the ready messages name ('' call/push, 'u' URL).
local pushes, kinds = {}, {}

-- A member made ready in a list of kind `kind`: the kind's ready message goes out.
local function announce(kind)
  kinds[kind] = true
end

-- The keys the call may touch (KEYS, made a set at the first question: an idle tick asks none), and
-- those to name in the reply: `asked` in order, once each.
local declared, asked, named = nil, {}, {}
local function is_declared(key)
  if not declared then
    declared = {}
    for _, k in ipairs(KEYS) do declared[k] = true end
  end
  return declared[key]
end
local function ask(key)
  if not named[key] then
    named[key] = true
    asked[#asked + 1] = key
  end
end
-- Whether the call may touch `key`; if not, it is asked for.
local function use(key)
  if is_declared(key) then return true end
  ask(key)
  return false
end
-- Whether the call may touch all of `keys`; if not, all of them are asked for (the next call needs
-- the whole set).
local function use_all(keys)
  local all = true
  for _, key in ipairs(keys) do all = is_declared(key) and all end
  if not all then for _, key in ipairs(keys) do ask(key) end end
  return all
end
local lp = ARGV[6]
-- The limits' keys a topic's release or freed slot touches (single Redis only: `lp` is '' on Cluster).
local function limit_keys(topic, keys)
  if lp ~= '' then
    for _, kind in ipairs({'tat:', 'run:', 'where:'}) do keys[#keys + 1] = lp .. kind .. topic end
    keys[#keys + 1] = lp .. 'conf'
    keys[#keys + 1] = lp .. 'corrupt'
  end
  return keys
end
local cut = false  -- work left undone for want of keys: call again at once

-- The ready list of a task (by its `url` flag and priority: see is_url in _lib), and its kind.
-- A record without the flag goes to the call lists (a URL task written before the flag
-- existed is still delivered on the event loop: the queue process routes by the target).
local function list_of(url, priority)
  if url == '1' then return ready_url[priority], 'u' end
  return ready[priority], ''
end
local aside = {failed = KEYS[7], quarantine = KEYS[9], now = now, retention = retention}

-- Why the record `r` (status, priority) of a member of `index` cannot be used, or nil.
local function defect(r, task_key, index, status)
  if not r then return 'record is a ' .. key_type(task_key) .. ', not a hash' end
  if not r[1] then return index .. ' entry without a record' end
  if r[1] ~= status then return index .. ' entry with status ' .. string.sub(r[1], 1, 40) end
  if not ready[r[2] or DEFAULT_PRIORITY] then return 'record with a bad priority' end
end

-- Paused topics: the `paused` hash is never read whole (a call costs the same whatever the number of
-- topics paused: issue 41); each topic of a member this call handles is looked up once (HGET).
-- A topic being resumed ('r', see resume.lua) parks only what is due after its earliest task still
-- parked, so that the batches of a resume keep due order. A flagged topic whose parked set this call
-- may not touch is not `known`: its tasks are not moved this call (the set is asked for).
local pauses = {}  -- topic -> false (nothing parks), or {key = its parked set, known, after}
local none_paused = nil  -- whether the `paused` hash is empty (usually: then no topic is looked up)
local function pause_of(topic)
  local p = pauses[topic]
  if p ~= nil then return p end
  if none_paused == nil then none_paused = on('hash', 'HLEN', KEYS[12]) == 0 end
  p = false
  local flag = not none_paused and on('hash', 'HGET', KEYS[12], topic)
  if flag then
    local key = parked_key(KEYS[12], topic)
    p = {key = key, known = is_declared(key), after = -math.huge}
    if p.known then
      expect('zset', key)
      if flag == 'r' then
        p.after = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2])
        if not p.after then p = false end
      end
    end
  end
  pauses[topic] = p
  return p
end
-- Whether the call may handle tasks of `topic` (not paused, or its parked set declared); if not, the
-- parked set is asked for.
local function pause_known(topic)
  local p = pause_of(topic)
  return not p or use(p.key)
end
-- The parked set of `topic` when it is paused (for the reply: the next call will probably need it).
local function ask_parked(topic)
  local p = pause_of(topic)
  if p then ask(p.key) end
end

-- Whether the call may move `member` (its record declared, its topic's pause known); if not, it is cut
-- there and the record asked for.
local function movable(member, task_key)
  local known = pause_known(topic_of(member))
  if use(task_key) and known then return true end
  cut = true
  return false
end

-- Whether a task of `topic` due at `score` waits in its topic's parked set.
local function parks(topic, score)
  local p = pause_of(topic)
  return p and score > p.after
end

-- Members of a zset at scores no script writes (past 2^53 ms: inf, 1e300): such an entry
-- would never come due, lapse or expire, and would be counted as waiting forever.
local function timeless(key)
  return on('zset', 'ZRANGEBYSCORE', key, '(9007199254740992', '+inf', 'WITHSCORES', 'LIMIT', '0', limit_text)
end

-- Due tasks go to the back of their kind's and priority's ready list, in due order:
-- one RPUSH per list for the whole batch. A due task of a paused topic is parked
-- instead (with its due time), so it leaves the head of `delayed`.
local moved = 0
local found, scores = {}, {}
local pairs_ = on('zset', 'ZRANGEBYSCORE', KEYS[1], '-inf', now + DUE_SKEW, 'WITHSCORES', 'LIMIT', '0', limit_text)
for i = 1, #pairs_, 2 do
  found[#found + 1] = pairs_[i]
  scores[pairs_[i]] = pairs_[i + 1]
end
-- In due order, up to the first member the call may not move (it and the rest are asked for).
local due = {}
for _, member in ipairs(found) do
  if cut or not movable(member, prefix .. member) then
    ask(prefix .. member)
  else
    due[#due + 1] = member
  end
end
for _, member in ipairs(due) do
  local task_key = prefix .. member
  local r = read_record(task_key, 'status', 'priority', 'url', 'parked')
  local topic = topic_of(member)
  count('waiting', topic, -1)
  local reason = defect(r, task_key, 'delayed', 'delayed')
  if reason then
    quarantine(aside, task_key, member, reason)
  elseif parks(topic, tonumber(scores[member]) or now) then
    mark_parked(task_key, now)
    zadd_counted(pause_of(topic).key, scores[member], member, 'parked', topic)
  else
    local priority = r[2] or DEFAULT_PRIORITY
    if r[4] then
      redis.call('HSET', task_key, 'queued', '1', 'unparked', now)  -- set aside until now (mark_parked)
    else
      redis.call('HSET', task_key, 'queued', '1')
    end
    local list, kind = list_of(r[3], priority)
    local batch = pushes[list] or {}
    pushes[list] = batch
    batch[#batch + 1] = member
    announce(kind)
    count_ready(priority, topic, 1)
    moved = moved + 1
  end
end
for _, list in ipairs({KEYS[3], KEYS[4], KEYS[5], KEYS[13], KEYS[14], KEYS[15]}) do
  if pushes[list] then on('list', 'RPUSH', list, unpack(pushes[list])) end
end

-- Held tasks whose limit may let them start: the earliest the limit lets through go to the front
-- of their ready lists (LPUSH of the batch in reverse: the earliest first), marked `released`.
-- A held entry whose record is no longer that held task (deleted, replaced, run meanwhile) is
-- dropped. An entry for a topic that holds nothing here any more leaves `limited` and `where`.
-- A topic whose held set or limits' keys the call may not touch waits for the next call; so do the
-- held members from the first whose record it may not touch (with the topic's keys asked for again).
local limited = on('zset', 'ZRANGEBYSCORE', KEYS[16], '-inf', now, 'LIMIT', '0', limit_text)
local limits = nil
local fronts, full_held = {}, false
local function release(topic, held, topic_keys)
  limits = limits or limits_of(lp) or {}
  expect('zset', held)
  local l = limits[topic]
  local g = l and gate(lp, topic, l, clock)
  local room = math.min(limit, g and gate_room(g) or limit)
  local stale, stopped = false, false
  if room > 0 then
    local members = redis.call('ZRANGE', held, 0, room - 1, 'WITHSCORES')
    for i = 1, #members, 2 do
      local member = members[i]
      local task_key = prefix .. member
      local r = nil
      if stopped then
        ask(task_key)
      elseif not use(task_key) then
        stopped = true
      else
        r = read_record(task_key, 'status', 'queued', 'held', 'priority', 'url')
        zrem_counted(held, member, 'throttled', topic)
        if not (r and r[1] == 'delayed' and r[2] ~= '1' and r[3]) then
          stale = true
        elseif parks(topic, tonumber(members[i + 1]) or now) then
          redis.call('HDEL', task_key, 'held')
          mark_parked(task_key, now)
          zadd_counted(pause_of(topic).key, members[i + 1], member, 'parked', topic)
        elseif not ready[r[4] or DEFAULT_PRIORITY] then
          quarantine(aside, task_key, member, 'record with a bad priority')
        else
          redis.call('HSET', task_key, 'queued', '1', 'released', now)
          local list, kind = list_of(r[5], r[4] or DEFAULT_PRIORITY)
          fronts[list] = fronts[list] or {}
          table.insert(fronts[list], 1, member)
          announce(kind)
          count_ready(r[4], topic, 1)
          moved = moved + 1
          if g then gate_take(g, member, now + LIMIT_RESERVE_MS) end
        end
      end
    end
  end
  if stopped then
    cut = true
    for _, key in ipairs(topic_keys) do ask(key) end
  end
  if g then gate_close(g) end
  local left = redis.call('ZCARD', held)
  if left == 0 then
    redis.call('ZREM', KEYS[16], topic)
    if lp ~= '' then redis.pcall('SREM', lp .. 'where:' .. topic, ARGV[5]) end
  elseif not g or stale or stopped then
    redis.call('ZADD', KEYS[16], now, topic)  -- no limit any more, stale entries, cut: again at once
    full_held = full_held or not g
  else
    redis.call('ZADD', KEYS[16], gate_next(g, left), topic)
  end
end
for _, topic in ipairs(limited) do
  local held = held_key(KEYS[16], topic)
  local topic_keys = limit_keys(topic, {held})
  local p = pause_of(topic)
  if p then topic_keys[#topic_keys + 1] = p.key end
  if not use_all(topic_keys) then
    cut = true
  else
    release(topic, held, topic_keys)
  end
end
for list, members in pairs(fronts) do on('list', 'LPUSH', list, unpack(members)) end
if #due > 0 then redis.call('ZREM', KEYS[1], unpack(due)) end
local never = timeless(KEYS[1])
for i = 1, #never, 2 do
  if use(prefix .. never[i]) then
    count('waiting', topic_of(never[i]), -1)
    quarantine(aside, prefix .. never[i], never[i], 'delayed entry due at ' .. never[i + 1] .. ' ms: never due')
    redis.call('ZREM', KEYS[1], never[i])
  else
    cut = true
  end
end

-- Lapsed leases: the worker died, hung or lost Redis. Fence it off (claim + 1)
-- and run the task again soon, keeping its run number (same idempotency key).
-- A lease of a task that finished meanwhile is simply dropped.
local finished = {ok = true, failed = true, deleted = true}
local reaped = 0
local freed = nil  -- lapsed runs of topics with a concurrency limit: topic -> members
local expired = on('zset', 'ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', '0', limit_text)
local endless = timeless(KEYS[2])  -- a lease that would never lapse: as lapsed now
for i = 1, #endless, 2 do expired[#expired + 1] = endless[i] end
-- In expiry order, up to the first the call may not handle (with, on a single Redis, its topic's limits'
-- keys, for the slot it frees).
local lapsed, stop = {}, false
local backs = {}  -- ready list -> its lapsed members, the last lapsed first
for _, member in ipairs(expired) do
  local task_key = prefix .. member
  if stop or not (movable(member, task_key) and use_all(limit_keys(topic_of(member), {}))) then
    stop, cut = true, true
    ask(task_key)
  else
    lapsed[#lapsed + 1] = member
  end
end
for _, member in ipairs(lapsed) do
  local task_key = prefix .. member
  local r = read_record(task_key, 'status', 'priority', 'claim', 'created', 'due', 'url')
  local topic = topic_of(member)
  count('running', topic, -1)
  if lp ~= '' and r then  -- (the lapsed run's token is the record's; without a record its slot lapses alone)
    freed = freed or {}
    freed[topic] = freed[topic] or {}
    table.insert(freed[topic], run_id(member, claim_token(r[3], r[4])))
  end
  if not (r and finished[r[1]]) then
    local reason = defect(r, task_key, 'leased', 'running')
    local token = r and claim_token(r[3], r[4]) + 1
    if reason then
      quarantine(aside, task_key, member, reason)
    elseif parks(topic, int_of(r[5]) or now) then
      -- Its topic is paused: it waits, parked at its due time, to run again on resume.
      redis.call('HSET', task_key, 'status', 'delayed', 'queued', '0', 'lapsed', '1', 'claim', token)
      mark_parked(task_key, now)
      zadd_counted(pause_of(topic).key, int_of(r[5]) or now, member, 'parked', topic)
      tally('lapsed', topic)
    else
      redis.call('HSET', task_key, 'status', 'delayed', 'queued', '1', 'lapsed', '1', 'claim', token)
      local list, kind = list_of(r[6], r[2] or DEFAULT_PRIORITY)
      announce(kind)
      backs[list] = backs[list] or {}
      table.insert(backs[list], 1, member)
      count_ready(r[2], topic, 1)
      tally('lapsed', topic)
      reaped = reaped + 1
    end
  end
end
-- To the front of their lists in expiry order, the first lapsed first (one LPUSH of each list's in reverse).
for list, members in pairs(backs) do on('list', 'LPUSH', list, unpack(members)) end
if #lapsed > 0 then redis.call('ZREM', KEYS[2], unpack(lapsed)) end
if freed then
  local set = limits_of(lp)
  for topic in pairs(freed) do
    if not (set and set[topic] and set[topic].slots > 0) then freed[topic] = nil end
  end
  is_declared(KEYS[1])
  free_slots(lp, freed, now, declared)  -- (other buckets' `limited` only if declared: docs/redis-layout.md)
end

-- Finished-task indexes keep only what is inside the retention period (the
-- records themselves expire on their own with PEXPIRE). The quarantine hash
-- keeps a reason for as long as its task is in done:failed.
local states = {nil, nil, nil, nil, nil, 'ok', 'failed', 'deleted'}
for k = 6, 8 do
  local old = on('zset', 'ZRANGEBYSCORE', KEYS[k], '-inf', now - retention, 'LIMIT', '0', limit_text)
  local kept = timeless(KEYS[k])  -- finished at a time that never comes: past retention too
  for i = 1, #kept, 2 do old[#old + 1] = kept[i] end
  if #old > 0 then
    redis.call('ZREM', KEYS[k], unpack(old))
    if k == 7 then on('hash', 'HDEL', KEYS[9], unpack(old)) end
    for _, member in ipairs(old) do count(states[k], topic_of(member), -1) end
  end
end
flush_stats(KEYS[10], KEYS[11], 17, now)

-- Takes an earlier version's queue process never claimed (it died or hung between its take and its
-- claim): back to the front of their lists (_take.lua).
local lists = {['3'] = KEYS[3], ['2'] = KEYS[4], ['1'] = KEYS[5], u3 = KEYS[13], u2 = KEYS[14], u1 = KEYS[15]}
local _, lost_left = put_back_lost(KEYS[22], now, limit, lists, function(list)
  announce(string.sub(list, 1, -2))
end)

-- `N` for call/push tasks, `uN` for URL tasks: a queue process claims only the kind announced.
for kind in pairs(kinds) do redis.call('PUBLISH', ARGV[4], kind .. ARGV[5]) end
-- The keys the next call will probably need: the records of the members of `delayed` due within
-- AHEAD_MS of its head or of now, whichever is later (at most a batch: a backlog's next batch), and of
-- leases lapsing within AHEAD_MS of now (with their topics' limits' keys).
local AHEAD_MS = 50
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] then
  local horizon = math.max(now, due_of_score(head[2])) + AHEAD_MS + DUE_SKEW
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', horizon, 'LIMIT', '0', limit_text)) do
    ask(prefix .. member)
    ask_parked(topic_of(member))
  end
end
local lease = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if lease[2] and tonumber(lease[2]) <= now + AHEAD_MS then
  local lapsing = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now + AHEAD_MS, 'LIMIT', '0', limit_text)
  for _, member in ipairs(lapsing) do
    ask(prefix .. member)
    ask_parked(topic_of(member))
    for _, key in ipairs(limit_keys(topic_of(member), {})) do ask(key) end
  end
end
local next_held = redis.call('ZRANGE', KEYS[16], 0, 0, 'WITHSCORES')
local next_due = head[2] and due_of_score(head[2]) or -1
if next_held[2] and (next_due < 0 or tonumber(next_held[2]) < next_due) then next_due = tonumber(next_held[2]) end
local taking = redis.call('ZRANGE', KEYS[22], 0, 0, 'WITHSCORES')
local next_lease = tonumber(lease[2] or -1)
if taking[2] and (next_lease < 0 or tonumber(taking[2]) < next_lease) then
  next_lease = math.ceil(tonumber(taking[2]))
end
local full = 0
if #found == limit or #expired == limit or full_held or cut or lost_left then full = 1 end
return {moved, reaped, next_due, next_lease, clock, full, unpack(asked)}

end}
redis.register_function{function_name='delayd_bc22a39995baf47d_register', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- register: refresh (or remove) one daemon's entry in the registry of live daemons.
-- KEYS: info (hash: daemon id -> JSON entry), expires (sorted set: daemon id -> expiry ms), corrupt (set_aside)
-- ARGV: daemon id, JSON entry ('' removes the entry: a graceful stop), ttl (ms)
-- Entries whose expiry has passed (a daemon that died without a stop) are dropped
-- on every call, so the registry never grows with dead daemons.
-- Returns the Redis time (ms) of the call.
local now = now_ms()
local id, entry, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
expect('hash', KEYS[1])
expect('zset', KEYS[2])
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, gone in ipairs(dead) do
  redis.call('HDEL', KEYS[1], gone)
  redis.call('ZREM', KEYS[2], gone)
end
if entry == '' then
  redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
else
  redis.call('HSET', KEYS[1], id, entry)
  redis.call('ZADD', KEYS[2], now + ttl, id)
end
return now

end}
redis.register_function{function_name='delayd_bc22a39995baf47d_renew', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- renew: extend the leases of runs still in progress.
-- KEYS: leases, corrupt (set_aside), then each run's record, then on a single Redis the limits' keys of their topics
-- ARGV: lease (ms), limits prefix (P{limits}:, or '' on Redis Cluster),
--       then per run: member, claim token
-- A run of a topic with a concurrency limit holds its slot as long as its lease: renewed with it, and
-- renewed alone while the run goes on fenced off (SPEC 9: its slot is the run's until the run ends).
-- Returns one 1 (renewed) or 0 (lost: the run was fenced off) per run.
local now = now_ms()
local lease, lp = tonumber(ARGV[1]), ARGV[2]
local limits = limits_of(lp)
expect('zset', KEYS[1])
local renewed = {}
for i = 3, #ARGV, 2 do
  local member, claim = ARGV[i], ARGV[i + 1]
  local r = read_record(KEYS[2 + (i - 1) / 2], 'claim', 'status')
  local l = limits and limits[topic_of(member)]
  local slot = l and l.slots > 0 and lp .. 'run:' .. topic_of(member)
  if r and r[1] == claim and r[2] == 'running' and redis.call('ZSCORE', KEYS[1], member) then
    redis.call('ZADD', KEYS[1], 'XX', now + lease, member)
    -- (not XX: a run renewed after its lease expired, before promote reaped it, takes its slot back)
    if slot then redis.pcall('ZADD', slot, now + lease, run_id(member, claim)) end
    renewed[#renewed + 1] = 1
  else
    -- Fenced off (its record deleted or replaced), the run goes on: it keeps the slot it still has.
    if slot then redis.pcall('ZADD', slot, 'XX', now + lease, run_id(member, claim)) end
    renewed[#renewed + 1] = 0
  end
end
return renewed

end}
redis.register_function{function_name='delayd_bc22a39995baf47d_resume', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
-- resume: start the tasks of one topic in one bucket again, a batch at a time.
-- KEYS: paused, delayed, counts, the topic's parked set (paused:<topic>), corrupt (set_aside)
-- ARGV: topic, wake channel, batch size, the resume's generation ('' on its first call, on the
--       first bucket: it is taken there, later than the pause flagged there)
-- Moves the earliest `batch` parked tasks back into `delayed` at their due times, so
-- promote makes them ready in due order, and wakes the bucket. While some stay parked
-- the flag reads 'r' (resuming): promote then makes ready only the topic's due tasks
-- that are not later than the earliest one still parked, and parks the others, so
-- due order holds across batches. The last batch clears the flag.
-- A bucket flagged by a pause of this generation or a later one (a pause that began after this
-- resume: see pause.lua) is left as it is, and the call says so: the pause wins.
-- Returns {moved, still parked, the resume's generation, 1 if a later pause holds the bucket else 0}.
local topic, channel, batch_size = ARGV[1], ARGV[2], tonumber(ARGV[3])
local parked = KEYS[4]
expect('hash', KEYS[1])
expect('zset', KEYS[2], parked)
local held = pause_generation(redis.call('HGET', KEYS[1], topic))
local generation = int_of(ARGV[4]) or math.max(now_us(), (held or 0) + 1)
if held and held >= generation then
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
  count('waiting', topic, redis.call('ZADD', KEYS[2], unpack(args)))
  count('parked', topic, -redis.call('ZREMRANGEBYRANK', parked, 0, moved - 1))
  redis.call('PUBLISH', channel, batch[2])
end
local left = redis.call('ZCARD', parked)
if left == 0 then
  redis.call('HDEL', KEYS[1], topic)
else
  redis.call('HSET', KEYS[1], topic, 'r')
end
flush_counts(KEYS[3])
return {moved, left, generation, 0}

end}
redis.register_function{function_name='delayd_bc22a39995baf47d_retry', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
-- retry: put a finished task back to run now (one more run by its schedule): a failed one (retry), or
-- a failed or ok one finished inside a time span (replay: the same task, so the same webhook-id).
-- KEYS: task, delayed, done:<status>, counts, quarantine, corrupt (set_aside), recurring
-- ARGV: member, wake channel, status ('failed' when left out; or 'ok'), and for a replay the span
--       (ms) its finish time (its score in done:<status>) must be in: from, to
-- A recurring task (every, cron) recurs again: back in the `recurring` index its last run took it out of.
-- Returns 1 if the task was of that status (and finished in the span) and is now delayed, 0 if
-- missing (or its key is not a hash), -1 if not.
local now = now_ms()
local member, status = ARGV[1], ARGV[3] or 'failed'
expect('zset', KEYS[2], KEYS[3])
expect('hash', KEYS[5])
local r = read_record(KEYS[1], 'status', 'host', 'priority', 'spec')
if not (r and r[1]) then return 0 end
if r[1] ~= status then return -1 end
if ARGV[4] then
  local finished = tonumber(redis.call('ZSCORE', KEYS[3], member))
  if not (finished and finished >= tonumber(ARGV[4]) and finished <= tonumber(ARGV[5])) then return -1 end
end
redis.call('HSET', KEYS[1], 'status', 'delayed', 'due', now)
redis.call('PERSIST', KEYS[1])
redis.call('HDEL', KEYS[5], member)  -- no longer in done:failed
local topic = topic_of(member)
zrem_counted(KEYS[3], member, status, topic)
zadd_counted(KEYS[2], due_score(now, r[3]), member, 'waiting', topic)
count_host(r[2], 1)  -- a URL task waits for its host again
local ok, spec = pcall(cjson.decode, r[4] or '')
local null = cjson.null  -- a null every/cron is no schedule (docs/protocol.md section 7)
if ok and type(spec) == 'table' and ((spec.every or null) ~= null or (spec.cron or null) ~= null) then
  recurring_index(KEYS[7]).add(member)
end
wake_if_head(KEYS[2], member, ARGV[2], now)
flush_counts(KEYS[4])
return 1

end}
redis.register_function{function_name='delayd_bc22a39995baf47d_run_now', flags={}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
counts, runs = {}, {}
-- run_now: make a waiting task due now (a recurring one then continues on its schedule).
-- KEYS: task, delayed, paused, counts, the topic's parked set (paused:<topic>), corrupt (set_aside)
-- ARGV: member, wake channel
-- Returns {code, status}: 1 due now; 2 due now but its topic is paused (it runs first
-- on resume); 3 already due (in a ready list, waiting for a worker: nothing changed);
-- 0 no such task; -1 not delayed (running or finished: nothing changed).
local now = now_ms()
local member, channel = ARGV[1], ARGV[2]
local r = read_record(KEYS[1], 'status', 'queued', 'priority')
if not (r and r[1]) then return {0, ''} end
if r[1] ~= 'delayed' then return {-1, r[1]} end
if r[2] == '1' then return {3, r[1]} end
local topic = topic_of(member)
local parked = KEYS[5]
expect('zset', KEYS[2], parked)
redis.call('HSET', KEYS[1], 'due', now)
if redis.call('ZSCORE', parked, member) then
  redis.call('ZADD', parked, now, member)
  return {2, r[1]}
end
zadd_counted(KEYS[2], due_score(now, r[3]), member, 'waiting', topic)
wake_if_head(KEYS[2], member, channel, now)
flush_counts(KEYS[4])
return {1, r[1]}

end}
redis.register_function{function_name='delayd_bc22a39995baf47d_stats', flags={'no-writes'}, callback=function(keys, argv)
KEYS, ARGV = keys, argv
local KEYS, ARGV = keys, argv
-- stats: read one bucket's statistics (changes nothing): the part whose cost does not grow with the
-- number of topics. The per-topic hashes (counts, totals, the windows, paused) are read by the caller a
-- page at a time (HSCAN), so that no call blocks Redis in proportion to the topics (issue 41).
-- KEYS: delayed, quarantine, then the run-event windows w:<n-k+1> ... w:<n+1> (only their names are read)
--       (the k windows the caller expects to be the last, and the next one: delayd.store.windows),
--       then the records (`<task-key prefix><member>`) of the members the caller found at the heads
--       of the bucket's ready lists (a peek first: a script reads only the records its call declares)
-- ARGV: task-key prefix, number of windows k, scan limit, 1 if a ready list held more entries than
--       the peek looked at else 0
-- Returns {now, first window number (the caller reads windows first ... first + k - 1), due time of
--          the delayed head (or false), quarantined, {topic, earliest due, ...} of tasks due but not
--          started, 1 if a scan hit the limit (the per-topic due times may then be late ones) else 0}
-- It writes nothing, not even to set a corrupt key aside: a key of the wrong type
-- reads as empty, an unreadable due time is not seen.
local now = now_ms()
local prefix = ARGV[1]

-- The reply of a read, or `default` when it fails on stored data (WRONGTYPE).
local function read(default, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply['err'] then return default end
  return reply
end
local windows, limit, truncated = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local WINDOW_KEYS, RECORD_KEYS = 3, 3 + windows + 1  -- where the windows and the records start in KEYS

-- The last `windows` windows of Redis's clock, among the declared ones; if the caller's clock was
-- off by more than half a window, the declared ones nearest to them (the reply's `first` says which).
local declared = tonumber(string.match(KEYS[WINDOW_KEYS], '(%d+)$'))
local first = math.min(math.max(math.floor(now / WINDOW_MS) - windows + 1, declared), declared + 1)

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
local overdue = read({}, 'ZRANGEBYSCORE', KEYS[1], '-inf', now + DUE_SKEW, 'WITHSCORES', 'LIMIT', 0, limit)
for i = 1, #overdue, 2 do seen(overdue[i], tonumber(due_time(overdue[i + 1]))) end
if #overdue == 2 * limit then truncated = 1 end
for i = RECORD_KEYS, #KEYS do
  local r = read({}, 'HMGET', KEYS[i], 'queued', 'due')
  if r[1] == '1' and r[2] then seen(string.sub(KEYS[i], #prefix + 1), int_of(r[2])) end
end
local lag = {}
for topic, due in pairs(earliest) do
  lag[#lag + 1] = topic
  lag[#lag + 1] = due
end

local head = read({}, 'ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {now, first, head[2] and due_time(head[2]) or false, read(0, 'HLEN', KEYS[2]), lag, truncated}

end}
