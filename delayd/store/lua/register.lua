-- register: refresh (or remove) one daemon's entry in the registry of live daemons.
-- KEYS[1]  info      P{daemons}:info      hash: daemon id -> JSON entry
-- KEYS[2]  expires   P{daemons}:expires   sorted set: daemon id -> expiry (ms)
-- KEYS[3]  corrupt   P{daemons}:corrupt   (declared only: set_aside names it)
-- ARGV[1]  id        the daemon's id
-- ARGV[2]  entry     its JSON entry ('' removes the entry: a graceful stop)
-- ARGV[3]  ttl       ms
-- Reply: now, the Redis time (ms) of the call
-- Entries whose expiry has passed (a daemon that died without a stop) are dropped
-- on every call, so the registry never grows with dead daemons.
local info, expires = KEYS[1], KEYS[2]
local id, entry, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])

local now = now_ms()
expect('hash', info)
expect('zset', expires)
local dead = redis.call('ZRANGEBYSCORE', expires, '-inf', now)
for _, gone in ipairs(dead) do
  redis.call('HDEL', info, gone)
  redis.call('ZREM', expires, gone)
end
if entry == '' then
  redis.call('HDEL', info, id)
  redis.call('ZREM', expires, id)
else
  redis.call('HSET', info, id, entry)
  redis.call('ZADD', expires, now + ttl, id)
end
return now
