-- limit: set or clear one topic's limit (docs/redis-layout.md, "Limits"). A single Redis only:
-- the buckets holding the topic's tasks are told, in their own slots.
-- KEYS: conf, tat:<topic>, run:<topic>, where:<topic>, corrupt (set_aside; all under P{limits}:),
--       every bucket's limited
-- ARGV: topic, the limit as 'N PERIOD_MS K' (N starts per PERIOD_MS, 0 = no rate; K runs in
--       flight, 0 = no cap) or '' to clear it, the limits prefix P{limits}:
-- A new limit holds from the next claim (runs already in flight are not counted against it); the
-- buckets holding tasks of the topic look at them again at once, so a higher limit lets more start
-- and a cleared one releases them all, in due order. Clearing forgets the rate state and the runs
-- in flight. Returns 1 if the topic had a limit, else 0.
local now = now_ms()
local topic, value, lp = ARGV[1], ARGV[2], ARGV[3]
expect('hash', KEYS[1])
local had = redis.call('HEXISTS', KEYS[1], topic)
if value == '' then
  redis.call('HDEL', KEYS[1], topic)
  redis.call('DEL', KEYS[2], KEYS[3])
else
  redis.call('HSET', KEYS[1], topic, value)
end
wake_held(lp, topic, now)
return had
