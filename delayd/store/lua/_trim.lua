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
