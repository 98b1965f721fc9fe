-- limit: set or clear one topic's limit (docs/redis-layout.md, "Limits"). A single Redis only:
-- the buckets holding the topic's tasks are told, in their own slots.
-- KEYS[1]      conf           P{limits}:conf
-- KEYS[2]      tat            P{limits}:tat:<topic>
-- KEYS[3]      run            P{limits}:run:<topic>
-- KEYS[4]      where          P{limits}:where:<topic>   (declared only: wake_held names it)
-- KEYS[5]      corrupt        P{limits}:corrupt         (declared only: set_aside names it)
-- KEYS[5 + b]  limited        P{N}:limited              every bucket's (declared only: wake_held names them)
-- ARGV[1]      topic
-- ARGV[2]      limit          'N PERIOD_MS K' (N starts per PERIOD_MS, 0 = no rate; K runs in flight, 0 = no
--                             cap), or '' to clear it
-- ARGV[3]      limits_prefix  P{limits}:
-- Reply: had, 1 if the topic had a limit, else 0
-- A new limit holds from the next claim (runs already in flight are not counted against it); the
-- buckets holding tasks of the topic look at them again at once, so a higher limit lets more start
-- and a cleared one releases them all, in due order. Clearing forgets the rate state and the runs
-- in flight.
local conf, tat, run = KEYS[1], KEYS[2], KEYS[3]
local topic, limit, limits_prefix = ARGV[1], ARGV[2], ARGV[3]

local now = now_ms()
expect('hash', conf)
local had = redis.call('HEXISTS', conf, topic)
if limit == '' then
  redis.call('HDEL', conf, topic)
  redis.call('DEL', tat, run)
else
  redis.call('HSET', conf, topic, limit)
end
wake_held(limits_prefix, topic, now)
return had
