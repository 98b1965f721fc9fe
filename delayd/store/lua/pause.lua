-- pause: flag one topic as paused in one bucket (Client.pause runs it on every bucket, then
-- park.lua on their ready lists).
-- KEYS: paused, corrupt (set_aside)
-- ARGV: topic, generation ('' on the first bucket: it is taken there)
-- Promote reads the flag: from now on the topic's due tasks (and lapsed leases) are parked in
-- `paused:<topic>` instead of made ready. The flag's value is the pause's generation: Redis's
-- clock in µs when the pause reached its first bucket, and later than the generation held there
-- before, so a pause's generation is later than that of every resume that began before it
-- (resume.lua takes its own on the same bucket). A resume acts only on pauses of earlier
-- generations: a pause wins, on every bucket, over a resume that began before it. A bucket keeps
-- the latest generation it is given. O(1). Returns the generation.
local topic = ARGV[1]
expect('hash', KEYS[1])
local held = pause_generation(redis.call('HGET', KEYS[1], topic))
local generation = int_of(ARGV[2]) or math.max(now_us(), (held or 0) + 1)
if not held or held < generation then
  redis.call('HSET', KEYS[1], topic, string.format('%d', generation))
end
return generation
