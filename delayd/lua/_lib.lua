-- Shared helpers, prepended to every script when it is loaded (see store.py).

-- Redis's clock in milliseconds: every due time and lease is on this clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Wake the bucket process when `member` became the earliest entry of `zset`.
local function wake_if_head(zset, member, channel, score)
  local head = redis.call('ZRANGE', zset, 0, 0)
  if head[1] == member then
    redis.call('PUBLISH', channel, score)
  end
end

-- Move `member` out of the live sets and into a finished-index set.
local function index_finished(member, done_key, now, task_key, retention)
  redis.call('ZADD', done_key, now, member)
  redis.call('PEXPIRE', task_key, retention)
end
