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
