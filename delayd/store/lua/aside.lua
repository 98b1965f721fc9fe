-- aside: the topics of one bucket that may hold URL tasks set aside for a disabled host (claim.lua),
-- forgetting those of the given topics whose parked set is empty now (a resume moved their tasks back).
-- KEYS: aside (set of topics), corrupt (set_aside), then the parked set (paused:<topic>) of each given topic
-- ARGV: the topics to look at (Store.enable_steps: none on its first call, which only lists them)
-- Returns the topics kept. O(topics in the set).
expect('set', KEYS[1])
for i, topic in ipairs(ARGV) do
  local parked = KEYS[i + 2]
  expect('zset', parked)
  if redis.call('ZCARD', parked) == 0 then redis.call('SREM', KEYS[1], topic) end
end
return redis.call('SMEMBERS', KEYS[1])
