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
