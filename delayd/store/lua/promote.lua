-- promote: the bucket's tick. Moves due tasks to the ready lists, puts tasks whose
-- lease lapsed back at the front of them, and trims finished-task indexes.
-- KEYS: delayed, leases, ready:3, ready:2, ready:1, done:ok, done:failed,
--       done:deleted, quarantine, counts, totals, paused, ready:u3, ready:u2, ready:u1, limited,
--       the run-event windows w:<n>, w:<n+1>, w:m:<m>, w:m:<m+1> (flush_stats), corrupt (set_aside),
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
-- Returns {moved, reaped, next due (ms or -1), next lease expiry (ms or -1),
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
local next_lease = tonumber(lease[2] or -1)
local full = 0
if #found == limit or #expired == limit or full_held or cut then full = 1 end
return {moved, reaped, next_due, next_lease, clock, full, unpack(asked)}
