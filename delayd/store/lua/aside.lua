-- aside: the topics of one bucket that may hold URL tasks set aside for a disabled host (claim.lua),
-- forgetting those whose parked set is empty now (a resume moved their tasks back).
-- KEYS: aside (set of topics), paused
-- Returns the topics kept. O(topics in the set).
expect('set', KEYS[1])
local kept = {}
for _, topic in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local parked = parked_key(KEYS[2], topic)
  expect('zset', parked)
  if redis.call('ZCARD', parked) == 0 then
    redis.call('SREM', KEYS[1], topic)
  else
    kept[#kept + 1] = topic
  end
end
return kept
