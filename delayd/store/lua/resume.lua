-- resume: start the tasks of one topic in one bucket again, a batch at a time.
-- KEYS: paused, delayed, counts, the topic's parked set (paused:<topic>), corrupt (set_aside)
-- ARGV: topic, wake channel, batch size, the resume's generation ('' on its first call, on the
--       first bucket: it is taken there, later than the pause flagged there)
-- Moves the earliest `batch` parked tasks back into `delayed` at their due times, so
-- promote makes them ready in due order, and wakes the bucket. While some stay parked
-- the flag reads 'r' (resuming): promote then makes ready only the topic's due tasks
-- that are not later than the earliest one still parked, and parks the others, so
-- due order holds across batches. The last batch clears the flag.
-- A bucket flagged by a pause of this generation or a later one (a pause that began after this
-- resume: see pause.lua) is left as it is, and the call says so: the pause wins.
-- Returns {moved, still parked, the resume's generation, 1 if a later pause holds the bucket else 0}.
local topic, channel, batch_size = ARGV[1], ARGV[2], tonumber(ARGV[3])
local parked = KEYS[4]
expect('hash', KEYS[1])
expect('zset', KEYS[2], parked)
local held = pause_generation(redis.call('HGET', KEYS[1], topic))
local generation = int_of(ARGV[4]) or math.max(now_us(), (held or 0) + 1)
if held and held >= generation then
  return {0, redis.call('ZCARD', parked), generation, 1}
end
local batch = redis.call('ZRANGE', parked, 0, batch_size - 1, 'WITHSCORES')
local moved = #batch / 2
if moved > 0 then
  local args = {}
  for i = 1, #batch, 2 do
    args[#args + 1] = batch[i + 1]
    args[#args + 1] = batch[i]
  end
  count_state('waiting', topic, redis.call('ZADD', KEYS[2], unpack(args)))
  count_state('parked', topic, -redis.call('ZREMRANGEBYRANK', parked, 0, moved - 1))
  redis.call('PUBLISH', channel, batch[2])
end
local left = redis.call('ZCARD', parked)
if left == 0 then
  redis.call('HDEL', KEYS[1], topic)
else
  redis.call('HSET', KEYS[1], topic, 'r')
end
flush_counts(KEYS[3])
return {moved, left, generation, 0}
