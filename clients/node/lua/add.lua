-- Redis's clock in milliseconds: every due time and lease is on this clock.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

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

-- Statistics (docs/redis-layout.md, "Counters"). Each script adds up its changes
-- in these tables, by topic, and writes them once at the end with one HINCRBY per
-- field: the Redis cost is per batch and per distinct topic, not per task.
--   counts[topic][state]: change of the number of tasks in that state (a live gauge)
--   runs[topic][event]:   events (runs by outcome, starts, lateness buckets)
-- Fields in Redis are '<state or event>|<topic>'.
local counts, runs = {}, {}

local READY = {['3'] = 'ready:3', ['2'] = 'ready:2', ['1'] = 'ready:1'}

local function add_to(tables, topic, name, delta)
  local t = tables[topic]
  if not t then
    t = {}
    tables[topic] = t
  end
  t[name] = (t[name] or 0) + delta
end

-- A URL task's record names its origin (`host`, written by add) and is counted, while it is to be
-- delivered (status delayed or running), as `host|<origin>` in `counts` (delayd hosts: the tasks waiting
-- for a host). A record without the field (a URL without an origin) is not counted.
local PENDING = {delayed = true, running = true}

local function count_host(host, delta)
  if host then add_to(counts, host, 'host', delta) end
end

-- HINCRBY that cannot fail on stored data: a counter that is not an integer starts
-- again from this change, and a key that is not a hash is set aside first.
local function hincrby(key, field, delta)
  local value = redis.pcall('HINCRBY', key, field, delta)
  if type(value) == 'number' then return value end
  expect('hash', key)
  redis.call('HSET', key, field, delta)
  return tonumber(delta)  -- (a count given as text: flush_stats)
end

-- Write the state counts the script changed to `counts_key`. A state count never goes
-- below 0: an index entry someone else wrote (never counted in) that a script takes out
-- would make it negative; it stops at 0 instead (gone).
local function flush_counts(counts_key)
  for topic, t in pairs(counts) do
    for state, delta in pairs(t) do
      local field = state .. '|' .. topic
      if delta ~= 0 and hincrby(counts_key, field, delta) <= 0 then
        redis.call('HDEL', counts_key, field)
      end
    end
  end
end

-- True if every field of decoded spec `t` is a known one and none is null: the known ones present are all there
-- are (counted without a table of names, which would be made on every call). (A null is no value of any field:
-- cjson's null is not nil, so it would pass for one given, where the daemon's reader reads None.)
local function only_known(t)
  local known = (t.call ~= nil and 1 or 0) + (t.url ~= nil and 1 or 0) + (t.push ~= nil and 1 or 0) +
    (t.callback ~= nil and 1 or 0) + (t.timeout ~= nil and 1 or 0) + (t.every ~= nil and 1 or 0) +
    (t.cron ~= nil and 1 or 0) + (t.method ~= nil and 1 or 0) + (t.body ~= nil and 1 or 0) +
    (t.params ~= nil and 1 or 0) + (t.intervals ~= nil and 1 or 0) + (t.persistent ~= nil and 1 or 0) +
    (t.retries ~= nil and 1 or 0) + (t.tz ~= nil and 1 or 0) + (t.signing_key ~= nil and 1 or 0) +
    (t.trace ~= nil and 1 or 0) + (t.group ~= nil and 1 or 0)
  for _, value in pairs(t) do
    if value == cjson.null then return false end
    known = known - 1
  end
  return known == 0
end

