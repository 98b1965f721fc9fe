-- Written by scripts/build-clients (delayd/store/lua_fields.py) from delayd/model/fields.py, the table of task
-- fields: do not edit. add.lua's gate (_gate.lua) reads a decoded spec's fields with these: which it may have,
-- and the check of each field of a kind the table says (the gate checks the others, and the rules between
-- fields, itself). A string cjson decoded from a spec of UTF-8 text is UTF-8 text (it refuses a lone surrogate).

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
