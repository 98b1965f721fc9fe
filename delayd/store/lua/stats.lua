-- stats: read one bucket's statistics (changes nothing).
-- KEYS: delayed, ready:3, ready:2, ready:1, counts, totals, quarantine, paused,
--       ready:u3, ready:u2, ready:u1, then the run-event windows w:<n-k+1> ... w:<n+1>: the k windows
--       the caller expects to be the last, and the next one (delayd.store.windows)
-- ARGV: task-key prefix, scan limit
-- Returns {now, counts (flat field/value list), totals (flat), first window number,
--          {one flat list per window, oldest first}, due time of the delayed head
--          (or false), quarantined, {topic, earliest due, ...} of tasks due but not
--          started, 1 if a scan hit the limit (the per-topic due times may then be
--          late ones) else 0, topics paused in this bucket}
-- It writes nothing, not even to set a corrupt key aside: a key of the wrong type
-- reads as empty, an unreadable due time is not seen.
local now = now_ms()
local prefix, limit = ARGV[1], tonumber(ARGV[2])

-- The reply of a read, or `default` when it fails on stored data (WRONGTYPE).
local function read(default, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply['err'] then return default end
  return reply
end

-- The last `windows` windows of Redis's clock, among the declared ones; if the caller's clock was
-- off by more than half a window, the declared ones nearest to them (the reply's `first` says which).
local windows = #KEYS - 12
local declared = tonumber(string.match(KEYS[12], '(%d+)$'))
local first = math.min(math.max(math.floor(now / WINDOW_MS) - windows + 1, declared), declared + 1)
local recent = {}
for w = first, first + windows - 1 do
  recent[#recent + 1] = read({}, 'HGETALL', KEYS[12 + w - declared])
end

-- A score of `delayed` below any time a script writes (-inf, -1e300: written by someone else)
-- counts as due now, since promote moves such an entry at once; any other is left as it is.
local function due_score(score)
  local n = tonumber(score)
  if n and n < -2^53 then return now end
  return score
end

-- Earliest due time per topic of tasks that are due and not running: the past-due
-- head of `delayed` (not promoted yet) and the live head of each ready list.
local earliest, truncated = {}, 0
local function seen(member, due)
  if not due then return end
  local topic = topic_of(member)
  if earliest[topic] == nil or due < earliest[topic] then earliest[topic] = due end
end
local overdue = read({}, 'ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, limit)
for i = 1, #overdue, 2 do seen(overdue[i], tonumber(due_score(overdue[i + 1]))) end
if #overdue == 2 * limit then truncated = 1 end
for _, k in ipairs({2, 3, 4, 9, 10, 11}) do
  local members = read({}, 'LRANGE', KEYS[k], 0, limit - 1)
  for _, member in ipairs(members) do
    local r = read({}, 'HMGET', prefix .. member, 'queued', 'due')
    if r[1] == '1' and r[2] then seen(member, int_of(r[2])) end
  end
  if #members == limit then truncated = 1 end
end
local lag = {}
for topic, due in pairs(earliest) do
  lag[#lag + 1] = topic
  lag[#lag + 1] = due
end

local head = read({}, 'ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {now, read({}, 'HGETALL', KEYS[5]), read({}, 'HGETALL', KEYS[6]), first, recent,
        head[2] and due_score(head[2]) or false, read(0, 'HLEN', KEYS[7]), lag, truncated, read({}, 'HKEYS', KEYS[8])}