-- For the whole gate (spec_gate, made only for a call that decodes specs in full): unknown_field(t), a field of
-- decoded spec `t` the table does not know, or nil; refused_field(t), the first field of `t` the check of its kind
-- refuses and why, or nil.
local function spec_fields()
  local function unknown_field(t)
    local known = {call = true, url = true, push = true, callback = true, timeout = true, every = true, cron = true,
      method = true, body = true, params = true, intervals = true, persistent = true, retries = true,
      tz = true, signing_key = true, trace = true, group = true}
    for name in pairs(t) do
      if not known[name] then return name end
    end
  end

  local function refused_field(t)
    local v
    v = t.timeout
    if v ~= nil and (type(v) ~= 'number' or not (v > 0) or not (v <= 86400)) then
      return 'timeout', 'must be a number of seconds in (0, 86400]'
    end
    v = t.every
    if v ~= nil and type(v) ~= 'number' then return 'every', 'must be a number of seconds' end
    if v ~= nil and (type(v) ~= 'number' or not (v >= 1) or not (v <= 315360000)) then
      return 'every', 'must be between 1 s and ten years'
    end
    v = t.method
    if v ~= nil and (v ~= 'GET' and v ~= 'POST') then
      return 'method', 'must be GET or POST'
    end
    v = t.body
    if v ~= nil and (v ~= 'form' and v ~= 'json') then
      return 'body', "must be 'form' or 'json'"
    end
    v = t.persistent
    if v ~= nil and (type(v) ~= 'boolean') then
      return 'persistent', 'must be true or false'
    end
    v = t.retries
    if v ~= nil and (type(v) ~= 'number' or v % 1 ~= 0 or v < 0 or v > 10000) then
      return 'retries', 'must be an integer from 0 to 10000'
    end
    if t.tz ~= nil and t.cron == nil then
      return 'tz', 'is the zone of a cron schedule: give it with cron'
    end
    v = t.signing_key
    if v ~= nil and (type(v) ~= 'string' or #v < 1 or #v > 128 or not string.find(v, '^[A-Za-z0-9%_%.%:%-]*$')) then
      return 'signing_key', "must be 1-128 letters, digits, '_', '.', ':' or '-'"
    end
    if t.signing_key ~= nil and t.url == nil then
      return 'signing_key', 'is for a url task: only URL requests are signed'
    end
    v = t.group
    if v ~= nil and (type(v) ~= 'string' or string.find(v, '[%z\1-\31\127]') or string.find(v, '\194[\128-\159]') or
        #string.gsub(v, '[\128-\191]', '') < 1 or #string.gsub(v, '[\128-\191]', '') > 128) then
      return 'group', 'must be 1-128 characters, none of them a control character'
    end
  end
  return unknown_field, refused_field
end
-- The gate's refusal and its checks of text (add.lua's gate of validity: _gate.lua, docs/protocol.md section 7),
-- read as part of the lib after _fields.lua (delayd/store/scripts.py, LIB_FILES): refuse(), which every check of
-- the gate raises through, and the checks of what a task names as text: UTF-8, a topic's, id's or push list's
-- name, a URL task's URL, a trace context. add.lua checks each task's topic and id with them, _gate.lua a spec's
-- fields; kept apart from the gate so that each file holds one concern.

local REFUSED = 'delayd:bad-task '  -- the start of what refuse() raises (no Lua error starts so)

local function refuse(field, reason)
  error(REFUSED .. field .. ': ' .. reason, 0)
end

local MAX_NAME = 512  -- the most characters of a topic, id or push list

-- UTF-8 text: ASCII at once, else every sequence well formed (no overlong forms, surrogates or
-- code points past U+10FFFF), as Python's decoder reads it.
local function utf8_ok(text)
  if string.find(text, '^[%z\1-\127]*$') then return true end
  local i, n = 1, #text
  while i <= n do
    local c = string.byte(text, i)
    local len, low, high = 1, 128, 191
    if c < 128 then len = 1
    elseif c >= 194 and c <= 223 then len = 2
    elseif c >= 224 and c <= 239 then
      len = 3
      if c == 224 then low = 160 elseif c == 237 then high = 159 end
    elseif c >= 240 and c <= 244 then
      len = 4
      if c == 240 then low = 144 elseif c == 244 then high = 143 end
    else return false end
    for j = 1, len - 1 do
      local b = string.byte(text, i + j)
      if not b or b < (j == 1 and low or 128) or b > (j == 1 and high or 191) then return false end
    end
    i = i + len
  end
  return true
end

-- A topic, id or push list: 1-512 characters of UTF-8, no space or control character. (Printable
-- ASCII, the usual name, is one anchored pattern: far cheaper in Lua than a search for a class.)
local function check_name(field, text)
  if type(text) ~= 'string' then refuse(field, 'must be a string') end
  if #text <= MAX_NAME and string.find(text, '^[!-~]+$') then return end
  if text == '' then refuse(field, 'must not be empty') end
  if string.find(text, '[%z\1-\32\127]') then refuse(field, 'must not contain spaces or control characters') end
  if not utf8_ok(text) then refuse(field, 'is not valid UTF-8 text') end
  if #text > MAX_NAME and #string.gsub(text, '[\128-\191]', '') > MAX_NAME then
    refuse(field, 'is longer than ' .. MAX_NAME .. ' characters')
  end
end

-- A URL task's URL: http(s) with a host, and a port, if any, from 1 to 65535 (SPEC section 9).
local function check_url(url)
  -- The authority past any user info: a [bracketed] or plain host, then nothing or ':' and a port from 1
  -- to 65535 (delayd.model.checks.url_authority_error); an international host in its xn-- form.
  local authority = type(url) == 'string' and string.match(url, '^[Hh][Tt][Tt][Pp][Ss]?://([^/?#]*)')
  local host, rest = nil, nil
  if authority then
    authority = string.match(authority, '([^@]*)$')
    host, rest = string.match(authority, '^(%[[^%]]+%])(.*)$')
    if not host then host, rest = string.match(authority, '^([^:%[%]]*)(.*)$') end
  end
  if not host or host == '' or string.find(url, '[%z\1-\32\127]') then
    refuse('url', 'must be an http:// or https:// URL with a host, without spaces or control characters')
  end
  local port = rest == '' and '' or string.match(rest, '^:(%d*)$')
  if not port or port ~= '' and (#port > 5 or tonumber(port) < 1 or tonumber(port) > 65535) then
    refuse('url', 'has a port that is not a number from 1 to 65535')
  end
  if string.find(host, '[\128-\255]') then
    refuse('url', 'has a host that is not ASCII: give an international name in its xn-- form (IDNA)')
  end
end

-- A task's W3C trace context: a traceparent of version 00 (lowercase hex, ids not all zero), then nothing,
-- or a space and a tracestate of 1-512 printable characters (delayd.model.task.trace_of).
local function trace_ok(trace)
  if type(trace) ~= 'string' or #trace > 568 then return false end
  local hex = '[0-9a-f]'
  local trace_id, span_id = string.match(trace, '^00%-(' .. string.rep(hex, 32) .. ')%-(' .. string.rep(hex, 16)
    .. ')%-' .. hex .. hex)
  if not trace_id or not string.find(trace_id, '[1-9a-f]') or not string.find(span_id, '[1-9a-f]') then
    return false
  end
  local rest = string.sub(trace, 56)
  return rest == '' or string.find(rest, '^ [!-~][ -~]*$') ~= nil and string.find(rest, '[!-~]$') ~= nil
end
-- The gate's JSON agreement (docs/protocol.md section 7; tests/store/test_json_agreement.py), read as part of the
-- lib after _gate_text.lua (delayd/store/scripts.py, LIB_FILES): what Redis's cjson decodes but the daemon's
-- reader, Python's json, reads otherwise or refuses (numbers, control characters in strings, a field named
-- twice), which the whole gate (spec_gate, _gate.lua) refuses. Made by json_checks(), called by spec_gate, so that
-- a call which never decodes a spec in full never builds these functions. delayd/model/json_rules.py is the
-- same rules on the Python side.

-- check_json(text, ascii, t), for spec_gate: refuses JSON `text` that cjson and Python's json read apart.
local function json_checks()
  -- The first name that JSON object `text` gives twice at its top (each key decoded by cjson, escapes and all),
  -- for the refusal's message: escapes masked (positions kept), then strings and brackets walked.
  local function named_twice(text)
    local masked, depth, seen, at = string.gsub(text, '\\.', '\1\1'), 0, {}, 1
    while true do
      local from, _, c = string.find(masked, '([{}%[%]"])', at)
      if not from then return '?' end
      at = from + 1
      if c == '"' then
        at = string.find(masked, '"', at, true) + 1
        if depth == 1 and string.find(masked, '^%s*:', at) then
          local name = cjson.decode(string.sub(text, from, at - 1))
          if seen[name] then return name end
          seen[name] = true
        end
      else
        depth = depth + ((c == '{' or c == '[') and 1 or -1)
      end
    end
  end

  -- What cjson decodes (as it did `text`) but the daemon's reader, Python's json, reads otherwise or refuses
  -- (docs/protocol.md section 7; tests/store/test_json_agreement.py): a number JSON does not have (hex, `+1`,
  -- `01`, `1.`, `.5`, nan and inf, which cjson takes; NaN and Infinity, which both do) or beyond a double's
  -- range (cjson's infinity, Python's exact integer), a control character in a string or after the object
  -- (unless `ascii`: printable ASCII has none), and, for a spec whose fields passed their checks (`t`, its
  -- decoding), a field named twice (both keep the last; add.lua's pattern of a checked spec reads the first).
  -- Read in `text` less its strings: numbers, words, brackets, ',' and ':'. (Each pattern searched costs
  -- per byte: most are tried only once a plain search found the character they are about.)
  local function check_json(text, ascii, t)
    local bare = string.find(text, '\\', 1, true) and string.gsub(text, '\\.', '') or text
    local strings = string.gsub(bare, '"[^"]*"', '')
    if not ascii and string.find(text, '[%z\1-\31]') and (string.find(text, '[%z\1-\8\11\12\14-\31]')
        or select(2, string.gsub(bare, '[\t\n\r]', '')) > select(2, string.gsub(strings, '[\t\n\r]', ''))) then
      refuse('spec', 'holds a control character in a string (JSON escapes it) or after the object')
    end
    bare = strings
    -- (cjson's numbers beyond JSON's spell nan, inf or hex with one of these letters, which true, false and
    -- null have not, or 'na'; or have a '+' not after an exponent's e, a '.' not followed by a digit, or after
    -- '-' (cjson refuses one after anything else), a leading 0)
    local letter = string.find(bare, '%a')
    if letter and (string.find(bare, '[iIxXNA]', letter) or string.find(bare, 'na', letter, true))
        or string.find(bare, '+', 1, true) and string.find(bare, '[^eE]%+')
        or string.find(bare, '.', 1, true) and (string.find(bare, '%.%D') or string.find(bare, '-.', 1, true))
        or string.find(bare, '0', 1, true) and string.find(bare, '[%s:,%[]%-?0%d') then
      refuse('spec', 'holds a number JSON does not have (NaN, Infinity, hex, +1, 01, 1.)')
    end
    if #bare > 309 or letter and string.find(bare, '[eE][+-]?%d%d%d', letter) then  -- (what may be past 1.8e308)
      for number in string.gmatch(bare, '[%d.eE+-]+') do
        local value = tonumber(number)
        if value == math.huge or value == -math.huge then
          refuse('spec', "holds a number beyond a double's range (about 1.8e308)")
        end
      end
    end
    if t then  -- a ':' for each member at its top, once params go (its other fields hold no object)
      local fields, colons = 0, 0
      for _ in pairs(t) do fields = fields + 1 end
      local top = string.sub(bare, string.find(bare, '{', 1, true) + 1)
      if t.params then top = string.gsub(top, '%b{}', '') end
      local at = string.find(top, ':', 1, true)
      while at do
        colons = colons + 1
        at = string.find(top, ':', at + 1, true)
      end
      if colons ~= fields then refuse('spec', 'names the field ' .. cjson.encode(named_twice(text)) .. ' twice') end
    end
  end
  return check_json
end
-- add.lua's gate of validity (docs/protocol.md, section 7), in the lib so that the function library makes its
-- functions once, at load, not on every add. Whatever would make the daemon misread a record is refused with
-- `ERR delayd:bad-task <field>: <reason>`, every task of the call checked before anything is written. Clients
-- check first, for messages their users can act on (delayd.model.task); this is what holds when one does not.
-- A call flagged 'c' says its producer did: of its specs add.lua reads only what the scripts themselves
-- depend on (unread_ok), and a record bad otherwise is set aside at its first claim, never run.
-- Redis runs this for every task of every add, so the common case is kept cheap: one pcall for
-- the whole call (not one per task), names of printable ASCII proven by one anchored pattern,
-- a topic and a target checked once while they repeat, and a spec decoded at most once.
-- This file is the gate proper: a checked call's reading of a spec (unread_ok, plain_ok) and the whole gate
-- (spec_gate). It comes last of the gate's lib files (delayd/store/scripts.py, LIB_FILES), after refuse() and the
-- checks of text (_gate_text.lua) and the checks that cjson and Python read JSON alike (_gate_json.lua).
local MAX_SPEC, TEN_YEARS = 1048576, 315360000

-- A checked call's spec that unread_ok leaves in doubt (`t`, decoded): only what the daemon would read
-- otherwise than it was written is checked here: an unknown or null field, a `push` that is no string or
-- `intervals` that are no list of numbers, a schedule other than the mode says (the `recurring` index), a bad
-- trace, and a URL task's URL (SPEC section 9), which must be the one its pattern reads first: a spec naming
-- `"url"` again, or escaping a lowercase letter (which could spell it), whose decoded URL is another (cjson keeps
-- the last of a name given twice) goes to the whole gate, which refuses a field named twice. (`"url"` in params
-- is no field; a URL named twice alike is written, and set aside by the reader.) False: the whole gate decides,
-- and names what it refuses.
local function plain_ok(t, spec, mode, recurs)
  if type(t) ~= 'table' or t[1] ~= nil or not only_known(t) then return false end
  if t.trace ~= nil and not trace_ok(t.trace) then return false end
  if t.push ~= nil and type(t.push) ~= 'string' then return false end
  local list = t.intervals
  if list ~= nil then
    if type(list) ~= 'table' or list[1] == nil then return false end
    for _, gap in ipairs(list) do
      if type(gap) ~= 'number' then return false end
    end
  end
  if recurs ~= (t.every ~= nil or t.cron ~= nil) or mode == 'next*' and t.cron == nil then return false end
  if t.url ~= nil then
    if not is_url(spec) then return false end
    local escape = string.find(spec, '\\u', 1, true)
    if (string.find(spec, '"url"', 8, true) or escape and string.find(spec, '\\u00[67]', escape))
        and t.url ~= string.match(spec, '^{"url":"([^"\\]*)"') then
      return false  -- (named twice: cjson kept another than the first)
    end
    check_url(t.url)
  end
  return true
end

-- A checked call's spec of a task whose mode does not recur, read without decoding it: true when it has no
-- schedule, which it cannot have without naming `every` or `cron` (or holding a \u escape of a lowercase ASCII
-- letter, `\u006x` or `\u007x`: JSON's one way to spell such a name otherwise; the escapes of other text, which
-- producers write for what is not ASCII, are looked for only once one is found), and, for a URL task, when its
-- URL (written first, without escapes; a spec naming `"url"` elsewhere, or again, is decoded: the daemon reads a
-- field named twice by its last) passes check_url (SPEC section 9); then also the URL. Such a spec is written as
-- it is: what else is wrong with it the daemon finds when it reads the record, and sets the record aside at its
-- first claim with the reason, never runs it (delayd.model.record.from_record; tests/store/test_checked_adds.py).
-- False: the spec is decoded (plain_ok) and, if that leaves doubt, held to the whole gate.
local function unread_ok(spec)
  if #spec > MAX_SPEC or string.find(spec, '"every"', 1, true) or string.find(spec, '"cron"', 1, true) then
    return false
  end
  local escape = string.find(spec, '\\u', 1, true)
  if escape and string.find(spec, '\\u00[67]', escape) then return false end
  if not is_url(spec) then return not string.find(spec, '"url"', 1, true) end  -- (a url elsewhere: decoded)
  local url = string.match(spec, '^{"url":"([^"\\]*)"')
  if not url or string.find(spec, '"url"', 8, true) then return false end
  check_url(url)
  return true, url
end

-- The whole gate of a spec (check_spec): made only for a call that decodes specs here (a producer's call
-- without 'c', or a spec the checked path leaves to it), so a checked call never builds its functions.
local function spec_gate()
  local MAX_DEPTH = 64  -- how deep params may nest, the params object being level 1 (delayd.model.checks)
  -- The patterns of check_spec's fast paths: a target's name of identifier characters (no quote or
  -- backslash), params of printable ASCII from `{` to the `}` before the spec's last.
  local TARGET = '([A-Za-z_][%w_.]*:[A-Za-z_][%w_.]*)'
  local ONLY_CALL = '^{"call":"' .. TARGET .. '"}$'
  local CALL_FIRST, CALLBACK_NEXT = '^{"call":"' .. TARGET .. '"()', '^,"callback":"' .. TARGET .. '"()'
  local PARAMS = '^({[ -~]*})}$'
  -- The start of the last spec with params, `{"call":"<name>","callback":"<name>","params":` (or without the
  -- callback), and its names: a batch repeats it, and a spec that starts the same has the same names.
  local usual
  local unknown_field, refused_field = spec_fields()  -- (the table of fields' checks: _fields.lua)

  -- `package.module:function`: dotted identifiers on both sides of one ':' (each '.' followed by a
  -- letter or '_'; the dots found by plain search, far cheaper than a pattern searched for). Checked
  -- once per call for each distinct name: a batch repeats a few.
  local good_targets = {}
  local function check_target(field, text)
    if good_targets[text] then return end
    local shaped = type(text) == 'string' and string.find(text, '^[A-Za-z_][%w_.]*:[A-Za-z_][%w_.]*$')
    local dot = shaped and string.find(text, '.', 1, true)
    while dot do
      local after = string.byte(text, dot + 1) or 0
      if not (after == 95 or (after >= 65 and after <= 90) or (after >= 97 and after <= 122)) then shaped = false end
      dot = shaped and string.find(text, '.', dot + 1, true)
    end
    if not shaped then refuse(field, 'must look like package.module:function') end
    good_targets[text] = true
  end

  local function check_number(field, value, low, high, low_open)
    if type(value) ~= 'number' or value ~= value or value < low or value > high or (low_open and value == low) then
      refuse(field, 'must be a number ' .. (low_open and '> ' or '>= ') .. low .. ' and <= ' .. high)
    end
  end

  -- True if the arrays and objects of JSON `text` nest more than `limit` deep, counted without decoding
  -- (delayd.model.checks.nested_deeper counts the same way: escapes dropped, then strings, then brackets).
  local function nested_deeper(text, limit)
    if #text <= 2 * limit then return false end  -- (each level takes two brackets: most specs end here)
    local opens = 0  -- counted by plain finds (memchr), stopping past the limit: a pattern costs ~35 ns a byte
    for _, bracket in ipairs({'{', '['}) do
      local at = string.find(text, bracket, 1, true)
      while at and opens <= limit do
        opens, at = opens + 1, string.find(text, bracket, at + 1, true)
      end
    end
    if opens <= limit then return false end
    local depth = 0
    for bracket in string.gmatch(string.gsub(string.gsub(text, '\\.', ''), '"[^"]*"', ''), '[%[%]{}]') do
      depth = depth + ((bracket == '[' or bracket == '{') and 1 or -1)
      if depth > limit then return true end
    end
    return false
  end

  -- Params (decoded) nested more than MAX_DEPTH deep are refused, as every client refuses them: counted in
  -- `text` (their JSON, or the spec's: one level more) only when a value is a container, so the usual flat
  -- params cost a look at each value.
  local function check_depth(params, text, limit)
    for _, value in pairs(params) do
      if type(value) == 'table' then
        if nested_deeper(text, limit) then refuse('params', 'are nested more than ' .. MAX_DEPTH .. ' levels deep') end
        return
      end
    end
  end

  local check_json = json_checks()  -- (cjson's and Python's reading of JSON held alike: _gate_json.lua)

  -- The spec of a task whose mode says whether it recurs: decoded, every field checked. (A table
  -- cjson decodes is a JSON array exactly when its [1] is set: arrays are dense, nulls are
  -- cjson.null, an object's keys are strings; [] and {} both decode to an empty table.)
  local function check_spec(spec, mode, recurs)
    if #spec > MAX_SPEC then refuse('spec', 'is ' .. #spec .. ' bytes, more than ' .. MAX_SPEC) end
    -- A spec that is only a call target, `{"call":"<name>"}` with a name of identifier characters (no
    -- quote or backslash: cjson would decode it to {call = name} and nothing else), is checked without
    -- decoding: the name's shape, and a mode that does not recur, are all the rules below ask of it.
    local only_call = string.byte(spec, -2) == 34  -- ends in `"}`: else not tried (a spec with params ends `}}`)
      and string.match(spec, ONLY_CALL)
    if only_call then
      check_target('call', only_call)
      if recurs then refuse('mode', "ends in '*' for a task with every or cron, and only then") end
      return
    end
    -- So is a call's spec with `,"callback":"<name>"` then `,"params":{...}` (each optional, in the order
    -- delayd's clients write them) before its `}`, up to 1,000 bytes (params nested 1,000 deep, which the
    -- whole would fail on, do not fit): params (printable ASCII) are decoded alone, to an object; the names
    -- are not matched again while specs start as the last one with params did. A spec this path does not
    -- take goes the whole way below, which says why.
    -- (Only a spec ending in `"}` or `}}` can fit: any other, such as one with intervals or persistent last, goes
    -- straight to the whole way, without first trying this one's patterns.)
    local call, callback, params, at
    local last_two = string.byte(spec, -2)
    if #spec <= 1000 and string.byte(spec, -1) == 125 and (last_two == 34 or last_two == 125) then
      if usual and string.sub(spec, 1, #usual.head) == usual.head then  -- the last one's names (checked below)
        call, callback = usual.call, usual.callback
        params = string.match(spec, PARAMS, #usual.head + 1)
      else
        call, at = string.match(spec, CALL_FIRST)
        if call then
          local after
          callback, after = string.match(spec, CALLBACK_NEXT, at)
          at = after or at
          if string.sub(spec, at, at + 9) == ',"params":' then
            usual = {head = string.sub(spec, 1, at + 9), call = call, callback = callback}
            params = string.match(spec, PARAMS, at + 10)
          end
        end
      end
    end
    local fits = call and at == #spec
    if params then
      local decoded, t = pcall(cjson.decode, params)
      fits = decoded and type(t) == 'table' and t[1] == nil
      if fits then
        check_depth(t, params, MAX_DEPTH)
        check_json(params, true)
      end
    end
    if fits then
      check_target('call', call)
      if callback then check_target('callback', callback) end
      if recurs then refuse('mode', "ends in '*' for a task with every or cron, and only then") end
      return
    end
    local ascii = string.find(spec, '^[ -~]*$')
    if not ascii and not utf8_ok(spec) then refuse('spec', 'is not valid UTF-8 text') end
    local decoded, t = pcall(cjson.decode, spec)
    if not decoded or type(t) ~= 'table' or t[1] ~= nil then refuse('spec', 'is not a JSON object') end
    -- No unknown field (the table of names is made only to name one), and each of a kind the table checks.
    local unknown = not only_known(t) and unknown_field(t)
    if unknown then refuse('spec', 'unknown field ' .. cjson.encode(unknown)) end
    local refused, why = refused_field(t)
    if refused then refuse(refused, why) end
    local call, url, push = t.call, t.url, t.push
    local targets = (call ~= nil and call ~= '' and call ~= cjson.null and 1 or 0)
      + (url ~= nil and url ~= '' and url ~= cjson.null and 1 or 0)
      + (push ~= nil and push ~= '' and push ~= cjson.null and 1 or 0)
    if targets ~= 1 then refuse('target', 'give exactly one of call, url or push') end
    if call ~= nil then check_target('call', call) end
    if t.callback ~= nil then check_target('callback', t.callback) end
    if push ~= nil then check_name('push', push) end
    if url ~= nil then
      check_url(url)
      if not is_url(spec) then refuse('url', 'the spec of a URL task must start with {"url":') end
    end
    if t.trace ~= nil and not trace_ok(t.trace) then
      refuse('trace', 'must be a W3C traceparent 00-<32 hex>-<16 hex>-<2 hex>, then maybe a space and a tracestate')
    end
    -- (cjson decodes [] as it decodes {}: an empty one must be written as an object)
    if t.params ~= nil and (type(t.params) ~= 'table' or t.params[1] ~= nil
        or next(t.params) == nil and not string.find(spec, '"params"%s*:%s*{')) then
      refuse('params', 'must be a JSON object')
    end
    if t.params ~= nil then check_depth(t.params, spec, MAX_DEPTH + 1) end
    local every, cron = t.every, t.cron
    local schedules = 0
    if t.intervals ~= nil then
      schedules = 1
      local list = t.intervals
      if type(list) ~= 'table' or list[1] == nil or #list > 1000 then
        refuse('intervals', 'must be a list of 1 to 1000 numbers of seconds')
      end
      for _, gap in ipairs(list) do check_number('intervals', gap, 0, TEN_YEARS) end
    end
    if every ~= nil then schedules = schedules + 1 end
    if cron ~= nil then
      schedules = schedules + 1
      local fields = 0
      if type(cron) == 'string' then
        for word in string.gmatch(cron, '%S+') do
          fields = fields + 1
          if not string.find(word, '^[%w%*/,%-%?#]+$') then fields = 99 end
        end
      end
      if fields ~= 5 then refuse('cron', 'must be five fields: minute hour day-of-month month day-of-week') end
    end
    if schedules > 1 then refuse('schedule', 'give one of intervals, every or cron') end
    if t.tz ~= nil then
      if type(t.tz) ~= 'string' or #t.tz > 64 or not string.find(t.tz, '^[%w_%+%-/]+$') then
        refuse('tz', 'must be an IANA zone name like Europe/Berlin')
      end
    end
    if t.retries ~= nil then
      if schedules > 0 then refuse('retries', 'is for a task without intervals, every or cron') end
      if t.persistent == false then refuse('retries', 'give retries or persistent=false, not both') end
    end
    if recurs ~= (every ~= nil or cron ~= nil) then
      refuse('mode', "ends in '*' for a task with every or cron, and only then")
    end
    if mode == 'next*' and cron == nil then refuse('mode', 'next* is for a cron task') end
    check_json(spec, ascii, t)
    return url
  end
  return check_spec
end
-- One promote call, the bucket's tick (promote.lua), as its jobs share it (_due.lua, _release.lua, _reap.lua,
-- _trim.lua): `tick`, the table promote.lua makes per call, holds what they read (the clock, the batch, the
-- keys) and what they add up (`moved`, `reaped`, `kinds` of ready lists that got some, `asked`, `cut`).
--
-- Learned keys: a call touches no key it did not declare. The keys it can only know from what it reads
-- (the records of due and lapsed members, a paused topic's parked set, a limited topic's held set, the
-- limits' keys) are checked with may_touch(); where one is missing the work stops there (due order kept:
-- nothing after it is done this call), the keys go in the reply (`tick.asked`), and `tick.cut` is set, so
-- the caller calls again at once declaring them. The reply also names the keys the next call will probably
-- need (look_ahead), which the caller declares then: in the common case no call is cut.


-- add: write (upsert, or insert-if-absent) a batch of tasks of one bucket (docs/protocol.md, section 3).
-- KEYS[1]       delayed   P{N}:delayed      the bucket's due index; the script names the bucket's other keys
--                                           from its tag P{N}: (all under it, which Redis Cluster routes by)
-- KEYS[1 + n]   record    P{N}:t:<member>   task n's record
-- ARGV[1]       flags     '1' nx (insert only) or '0' (replace), then 'c' ('1c', '0c') when the producer
--                         checked every task itself (docs/protocol.md, section 7): a spec is then read only for
--                         what the scripts depend on (unread_ok, _gate.lua), not held to the whole gate
-- ARGV[2]       channel   Pwake:N, the bucket's wake channel
-- ARGV[4n - 1]  spec      task n's spec JSON
-- ARGV[4n]      priority  '1', '2' or '3'
-- ARGV[4n + 1]  mode      'delay' (value is relative to now) or 'at' (absolute); a recurring task's mode ends
--                         in '*' ('delay*', 'at*'), which also puts it in the `recurring` index; 'next*'
--                         (value 0): a cron task whose first due time the daemon resolves (docs/protocol.md);
--                         'debounce' (value 'WAIT:MOST', ms, MOST may be empty): due WAIT from now, but never
--                         later than MOST after the first add of the pending run (the record's `since`)
-- ARGV[4n + 2]  value     ms, as the mode says
-- Reply: written, the number of tasks written (a task that exists is not, with nx)
-- A relative delay is resolved here, on Redis's clock. Replacing a task bumps
-- its claim token, so a worker still running the old version cannot finish it.
-- The task's member (`topic:id`) is read from its record's key.
-- Redis work per call is what a single add (a web request) waits for, so a fresh task
-- costs TIME, ZRANGE, EXISTS, HSET, ZADD and HINCRBY and nothing else: the keys only a
-- replacement touches are type-checked at the first replacement (a set-aside cannot
-- fail, so checking them after earlier tasks' writes keeps the rule), and `delayed`'s
-- type is checked by reading its head with pcall, before any write.
local delayed, flags, channel = KEYS[1], ARGV[1], ARGV[2]
local records = KEYS  -- task n's record: records[1 + n]; its values: unpack(ARGV, 4n - 1, 4n + 2)
local now = now_ms()
local nx, checked = flags == '1' or flags == '1c', flags == '0c' or flags == '1c'
local tag = string.sub(delayed, 1, -8)  -- `P{N}:` of `P{N}:delayed`
local prefix = tag .. 't:'
local tasks = (#ARGV - 2) / 4
if string.sub(delayed, -7) ~= 'delayed' or (#ARGV - 2) % 4 ~= 0 or #records ~= 1 + tasks then
  return redis.error_reply('ERR delayd:bad-call KEYS and ARGV do not follow add.lua (docs/protocol.md)')
end

-- Every task of the call, in order: its key, priority, mode, value and spec. Fills `names`
-- with each task's member and topic (2n - 1, 2n), and `origins` with a URL task's origin (its record's
-- `host`); `task` is the task being checked.
local names, origins, task = {}, {}, 0
local check_spec  -- spec_gate()'s, made for the first spec that needs it
local function check_all()
  local prefix_len = #prefix
  local last_topic  -- a topic already checked
  for i = 3, #ARGV, 4 do
    task = task + 1
    local task_key = records[1 + task]
    local spec, priority, mode, value = unpack(ARGV, i, i + 3)
    if string.sub(task_key, 1, prefix_len) ~= prefix then
      refuse('key', 'not a record key of this bucket: ' .. prefix .. '<topic>:<id>')
    end
    local member = string.sub(task_key, prefix_len + 1)
    local topic, id = string.match(member, '^(.*):([^:]*)$')
    if not topic then refuse('id', 'the record key is not <prefix>t:<topic>:<id>') end
    if topic ~= last_topic then
      check_name('topic', topic)
      last_topic = topic
    end
    check_name('id', id)
    if priority ~= '1' and priority ~= '2' and priority ~= '3' then refuse('priority', 'must be 1, 2 or 3') end
    local at, recurs = false, false
    if mode == 'delay' then
    elseif mode == 'at' then at = true
    elseif mode == 'delay*' then recurs = true
    elseif mode == 'at*' then at, recurs = true, true
    elseif mode == 'next*' then
      recurs = true
      if value ~= '0' then refuse('mode', 'next* takes the value 0') end
    elseif mode == 'debounce' then
      local wait, most = string.match(value, '^(%d+):(%d*)$')
      if not wait or #wait > 12 or #most > 12 or tonumber(wait) > TEN_YEARS * 1000
          or (most ~= '' and (tonumber(most) > TEN_YEARS * 1000 or tonumber(most) < tonumber(wait))) then
        refuse('debounce', "takes 'WAIT:MOST' (ms; MOST empty or >= WAIT, each at most ten years)")
      end
      if nx then refuse('debounce', 'give debounce or nx, not both') end
      value = '0'
    else
      refuse('mode', 'must be delay, at, delay*, at*, next* or debounce')
    end
    local ms = int_of(value)
    if not ms or ms < 0 or ms > (at and 1e14 or TEN_YEARS * 1000) then
      refuse(at and 'at' or 'delay', 'must be an integer of ms from 0 to ' .. (at and '1e14' or 'ten years'))
    end
    local read, url = false, nil
    if checked and not recurs then read, url = unread_ok(spec) end
    if not read then
      local decoded, t = false, nil
      if checked and #spec <= MAX_SPEC then decoded, t = pcall(cjson.decode, spec) end
      if decoded and plain_ok(t, spec, mode, recurs) then
        url = t.url
      else  -- a call without 'c', or a spec plain_ok leaves to the whole gate (which names the refusal)
        check_spec = check_spec or spec_gate()
        url = check_spec(spec, mode, recurs)
      end
    end
    if url then origins[task] = origin_of(url) end
    names[2 * task - 1], names[2 * task] = member, topic
  end
end

local passed, refusal = pcall(check_all)
if not passed then
  if type(refusal) ~= 'string' or string.sub(refusal, 1, #REFUSED) ~= REFUSED then error(refusal, 0) end
  return redis.error_reply('ERR ' .. refusal .. ' (task ' .. task .. ' of the call)')
end

local schedules  -- the recurring index (lib: recurring_index), made for the first task that needs it
local head = redis.pcall('ZRANGE', delayed, '0', '0', 'WITHSCORES')  -- (text: a Lua number is formatted per call)
if head['err'] then
  expect('zset', delayed)
  head = {}
end
local head_due = tonumber(head[2] or math.huge)

local function replacing()
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

local function topic_of(member)
  return string.match(member, '^(.*):') or member
end

local function count_state(state, topic, delta)
  add_to(counts, topic, state, delta)
end

-- `priority` as read from a record: nil is the default.
local function count_ready(priority, topic, delta)
  add_to(counts, topic, READY[priority or DEFAULT_PRIORITY] or 'ready:?', delta)
end

-- ZREM / ZADD that keep the state count of `member` in step with the index.
local function zrem_counted(zset, member, state, topic)
  local removed = on('zset', 'ZREM', zset, member) == 1
  if removed then count_state(state, topic or topic_of(member), -1) end
  return removed
end

  local leases, done_ok, done_failed, done_deleted = tag .. 'leases', tag .. 'done:ok', tag .. 'done:failed',
    tag .. 'done:deleted'
  expect('zset', leases, done_ok, done_failed, done_deleted)
  local quarantine_key = tag .. 'quarantine'
  expect('hash', quarantine_key)
  -- Clears what the old record (its fields `old_*`, nil when its key is not a hash) left in the bucket's
  -- indexes; returns the new record's claim token.
  return function(task_key, member, topic, recurs, old_status, old_queued, old_priority, old_host, old_claim,
                  old_created)
    -- A live ready-list entry of the old record goes stale with it; a URL task still to be delivered
    -- no longer waits for its host.
    if old_queued == '1' then count_ready(old_priority, topic, -1) end
    if PENDING[old_status] then count_host(old_host, -1) end
    redis.call('HDEL', quarantine_key, member)  -- a quarantine reason belongs to the old record
    redis.call('DEL', task_key)
    zrem_counted(leases, member, 'running', topic)
    zrem_counted(done_ok, member, 'ok', topic)
    zrem_counted(done_failed, member, 'failed', topic)
    zrem_counted(done_deleted, member, 'deleted', topic)
    local parked = parked_key(tag .. 'paused', topic)
    expect('zset', parked)
    zrem_counted(parked, member, 'parked', topic)
    if not recurs then
      schedules = schedules or recurring_index(tag .. 'recurring')
      schedules.remove(member)
    end
    return claim_token(old_claim, old_created) + 1
  end
end

local replace  -- replacing()'s function, once a task of this call replaces one
local earliest, earliest_member = math.huge, nil  -- the batch's earliest due time, and a member due then
-- Times go to Redis as text made here once: a Lua number passed to redis.call is formatted
-- (sprintf %.17g) at every use, which costs more than the rest of a task's HSET.
local now_text = string.format('%d', now)
local written = 0
local by_topic = {}  -- topic -> {due, member, ...}: one ZADD per topic, not per task
for n = 1, task do
  local spec, priority, mode, value = unpack(ARGV, 4 * n - 1, 4 * n + 2)
  local task_key, member, topic = records[1 + n], names[2 * n - 1], names[2 * n]
  -- EXISTS first: a fresh task (the usual case) needs nothing else. A record without a
  -- status is corrupt, and its fields must not leak into the new one; a key that is not
  -- a hash is no task (record_fields gives false): it is replaced, even with nx.
  local exists = redis.call('EXISTS', task_key) == 1
  -- The old record: `old` true when there is one (its key a hash), and its fields.
  local old, old_status, old_queued, old_priority, old_claim, old_created, old_runs, old_since, old_host
  if exists then
    old, old_status, old_queued, old_priority, old_claim, old_created, old_runs, old_since, old_host =
      record_fields(task_key, 'status', 'queued', 'priority', 'claim', 'created', 'runs', 'since', 'host')
  end
  local recurs = mode == 'delay*' or mode == 'at*' or mode == 'next*'
  if not (nx and old) then
    local due, since = tonumber(value), nil
    if mode == 'delay' or mode == 'delay*' or mode == 'next*' then
      due = now + due
    elseif mode == 'debounce' then
      -- Debounce: due `wait` ms from now, but never later than `most` ms after the first add of
      -- the pending run (`since`): the old record's, when it is delayed and has not run yet.
      local wait, most = string.match(value, '^(%d+):(%d*)$')
      since = now
      if old_status == 'delayed' and (old_runs or '0') == '0' then since = int_of(old_since or old_created) or now end
      due = now + tonumber(wait)
      if most ~= '' and since + tonumber(most) < due then due = math.max(now, since + tonumber(most)) end
    end
    local due_text = string.format('%d', due)
    -- A fresh record leaves out runs (0), the default priority, and claim: its
    -- token is `created` (now), unless it replaces a record whose token is
    -- already that high (bumped more than once a ms), which must still go up.
    local token = now
    if exists then
      replace = replace or replacing()
      token = replace(task_key, member, topic, recurs, old_status, old_queued, old_priority, old_host, old_claim,
                      old_created)
    end
    local url = is_url(spec)
    local first = mode == 'next*'
    if not url and priority == DEFAULT_PRIORITY and token <= now and not first and not since then  -- the usual case
      redis.call('HSET', task_key, 'spec', spec, 'status', 'delayed', 'created', now_text, 'due', due_text)
    else
      local fields = {'spec', spec, 'status', 'delayed', 'created', now_text, 'due', due_text}
      -- A URL task is flagged `url=1`, so promote picks its ready list without reading the spec, and
      -- names its origin (`host`): claim checks it against the disabled hosts, and it is counted waiting
      -- for that host until it finishes (count_host).
      if url then
        fields[#fields + 1] = 'url'
        fields[#fields + 1] = '1'
        local host = origins[n]
        if host then
          fields[#fields + 1] = 'host'
          fields[#fields + 1] = host
          count_host(host, 1)
        end
      end
      if priority ~= DEFAULT_PRIORITY then
        fields[#fields + 1] = 'priority'
        fields[#fields + 1] = priority
      end
      if token > now then
        fields[#fields + 1] = 'claim'
        fields[#fields + 1] = token
      end
      -- A cron task without a first due time: due now, and its first claim gives it the calendar's
      -- next time after `created` instead of running it (delayd.workers.queue.claims, first_due).
      if first then
        fields[#fields + 1] = 'first'
        fields[#fields + 1] = 'cron'
      end
      -- A debounced add: when its pending run was first added (for the next debounced add's max wait).
      if since then
        fields[#fields + 1] = 'since'
        fields[#fields + 1] = string.format('%d', since)
      end
      redis.call('HSET', task_key, unpack(fields))
    end
    local scores = by_topic[topic]
    if not scores then
      scores = {}
      by_topic[topic] = scores
    end
    scores[#scores + 1] = due_score(due_text, priority)
    scores[#scores + 1] = member
    if recurs then
      schedules = schedules or recurring_index(tag .. 'recurring')
      schedules.add(member)
    end
    if due < earliest then earliest, earliest_member = due, member end
    written = written + 1
  end
end
-- `waiting` is counted here, straight to Redis (it only grows); a replacement's other
-- counts go through `counts` (flush_counts).
local counts_key = tag .. 'counts'
for topic, scores in pairs(by_topic) do
  local added = redis.call('ZADD', delayed, unpack(scores))
  if added > 0 then hincrby(counts_key, 'waiting|' .. topic, added) end
end
-- The bucket process is woken once per batch, if the batch moved its head earlier: '<ms> <member>'
-- (the member's record for its promote call to declare).
if earliest < head_due then redis.call('PUBLISH', channel, wake_message(earliest, earliest_member)) end
if next(counts) then flush_counts(counts_key) end
return written
