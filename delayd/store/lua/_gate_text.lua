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
