-- Shared helpers: a script is loaded with the ones it uses in front of it (delayd/store/lua_lib.py),
-- or, for functions only a rare path of it uses, inside the function that holds a `--[[lib]]`
-- line. Each top-level definition starts at column 0 (`local function name`, `local a, b =`),
-- with its comment lines just above it; EVALSHA runs them on every call of the script. The function
-- library (FCALL) makes them once, when it loads, without Lua's globals (data: literals only), and
-- shares them between calls: data named in upper case are constants no call may change; other data
-- (`counts, runs`) are one call's state, which each call makes afresh before its script's body.

-- Redis's clock in milliseconds: every due time and lease is on this clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The same clock in microseconds (for a process that sleeps until a due time).
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- Stored data is not under our control: anyone with access to Redis can write
-- it, and Redis does not roll a script back when it fails half-way. So nothing a
-- script reads may make it fail: numbers are read with `int_of(x) or default`,
-- records through `record_fields` (a key that is not a hash reads as `false`), and the
-- bucket's own keys are checked with `expect` before anything is written, or each
-- command on them is sent through `on`.

-- A stored count, time (ms) or token as an integer, or nil. tonumber alone also reads
-- nan, inf, 1e400, fractions and exponents: ZADD refuses a nan score (failing the script
-- after its first write), and a token like 1.5 or 1e17 goes back to the worker as another
-- number than the one stored, so its run could never finish and would run again forever.
local function int_of(text)
  local n = tonumber(text)
  if n and n == math.floor(n) and n >= -2^53 and n <= 2^53 then return n end
  return nil
end

local function key_type(key)
  return redis.call('TYPE', key)['ok']
end

-- Keys set aside (expect) kept per slot, the oldest dropped first; a DUMP larger than this is not
-- kept (only why the key was set aside is).
local CORRUPT_KEPT, CORRUPT_DUMP_MAX = 16, 1048576

-- Set `key` (found a `found` where a `kind` belongs) aside in the hash `<tag>corrupt` of its slot
-- (`P{N}:corrupt`, `P{limits}:corrupt`, ...; every call that may do so passes it in KEYS): field
-- `<key>` its DUMP (RESTORE brings it back under any name), `<key>|why` '<ms> a <found> where a <kind>
-- belongs'; then the key is deleted. A set-aside hash that is not a hash, or full of fields that are
-- not ours, is deleted first.
local function set_aside(key, found, kind)
  local aside = string.match(key, '^[^{]*{[^}]*}:') .. 'corrupt'
  local payload = redis.call('DUMP', key)
  local why = now_ms() .. ' a ' .. found .. ' where a ' .. kind .. ' belongs'
  if #payload > CORRUPT_DUMP_MAX then
    why = why .. ' (its DUMP of ' .. #payload .. ' bytes is not kept)'
    payload = ''
  end
  local fields = redis.pcall('HKEYS', aside)
  if fields['err'] then
    redis.call('DEL', aside)
    fields = {}
  end
  if #fields >= 2 * CORRUPT_KEPT and redis.call('HEXISTS', aside, key) == 0 then
    local oldest, oldest_at = nil, math.huge
    for _, field in ipairs(fields) do
      local at = string.sub(field, -4) == '|why'
        and int_of(string.match(redis.call('HGET', aside, field) or '', '^%d+'))
      if at and at < oldest_at then oldest, oldest_at = string.sub(field, 1, -5), at end
    end
    if oldest then redis.call('HDEL', aside, oldest, oldest .. '|why') else redis.call('DEL', aside) end
  end
  redis.call('HSET', aside, key, payload, key .. '|why', why)
  redis.call('DEL', key)
end

-- Each key that exists with another type than `kind` (a string where a sorted set
-- belongs) is set aside (set_aside), kept for a person to look at; the script then
-- goes on as if the key were empty, instead of failing on WRONGTYPE.
local function expect(kind, ...)
  for _, key in ipairs({...}) do
    local t = key_type(key)
    if t ~= kind and t ~= 'none' then set_aside(key, t, kind) end
  end
end

-- `cmd` on the bucket's own key `key` (of type `kind`), its reply. A key of another type
-- makes the command fail (WRONGTYPE) before it changes anything: the key is then set aside
-- (expect) and the command runs on the empty key instead. One command where a TYPE check
-- before each key used would be two: a script pays only for the keys it touches.
local function on(kind, cmd, key, ...)
  local reply = redis.pcall(cmd, key, ...)
  if type(reply) == 'table' and reply['err'] then
    expect(kind, key)
    reply = redis.call(cmd, key, ...)
  end
  return reply
end

-- The fields named of a task record (HMGET), after `true`; only `false` when the key holds something other
-- than a hash: `local hash, status, due = record_fields(key, 'status', 'due')`.
local function record_fields(task_key, ...)
  local fields = redis.pcall('HMGET', task_key, ...)
  if fields['err'] then return false end
  return true, unpack(fields)
end

-- A bucket's wake message: the new earliest due time (ms), and the member due then, whose record
-- the bucket process declares in its next promote call (docs/redis-layout.md, "Declared keys").
local function wake_message(due, member)
  return string.format('%d', due) .. ' ' .. member
end

-- Wake the bucket process when `member` became the earliest entry of `delayed`, due at `score`.
local function wake_if_head(zset, member, channel, score)
  local head = redis.call('ZRANGE', zset, 0, 0)
  if head[1] == member then
    redis.call('PUBLISH', channel, wake_message(score, member))
  end
