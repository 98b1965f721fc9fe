-- delete: soft (status 'deleted', kept for the retention period) or hard (gone).
-- KEYS[1]   task_key        P{N}:t:<member>
-- KEYS[2]   delayed         P{N}:delayed
-- KEYS[3]   leases          P{N}:leases
-- KEYS[4]   done_ok         P{N}:done:ok
-- KEYS[5]   done_failed     P{N}:done:failed
-- KEYS[6]   done_deleted    P{N}:done:deleted
-- KEYS[7]   quarantine_key  P{N}:quarantine
-- KEYS[8]   counts_key      P{N}:counts
-- KEYS[9]   recurring       P{N}:recurring
-- KEYS[10]  parked          P{N}:paused:<topic>   the topic's parked set
-- KEYS[11]  corrupt         P{N}:corrupt          (declared only: set_aside names it)
-- ARGV[1]   member          topic:id
-- ARGV[2]   hard            '1' (every trace removed) or '0' (soft)
-- ARGV[3]   retention       ms
-- Reply: code, 0 if there was no such task; 1 if it was deleted while no run of it was claimed (delayed,
--   ready, parked, held or finished): claim.lua pops, checks and leases in one call, so no run of it starts
--   after this; 2 if it was deleted while a run was claimed (in `leases`): that run's handler may be starting
--   or running (its finish is fenced off as below)
-- A soft delete bumps the claim token, so a run in progress cannot finish it and
-- a stale ready-list entry is skipped. Either leaves no quarantine entry (that is
-- kept only for tasks in done:failed). A task key that is not a hash is removed,
-- and a soft delete leaves a record that says `deleted`. Either ends a recurring task:
-- it leaves the `recurring` index (also when its record is already gone).
local task_key, delayed, leases, done_ok, done_failed = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local done_deleted, quarantine_key, counts_key, recurring, parked = KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
local member, hard, retention = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3])

local now = now_ms()
expect('zset', delayed, leases, done_ok, done_failed, done_deleted, parked)
expect('hash', quarantine_key)
redis.call('HDEL', quarantine_key, member)
recurring_index(recurring).remove(member)
if redis.call('EXISTS', task_key) == 0 then return 0 end
local hash, queued, priority, claim, created, status, host =
  record_fields(task_key, 'queued', 'priority', 'claim', 'created', 'status', 'host')
if not hash then redis.call('DEL', task_key) end  -- read as a record of no fields
local topic = topic_of(member)
if queued == '1' then count_ready(priority, topic, -1) end
if PENDING[status] then count_host(host, -1) end  -- a URL task no longer waits for its host
local claimed = zrem_counted(leases, member, 'running', topic)  -- a run of it was claimed (leased)
zrem_counted(delayed, member, 'waiting', topic)
zrem_counted(done_ok, member, 'ok', topic)
zrem_counted(done_failed, member, 'failed', topic)
zrem_counted(done_deleted, member, 'deleted', topic)
zrem_counted(parked, member, 'parked', topic)
if hard then
  redis.call('DEL', task_key)
else
  redis.call('HSET', task_key, 'status', 'deleted', 'queued', '0', 'claim', claim_token(claim, created) + 1)
  index_finished(member, done_deleted, now, task_key, retention, 'deleted', topic)
end
flush_counts(counts_key)
return claimed and 2 or 1
