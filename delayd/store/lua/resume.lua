-- resume: start the tasks of one topic in one bucket again, a batch at a time.
-- KEYS[1]  paused         P{N}:paused
-- KEYS[2]  delayed        P{N}:delayed
-- KEYS[3]  counts_key     P{N}:counts
-- KEYS[4]  parked         P{N}:paused:<topic>  the topic's parked set
-- KEYS[5]  corrupt        P{N}:corrupt         (declared only: set_aside names it)
-- ARGV[1]  topic
-- ARGV[2]  wake_channel   Pwake:N
-- ARGV[3]  batch_size     the most tasks moved back
-- ARGV[4]  given_generation  the resume's ('' on its first call, on the first bucket: it is taken there,
--                            later than the pause flagged there)
-- Reply: {moved, left, generation, overtaken}
--   moved: tasks moved back; left: tasks still parked; generation: the resume's; overtaken: 1 if a later
--   pause holds the bucket, else 0
-- Moves the earliest `batch` parked tasks back into `delayed` at their due times, so
-- promote makes them ready in due order, and wakes the bucket. While some stay parked
-- the flag reads 'r' (resuming): promote then makes ready only the topic's due tasks
-- that are not later than the earliest one still parked, and parks the others, so
-- due order holds across batches. The last batch clears the flag.
-- A bucket flagged by a pause of this generation or a later one (a pause that began after this
-- resume: see pause.lua) is left as it is, and the call says so: the pause wins.
local paused, delayed, counts_key, parked = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local topic, wake_channel, batch_size, given_generation = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]

expect('hash', paused)
expect('zset', delayed, parked)
local flagged = pause_generation(redis.call('HGET', paused, topic))  -- the pause the bucket holds
local generation = int_of(given_generation) or math.max(now_us(), (flagged or 0) + 1)
if flagged and flagged >= generation then
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
  count_state('waiting', topic, redis.call('ZADD', delayed, unpack(args)))
  count_state('parked', topic, -redis.call('ZREMRANGEBYRANK', parked, 0, moved - 1))
  redis.call('PUBLISH', wake_channel, batch[2])
end
local left = redis.call('ZCARD', parked)
if left == 0 then
  redis.call('HDEL', paused, topic)
else
  redis.call('HSET', paused, topic, 'r')
end
flush_counts(counts_key)
return {moved, left, generation, 0}
