-- renew: extend the leases of runs still in progress.
-- KEYS[1]          leases         P{N}:leases
-- KEYS[2]          corrupt        P{N}:corrupt      (declared only: set_aside names it)
-- KEYS[2 + r]      record         P{N}:t:<member>   run r's record
-- KEYS[3 + runs..] limit_keys     P{limits}:*       on a single Redis, the limits' keys of the runs' topics
-- ARGV[1]          lease_ms       the new lease, from now
-- ARGV[2]          limits_prefix  P{limits}:, or '' on Redis Cluster
-- ARGV[1 + 2r]     member         run r's task
-- ARGV[2 + 2r]     claim          its claim token
-- Reply: {renewed...}, per run 1 (renewed) or 0 (lost: the run was fenced off)
-- A run of a topic with a concurrency limit holds its slot as long as its lease: renewed with it, and
-- renewed alone while the run goes on fenced off (SPEC 9: its slot is the run's until the run ends).
local leases = KEYS[1]
local records = KEYS  -- run r's record: records[2 + r]; its values: unpack(ARGV, 1 + 2r, 2 + 2r)
local lease_ms, limits_prefix = tonumber(ARGV[1]), ARGV[2]

local now = now_ms()
local limits = limits_of(limits_prefix)
expect('zset', leases)
local renewed = {}
for r = 1, (#ARGV - 2) / 2 do
  local member, claim = unpack(ARGV, 1 + 2 * r, 2 + 2 * r)
  local hash, stored_claim, status = record_fields(records[2 + r], 'claim', 'status')
  local limit = limits and limits[topic_of(member)]
  local slot = limit and limit.slots > 0 and limits_prefix .. 'run:' .. topic_of(member)
  if hash and stored_claim == claim and status == 'running' and redis.call('ZSCORE', leases, member) then
    redis.call('ZADD', leases, 'XX', now + lease_ms, member)
    -- (not XX: a run renewed after its lease expired, before promote reaped it, takes its slot back)
    if slot then redis.pcall('ZADD', slot, now + lease_ms, run_id(member, claim)) end
    renewed[#renewed + 1] = 1
  else
    -- Fenced off (its record deleted or replaced), the run goes on: it keeps the slot it still has.
    if slot then redis.pcall('ZADD', slot, 'XX', now + lease_ms, run_id(member, claim)) end
    renewed[#renewed + 1] = 0
  end
end
return renewed