end

-- URL tasks wait in ready lists of their own (ready:u3, ready:u2, ready:u1), which
-- queue processes claim for their event loop apart from call and push tasks (for
-- their thread pool): a backlog of one kind never holds back the other. The state
-- counts (ready:3 ...) are per priority, whatever the list. Task.spec_json writes
-- the target first, so a URL task's spec starts with {"url": add flags such a record
-- `url=1`, which promote reads (a small field, not the spec: call tasks pay nothing).
local function is_url(spec)
  return type(spec) == 'string' and string.sub(spec, 1, 7) == '{"url":'
end

-- scheme://host:port of a URL (default ports made explicit), as delayd.model.origin.origin writes it:
-- the unit of host health, disabling and replay; nil when it has none (the URL cannot be sent).
local function origin_of(url)
  if type(url) ~= 'string' then return nil end
  local scheme, authority = string.match(url, '^(%a[%w+.-]*)://([^/?#]*)')
  if not scheme then return nil end
  scheme, authority = string.lower(scheme), string.lower(string.match(authority, '([^@]*)$'))
  local host, port = string.match(authority, '^(%[.*%]):?(%d*)$')
  if not host then host, port = string.match(authority, '^([^:]*):?(%d*)$') end
  port = tonumber(port)
  if not host or host == '' or (port and port > 65535) then return nil end
  if not port or port == 0 then port = scheme == 'https' and 443 or 80 end  -- (urlsplit's port 0 reads as none)
  return scheme .. '://' .. host .. ':' .. string.format('%d', port)
end

-- Record fields left out when they hold their default (docs/redis-layout.md):
-- priority 2, runs 0, and claim, whose default is the record's `created` time.
-- Every pending task saves their bytes.
local DEFAULT_PRIORITY = '2'

-- A task's score in `delayed`: its due time (ms), a quarter of a ms earlier for priority 3 and later for
-- priority 1, so that of the tasks due in one ms the higher priorities come first (then by name) in every
-- batch promote takes, and in its ready messages (issue 41). Promote takes the scores up to now +
-- DUE_SKEW, so none moves before its ms.
local DUE_SKEW = 0.25
local function due_score(due, priority)
  if priority == '3' then return tonumber(due) - DUE_SKEW end
  if priority == '1' then return tonumber(due) + DUE_SKEW end
  return due
end
-- The due time (ms) a score of `delayed` stands for.
local function due_of_score(score)
  return math.floor(tonumber(score) + 0.5)
end

-- The claim token of a record from its `claim` and `created` fields. A fresh
-- or replaced record's tokens start from the time it was written, so they stay
-- near Redis's clock (each bump is +1, and there is rarely more than one per ms
-- on one task). After a hard delete, which leaves nothing to bump, a re-added
-- task therefore still never hands out a token a worker of the deleted one holds.
-- A corrupt (not an integer) field reads as missing rather than failing the whole script.
local function claim_token(claim, created)
  return int_of(claim) or int_of(created) or 0
end

-- The zset of a paused topic's due tasks, set aside so they neither start nor keep the
-- head of `delayed` (which would wake the bucket process again and again):
-- `P{N}:paused:<topic>`, next to the bucket's `P{N}:paused` hash of paused topics.
local function parked_key(paused_key, topic)
  return paused_key .. ':' .. topic
end

-- A task set aside on purpose from `now` on (its topic paused, its host disabled): not lateness, as a
-- limit's hold is not. Its first park counts (`parked`); promote notes when it lets it go (`unparked`),
-- and claim takes the time between off its lateness.
local function mark_parked(task_key, now)
  redis.call('HSETNX', task_key, 'parked', now)
end

-- The generation of the pause a flag of the `paused` hash holds, or nil when it holds none: no
-- flag, or 'r' (a resume is moving the parked tasks back). A pause's flag is its generation (see
-- pause.lua); any other value reads as the oldest pause, and so does one more than a minute ahead
-- of this bucket's clock, which no pause wrote (written by hand or damaged, it would hold the topic
-- against every resume).
local function pause_generation(flag)
  if not flag or flag == 'r' then return nil end
  local generation = int_of(flag)
  if not generation or generation > now_us() + 60000000 then return 0 end
  return generation
end

-- The bucket's index of recurring tasks, `P{N}:recurring`: a zset of members, all at score 0
-- so that it reads in name order (the dashboard's schedules page). The key is looked at on
-- first use only, so a call that touches no recurring task pays nothing for it, and removal
-- from an index that does not exist costs one TYPE per call, not a command per task.
local function recurring_index(key)
  local kind
  local function look()
    if kind == nil then
      kind = key_type(key)
      if kind ~= 'zset' and kind ~= 'none' then
        expect('zset', key)
        kind = 'none'
      end
    end
  end
  return {
    add = function(member)
      look()
      redis.call('ZADD', key, 0, member)
      kind = 'zset'
    end,
    remove = function(member)
      look()
      if kind == 'zset' then redis.call('ZREM', key, member) end
    end,
  }
end

local function topic_of(member)
  return string.match(member, '^(.*):') or member
end

-- Arguments per command when a list of them is unpacked: Lua's unpack fails beyond
-- ~8,000 values (LUAI_MAXCSTACK), and a call's batch is not bounded below that (a queue
-- process finishes every run that ended since its last turn, thousands after an outage).
local UNPACK_MAX = 2000

