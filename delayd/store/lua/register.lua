-- register: refresh (or remove) one daemon's entry in the registry of live daemons.
-- KEYS: info (hash: daemon id -> JSON entry), expires (sorted set: daemon id -> expiry ms), corrupt (set_aside)
-- ARGV: daemon id, JSON entry ('' removes the entry: a graceful stop), ttl (ms)
-- Entries whose expiry has passed (a daemon that died without a stop) are dropped
-- on every call, so the registry never grows with dead daemons.
-- Returns the Redis time (ms) of the call.
local now = now_ms()
local id, entry, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
expect('hash', KEYS[1])
expect('zset', KEYS[2])
local dead = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for _, gone in ipairs(dead) do
  redis.call('HDEL', KEYS[1], gone)
  redis.call('ZREM', KEYS[2], gone)
end
if entry == '' then
  redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
else
  redis.call('HSET', KEYS[1], id, entry)
  redis.call('ZADD', KEYS[2], now + ttl, id)
end
return now
