-- renew: extend the leases of runs still in progress.
-- KEYS: leases
-- ARGV: task-key prefix, lease (ms), then per run: member, claim token
-- Returns one 1 (renewed) or 0 (lost: the run was fenced off) per run.
local now = now_ms()
local prefix, lease = ARGV[1], tonumber(ARGV[2])
expect('zset', KEYS[1])
local renewed = {}
for i = 3, #ARGV, 2 do
  local member, claim = ARGV[i], ARGV[i + 1]
  local r = read_record(prefix .. member, 'claim', 'status')
  if r and r[1] == claim and r[2] == 'running' and redis.call('ZSCORE', KEYS[1], member) then
    redis.call('ZADD', KEYS[1], 'XX', now + lease, member)
    renewed[#renewed + 1] = 1
  else
    renewed[#renewed + 1] = 0
  end
end
return renewed
