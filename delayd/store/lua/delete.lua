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
