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
