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
