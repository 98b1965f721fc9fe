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
