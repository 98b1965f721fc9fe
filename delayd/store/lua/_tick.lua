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
