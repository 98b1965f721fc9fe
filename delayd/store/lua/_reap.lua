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
