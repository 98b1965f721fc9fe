-- resume: start the tasks of one topic in one bucket again.
-- KEYS: paused, delayed, counts
-- ARGV: topic, wake channel
-- Clears the topic's flag and moves its parked tasks back into `delayed` at their due
-- times (1000 per ZADD), so promote makes them ready in due order. Wakes the bucket.
-- Returns how many tasks were moved back.
local topic, channel = ARGV[1], ARGV[2]
local parked = parked_key(KEYS[1], topic)
redis.call('HDEL', KEYS[1], topic)
local moved, earliest = 0, nil
while true do
  local batch = redis.call('ZRANGE', parked, 0, 999, 'WITHSCORES')
  if #batch == 0 then break end
  local args = {}
  for i = 1, #batch, 2 do
    args[#args + 1] = batch[i + 1]
    args[#args + 1] = batch[i]
  end
  earliest = earliest or batch[2]
  count('waiting', topic, redis.call('ZADD', KEYS[2], unpack(args)))
  count('parked', topic, -redis.call('ZREMRANGEBYRANK', parked, 0, #batch / 2 - 1))
  moved = moved + #batch / 2
end
if earliest then redis.call('PUBLISH', channel, earliest) end
flush_stats(KEYS[3])
return moved
