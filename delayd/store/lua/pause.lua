-- pause: flag one topic as paused in one bucket (Client.pause runs it on every bucket, then
-- park.lua on their ready lists).
-- KEYS[1]  paused            P{N}:paused
-- KEYS[2]  corrupt           P{N}:corrupt   (declared only: set_aside names it)
-- ARGV[1]  topic
-- ARGV[2]  given_generation  the pause's, '' on the first bucket: it is taken there
-- Reply: generation, the pause's
-- Promote reads the flag: from now on the topic's due tasks (and lapsed leases) are parked in
-- `paused:<topic>` instead of made ready. The flag's value is the pause's generation: Redis's
-- clock in µs when the pause reached its first bucket, and later than the generation held there
-- before, so a pause's generation is later than that of every resume that began before it
-- (resume.lua takes its own on the same bucket). A resume acts only on pauses of earlier
-- generations: a pause wins, on every bucket, over a resume that began before it. A bucket keeps
-- the latest generation it is given. O(1).
local paused = KEYS[1]
local topic, given_generation = ARGV[1], ARGV[2]

expect('hash', paused)
local flagged = pause_generation(redis.call('HGET', paused, topic))  -- the pause the bucket holds
local generation = int_of(given_generation) or math.max(now_us(), (flagged or 0) + 1)
if not flagged or flagged < generation then
  redis.call('HSET', paused, topic, string.format('%d', generation))
end
return generation
