-- renew: extend the leases of runs still in progress.
-- KEYS: leases, corrupt (set_aside), then each run's record, then on a single Redis the limits' keys of their topics
-- ARGV: lease (ms), limits prefix (P{limits}:, or '' on Redis Cluster),
--       then per run: member, claim token
-- A run of a topic with a concurrency limit holds its slot as long as its lease: renewed with it, and
-- renewed alone while the run goes on fenced off (SPEC 9: its slot is the run's until the run ends).
-- Returns one 1 (renewed) or 0 (lost: the run was fenced off) per run.
local now = now_ms()
local lease, lp = tonumber(ARGV[1]), ARGV[2]
local limits = limits_of(lp)
expect('zset', KEYS[1])
local renewed = {}
for i = 3, #ARGV, 2 do
  local member, claim = ARGV[i], ARGV[i + 1]
  local r = read_record(KEYS[2 + (i - 1) / 2], 'claim', 'status')
  local l = limits and limits[topic_of(member)]
  local slot = l and l.slots > 0 and lp .. 'run:' .. topic_of(member)
  if r and r[1] == claim and r[2] == 'running' and redis.call('ZSCORE', KEYS[1], member) then
    redis.call('ZADD', KEYS[1], 'XX', now + lease, member)
    -- (not XX: a run renewed after its lease expired, before promote reaped it, takes its slot back)
    if slot then redis.pcall('ZADD', slot, now + lease, run_id(member, claim)) end
    renewed[#renewed + 1] = 1
  else
    -- Fenced off (its record deleted or replaced), the run goes on: it keeps the slot it still has.
    if slot then redis.pcall('ZADD', slot, 'XX', now + lease, run_id(member, claim)) end
    renewed[#renewed + 1] = 0
  end
end
return renewed
