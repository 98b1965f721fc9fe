-- stats: read one bucket's statistics (changes nothing): the part whose cost does not grow with the
-- number of topics. The per-topic hashes (counts, totals, the windows, paused) are read by the caller a
-- page at a time (HSCAN), so that no call blocks Redis in proportion to the topics (issue 41).
-- KEYS[1]          delayed           P{N}:delayed
-- KEYS[2]          quarantine_key    P{N}:quarantine
-- KEYS[3]          first_window_key  P{N}:w:<n>   the first of the run-event windows w:<n-k+1> ... w:<n+1>
--                                               (only their names are read): the k windows the caller expects
--                                               to be the last, and the next one (delayd.store.windows)
-- KEYS[4..3 + k]   windows           P{N}:w:<n>   (declared only) the others
-- KEYS[4 + k..]    heads             P{N}:t:<member>   the records of the members the caller found at the heads
--                                               of the bucket's ready lists (a peek first: a script reads
--                                               only the records its call declares)
-- ARGV[1]          prefix          the task-key prefix P{N}:t:
-- ARGV[2]          windows_count   k
-- ARGV[3]          scan_limit      the most overdue entries of `delayed` looked at
-- ARGV[4]          truncated       1 if a ready list held more entries than the peek looked at, else 0
-- Reply: {now, first_window, head_due, quarantined, lag, truncated}
--   now: Redis's clock (ms); first_window: the first window's number (the caller reads windows first ...
--   first + k - 1); head_due: the due time of the delayed head (or false); quarantined: how many; lag:
--   {topic, earliest due, ...} of tasks due but not started; truncated: 1 if a scan hit the limit (the
--   per-topic due times may then be late ones), else 0
-- It writes nothing, not even to set a corrupt key aside: a key of the wrong type
-- reads as empty, an unreadable due time is not seen.
local delayed, quarantine_key, first_window_key = KEYS[1], KEYS[2], KEYS[3]
local heads = KEYS  -- the h-th head's record: heads[3 + k + h]
local prefix, windows_count, scan_limit, truncated = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])

local now = now_ms()

-- The reply of a read, or `default` when it fails on stored data (WRONGTYPE).
local function read(default, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply['err'] then return default end
  return reply
end

-- The last `windows` windows of Redis's clock, among the declared ones; if the caller's clock was
-- off by more than half a window, the declared ones nearest to them (the reply's `first` says which).
local declared = tonumber(string.match(first_window_key, '(%d+)$'))
local first = math.min(math.max(math.floor(now / WINDOW_MS) - windows_count + 1, declared), declared + 1)

-- The due time (ms) a score of `delayed` stands for (due_of_score: a priority's skew removed). One below
-- any time a script writes (-inf, -1e300: written by someone else) counts as due now, since promote moves
-- such an entry at once; one past 2^53 (+inf) is left as it is.
local function due_time(score)
  local n = tonumber(score)
  if n and n < -2^53 then return now end
  if n and n < 2^53 then return due_of_score(n) end
  return score
end

-- Earliest due time per topic of tasks that are due and not running: the past-due
-- head of `delayed` (not promoted yet) and the live heads of the ready lists (the records
-- declared: a member a worker took since the peek is no longer live).
local earliest = {}
local function seen(member, due)
  if not due then return end
  local topic = topic_of(member)
  if earliest[topic] == nil or due < earliest[topic] then earliest[topic] = due end
end
local overdue = read({}, 'ZRANGEBYSCORE', delayed, '-inf', now + DUE_SKEW, 'WITHSCORES', 'LIMIT', 0, scan_limit)
for i = 1, #overdue, 2 do seen(overdue[i], tonumber(due_time(overdue[i + 1]))) end
if #overdue == 2 * scan_limit then truncated = 1 end
for h = 1, #heads - (3 + windows_count) do
  local task_key = heads[3 + windows_count + h]
  local hash, queued, due = record_fields(task_key, 'queued', 'due')
  if hash and queued == '1' and due then seen(string.sub(task_key, #prefix + 1), int_of(due)) end
end
local lag = {}
for topic, due in pairs(earliest) do
  lag[#lag + 1] = topic
  lag[#lag + 1] = due
end

local head = read({}, 'ZRANGE', delayed, 0, 0, 'WITHSCORES')
return {now, first, head[2] and due_time(head[2]) or false, read(0, 'HLEN', quarantine_key), lag, truncated}
