-- hosts: fold one queue process's delivery tallies into the health of each URL host (delayd hosts).
-- KEYS[1]          seen           P{hosts}:seen           zset: origin -> last report (ms)
-- KEYS[2]          off            P{hosts}:off
-- KEYS[3]          events         P{hosts}:events
-- KEYS[4]          corrupt        P{hosts}:corrupt        (declared only: set_aside names it)
-- KEYS[4 + h]      health         P{hosts}:h:<origin>     host h's hash
-- ARGV[5h - 4]     deliveries     to host h
-- ARGV[5h - 3]     failures
-- ARGV[5h - 2]     last           the last outcome, 'ok' or 'fail'
-- ARGV[5h - 1]     err            the last error ('' when none failed)
-- ARGV[5h]         open_ms        ms the host's circuit stays open from now (0: closed)
-- ARGV[5hosts + 1] disable_after  ms of continuous failure after which a host is disabled (url_disable_after;
--                                 0: never)
-- Reply: now, Redis's clock (ms)
-- A host's hash: `m<minute % 60>` = '<minute>,<deliveries>,<failures>' (a ring: the last hour,
-- minute by minute), `error` and `error_at` (the last failure), `ok_at` (the last success),
-- `failing_since` (the first failure after the last success; removed by a success), `open_until`.
-- A host whose `failing_since` is that long ago is disabled as host_switch.lua disables it (`P{hosts}:off`,
-- the event counted in `P{hosts}:events`).
-- Bounded: a hash expires a day after its last report, and the index forgets hosts not reported
-- for a day (at most 100 per call). Times are Redis's clock.
local seen, off, events = KEYS[1], KEYS[2], KEYS[3]
local health, hosts = KEYS, #KEYS - 4  -- host h's hash: health[4 + h]; its values: unpack(ARGV, 5h - 4, 5h)
local disable_after = tonumber(ARGV[5 * hosts + 1]) or 0

local now = now_ms()
local DAY = 86400000
local host_prefix = string.sub(seen, 1, -5) .. 'h:'  -- `P{hosts}:h:` of `P{hosts}:seen`
local minute = math.floor(now / 60000)
local slot = 'm' .. (minute % 60)
for h = 1, hosts do
  local key = health[4 + h]
  local deliveries, failures, last, err, open_ms = unpack(ARGV, 5 * h - 4, 5 * h)
  deliveries, failures, open_ms = tonumber(deliveries) or 0, tonumber(failures) or 0, tonumber(open_ms) or 0
  local ring = on('hash', 'HGET', key, slot)
  local at, d, f = string.match(ring or '', '^(%d+),(%d+),(%d+)$')
  if tonumber(at) ~= minute then d, f = 0, 0 end
  local fields = {slot, minute .. ',' .. (d + deliveries) .. ',' .. (f + failures), 'open_until', now + open_ms}
  if failures > 0 then
    for _, v in ipairs({'error', err, 'error_at', now}) do fields[#fields + 1] = v end
  end
  if last == 'ok' then
    fields[#fields + 1], fields[#fields + 2] = 'ok_at', now
    redis.call('HDEL', key, 'failing_since')
  else
    local since = int_of(redis.call('HGET', key, 'failing_since'))
    if not since then
      since = now
      fields[#fields + 1], fields[#fields + 2] = 'failing_since', now
    end
    if disable_after > 0 and now - since >= disable_after
        and redis.call('HSETNX', off, string.sub(key, #host_prefix + 1), now) == 1 then
      redis.call('HINCRBY', events, 'disabled', 1)
    end
  end
  redis.call('HSET', key, unpack(fields))
  redis.call('PEXPIRE', key, DAY)
  on('zset', 'ZADD', seen, now, string.sub(key, #host_prefix + 1))
end
local gone = redis.call('ZRANGEBYSCORE', seen, '-inf', '(' .. (now - DAY), 'LIMIT', 0, 100)
if #gone > 0 then redis.call('ZREM', seen, unpack(gone)) end
return now
