"""delayd/store/lua/_fields.lua, add.lua's gate's part made from the table of fields (delayd.model.fields):
which fields a spec may have, and each field of a kind the table says (enum, bool, int, number, text, the fields
it requires) checked with the table's message. scripts/build-clients writes it (tests/producers/test_packages.py
holds it to the table); the gate (_gate.lua, its checks of text in _gate_text.lua) checks the kinds written by
hand (names, URLs, params, intervals, cron, zones, the trace context) and the rules between fields itself."""
from __future__ import annotations

from string import Template

from delayd.model.fields import SPEC, Field

_GENERIC = ("enum", "bool", "int", "number", "text")


def _lua_class(chars: str) -> str:
    """A regular expression's ASCII character class (`A-Za-z0-9_.:-`) as a Lua pattern's."""
    out, i = [], 0
    while i < len(chars):
        if i + 2 < len(chars) and chars[i + 1] == "-":
            out.append(chars[i:i + 3])
            i += 3
        else:
            out.append(chars[i] if chars[i].isalnum() else "%" + chars[i])
            i += 1
    return "".join(out)


def _refused(f: Field) -> list[str]:
    """The Lua tests, any of which refuses field `f`'s value (`v`, not nil) by its kind."""
    c = f.check
    if c.kind == "enum":
        return [" and ".join(f"v ~= {_lua(value)}" for value in c.values)]
    if c.kind == "bool":
        return ["type(v) ~= 'boolean'"]
    if c.kind == "int":
        return ["type(v) ~= 'number'", "v % 1 ~= 0", f"v < {_lua(c.low)}", f"v > {_lua(c.high)}"]
    if c.kind == "number":
        return ["type(v) ~= 'number'", f"not (v {'>' if c.low_open else '>='} {_lua(c.low)})",
                f"not (v <= {_lua(c.high)})"]
    if c.pattern:
        raise ValueError(f"{f.name}: a text of a pattern has no Lua check (the gate's own kinds)")
    if c.chars:
        return ["type(v) ~= 'string'", f"#v < {_lua(c.low)}", f"#v > {_lua(c.high)}",
                f"not string.find(v, '^[{_lua_class(c.chars)}]*$')"]
    characters = "#string.gsub(v, '[\\128-\\191]', '')"  # (UTF-8 text: its bytes less continuation bytes)
    return ["type(v) ~= 'string'", "string.find(v, '[%z\\1-\\31\\127]')", "string.find(v, '\\194[\\128-\\159]')",
            f"{characters} < {_lua(c.low)}", f"{characters} > {_lua(c.high)}"]


def _lua(value: object) -> str:
    """A string or a number as a Lua literal."""
    if isinstance(value, (int, float)):
        return str(int(value)) if float(value).is_integer() else repr(value)
    quote = '"' if "'" in str(value) and '"' not in str(value) else "'"
    return quote + str(value).replace("\\", "\\\\").replace(quote, "\\" + quote) + quote


def _wrapped(items: list[str], separator: str, indent: str) -> str:
    """`items` joined by `separator`, a new line (and `indent`) before an item that would pass 110 characters."""
    lines = [items[0]]
    for item in items[1:]:
        if len(lines[-1]) + len(separator) + len(item) > 110:
            lines[-1] += separator.rstrip()
            lines.append(indent + item)
        else:
            lines[-1] += separator + item
    return "\n".join(lines)


FILE = "_fields.lua"  # in delayd/store/lua, before the gate's files (_gate_text.lua, ...) in the lib
_SOURCE = Template("""\
-- Written by scripts/build-clients (delayd/store/lua_fields.py) from delayd/model/fields.py, the table of task
-- fields: do not edit. add.lua's gate (_gate.lua) reads a decoded spec's fields with these: which it may have,
-- and the check of each field of a kind the table says (the gate checks the others, and the rules between
-- fields, itself). A string cjson decoded from a spec of UTF-8 text is UTF-8 text (it refuses a lone surrogate).

-- True if every field of decoded spec `t` is a known one and none is null: the known ones present are all there
-- are (counted without a table of names, which would be made on every call). (A null is no value of any field:
-- cjson's null is not nil, so it would pass for one given, where the daemon's reader reads None.)
local function only_known(t)
  local known = $known
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
    local known = {$names}
    for name in pairs(t) do
      if not known[name] then return name end
    end
  end

  local function refused_field(t)
    local v
${checks}  end
  return unknown_field, refused_field
end
""")


def source() -> str:
    """delayd/store/lua/_fields.lua, made from the table."""
    checks = []
    for f in SPEC:
        if f.check and f.check.kind in _GENERIC:
            checks.append(f"    v = t.{f.name}\n")
            if f.check.type_message:
                checks.append(f"    if v ~= nil and type(v) ~= 'number' then return '{f.name}', "
                              f"{_lua(f.check.type_message)} end\n")
            refused = _wrapped(["v ~= nil and (" + _refused(f)[0], *_refused(f)[1:]], " or ", "        ")
            checks.append(f"    if {refused}) then\n      return '{f.name}', {_lua(f.check.message)}\n    end\n")
        if f.requires:
            absent = " and ".join(f"t.{name} == nil" for name in f.requires)
            checks.append(f"    if t.{f.name} ~= nil and {absent} then\n      return '{f.name}', {_lua(f.alone)}\n"
                          "    end\n")
    known = _wrapped([f"(t.{f.name} ~= nil and 1 or 0)" for f in SPEC], " + ", "    ")
    names = _wrapped([f"{f.name} = true" for f in SPEC], ", ", "      ")
    return _SOURCE.substitute(known=known, names=names, checks="".join(checks))
