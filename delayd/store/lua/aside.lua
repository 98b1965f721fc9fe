-- aside: the topics of one bucket that may hold URL tasks set aside for a disabled host (claim.lua),
-- forgetting those of the given topics whose parked set is empty now (a resume moved their tasks back).
-- KEYS[1]      aside     P{N}:aside            set of topics
-- KEYS[2]      corrupt   P{N}:corrupt          (declared only: set_aside names it)
-- KEYS[2 + t]  parked    P{N}:paused:<topic>   topic t's parked set
-- ARGV[t]      topic     topic t to look at (Store.enable_steps: none on its first call, which only lists them)
-- Reply: {topics...}, the topics kept. O(topics in the set).
local aside = KEYS[1]
local parked_sets = KEYS  -- topic t's parked set: parked_sets[2 + t]

expect('set', aside)
for t, topic in ipairs(ARGV) do
  local parked = parked_sets[2 + t]
  expect('zset', parked)
  if redis.call('ZCARD', parked) == 0 then redis.call('SREM', aside, topic) end
end
return redis.call('SMEMBERS', aside)
