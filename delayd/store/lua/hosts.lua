-- hosts: fold one queue process's delivery tallies into the health of each URL host (delayd hosts).
-- KEYS: seen (zset: origin -> last report, ms), off, events, corrupt (set_aside), then one hash per host,
--       `P{hosts}:h:<origin>`
-- ARGV: per host 5 values: deliveries, failures, last outcome ('ok' or 'fail'), last error
--       ('' when none failed), ms the host's circuit stays open from now (0: closed); then the ms of
--       continuous failure after which a host is disabled (url_disable_after; 0: never)
-- A host's hash: `m<minute % 60>` = '<minute>,<deliveries>,<failures>' (a ring: the last hour,
-- minute by minute), `error` and `error_at` (the last failure), `ok_at` (the last success),
-- `failing_since` (the first failure after the last success; removed by a success), `open_until`.
-- A host whose `failing_since` is that long ago is disabled as host_switch.lua disables it (`P{hosts}:off`,
-- the event counted in `P{hosts}:events`).
-- Bounded: a hash expires a day after its last report, and the index forgets hosts not reported
-- for a day (at most 100 per call). Times are Redis's clock.
local now = now_ms()
local DAY = 86400000
local seen, off, events = KEYS[1], KEYS[2], KEYS[3]
local host_prefix = string.sub(seen, 1, -5) .. 'h:'  -- `P{hosts}:h:` of `P{hosts}:seen`
local disable_after = tonumber(ARGV[(#KEYS - 4) * 5 + 1]) or 0
local minute = math.floor(now / 60000)
local slot = 'm' .. (minute % 60)
for i = 5, #KEYS do
  local key, j = KEYS[i], (i - 5) * 5
  local deliveries, failures = tonumber(ARGV[j + 1]) or 0, tonumber(ARGV[j + 2]) or 0
  local last, err, open_ms = ARGV[j + 3], ARGV[j + 4], tonumber(ARGV[j + 5]) or 0
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
