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
