"""The shared helpers of the lib (lua/_lib.lua and the other lua/_*.lua files), each script given only those
it uses, and the function library's layout of the same helpers.

EVALSHA (Redis 6.2, and the PHP and Node clients' scripts) runs a script's whole source on every call, so a
script's prelude is only the lib definitions its body names (transitively, in the lib's order). The lib is one
file of top-level definitions (`local function name`, `local a, b = ...`, each with its comment lines above
it). A script function at column 0 that only a rare path calls may hold the line `--[[lib]]`: the lib
functions only it needs are defined there, inside it, so a call that never enters it never builds them.
Tables and constants always go in front (a table defined inside a function would be a new one on each call).

The function library (FCALL, Redis >= 7 and Valkey) runs its top-level code once, at FUNCTION LOAD: there the
lib's definitions are made once (`library_top`), shared by every call, and each script's registered function
runs only the script's own body (`callback`). Two things a lib function reads are then a call's own and set by
each callback first: KEYS and ARGV (locals of the library, not a script's globals), and the lib's per-call
state, its data definitions whose names are not all upper case (`local counts, runs = {}, {}`), made afresh,
so nothing a call leaves in them, even one that failed half-way, reaches the next. Upper-case data
(`LATENESS_MS`) are constants: no script may change them.

The one linker: the PHP and Node client packages ship the scripts they call as it links them
(scripts/build-clients writes clients/*/lua/), so every producer sends the same source and SHA1.
"""
from __future__ import annotations

import re
from typing import NamedTuple

# A top-level definition starts at column 0: `local function f(`, `local a, b =` or `local a`.
_DEFINITION = re.compile(r"^local[ \t]+(?:function[ \t]+(\w+)|([\w \t,]+?)[ \t]*(?:=|$))", re.M)
# What a reference can hide in: long strings and comments, comments, quoted strings; else a name
# (not a field: `t.name`, `t:name`).
_TOKEN = re.compile(r"""--\[(=*)\[.*?\]\1\]|\[(=*)\[.*?\]\2\]|--[^\n]*|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"|"""
                    r"""(?<![.:\w])([A-Za-z_]\w*)""", re.S)


class Definition(NamedTuple):
    names: frozenset[str]
    source: str      # with the comment lines just above it
    uses: frozenset[str]
    function: bool   # `local function name`, not a table or constant


def names_in(source: str) -> frozenset[str]:
    """The names `source` mentions outside comments and strings."""
    return frozenset(m.group(3) for m in _TOKEN.finditer(source) if m.group(3))


def definitions(lib: str) -> list[Definition]:
    """The lib's top-level definitions, in order (the header comment of the file is left out)."""
    lines = lib.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    starts: list[tuple[int, frozenset[str], bool]] = []
    for m in _DEFINITION.finditer(lib):
        line = lib.count("\n", 0, m.start())
        while line > 0 and lines[line - 1].startswith("--"):  # its comment goes with it
            line -= 1
        names = m.group(1) or m.group(2)
        starts.append((offsets[line], frozenset(n.strip() for n in names.split(",")), bool(m.group(1))))
    ends = [start for start, _, _ in starts[1:]] + [len(lib)]
    return [Definition(names, lib[start:end], names_in(lib[start:end]) - names, function)
            for (start, names, function), end in zip(starts, ends)]


LIB_HERE = "--[[lib]]"
# A `--[[lib]]` line and the script function around it (column-0 `local function` ... `end`).
_RARE_FUNCTION = re.compile(r"^local function [^\n]*\n(?:(?!end\b)[^\n]*\n)*?[ \t]*--\[\[lib\]\][ \t]*\n"
                            r"(?:(?!end\b)[^\n]*\n)*end\b", re.M)


def _needed(defs: list[Definition], source: str) -> list[Definition]:
    """The definitions `source` uses, directly or through others, in lib order."""
    wanted = set(names_in(source))
    for d in reversed(defs):  # a definition uses only those above it
        if d.names & wanted:
            wanted |= d.uses
    return [d for d in defs if d.names & wanted]


def source(lib: str, script: str) -> str:
    """`script` as Redis runs it: the lib definitions it uses in front of it, except the
    functions that only its `--[[lib]]` functions use, which are defined at that line."""
    defs = definitions(lib)
    rare = list(_RARE_FUNCTION.finditer(script))
    if script.count(LIB_HERE) != len(rare):
        raise ValueError(f"{LIB_HERE} outside a column-0 `local function ... end`")
    bounds = [0, *(i for m in rare for i in m.span()), len(script)]
    outside = "".join(script[start:end] for start, end in zip(bounds[::2], bounds[1::2]))
    data = "".join(d.source for m in rare for d in _needed(defs, m.group()) if not d.function)
    front = _needed(defs, outside + data)
    parts, at = [], 0
    for m in rare:
        marker = script.index(LIB_HERE, m.start())
        line = script.rindex("\n", 0, marker) + 1  # the marker's line is replaced
        inside = [d for d in _needed(defs, m.group()) if d not in front]
        parts += [script[at:line], "".join(d.source for d in inside)]
        at = script.index("\n", marker) + 1
    parts.append(script[at:])
    return "".join(d.source for d in front) + "\n" + "".join(parts)


def _per_call(d: Definition) -> bool:
    """Whether `d` is state of one call (data not named in upper case), made afresh by each callback."""
    return not d.function and not all(name.isupper() for name in d.names)


# Lua 5.1's limits (LUAI_MAXVARS, LUAI_MAXUPVALUES): the library's top level holds every lib name as a local, and a
# function reads the lib names its body uses as upvalues (KEYS, ARGV, counts, runs among them). FUNCTION LOAD
# refuses a library over either; checked here, where the suite's default server (6.2, EVALSHA) would not.
MAX_LOCALS, MAX_UPVALUES = 200, 60

# What a data definition may name: FUNCTION LOAD runs the library's top level without Lua's globals (no math,
# string, tonumber: only a `redis` that registers functions), so it holds literals and other definitions.
_LITERAL = frozenset({"local", "true", "false", "nil", "and", "or", "not"})
_FIELD = re.compile(r"\b[A-Za-z_]\w*[ \t]*=(?!=)")  # `name =`: a table's field (or the definition's own name)


def library_top(defs: list[Definition], prelude: str = "") -> str:
    """The function library's top-level code: the locals KEYS and ARGV (each callback sets them), `prelude`
    (tests/key_guard.py's checking `redis`), then every lib definition (`defs`: definitions(lib)), made once
    when the library loads."""
    names = frozenset().union(*(d.names for d in defs))
    for d in defs:
        unknown = set() if d.function else names_in(_FIELD.sub("=", d.source)) - names - _LITERAL
        if unknown:
            raise ValueError(f"{', '.join(sorted(d.names))} uses {', '.join(sorted(unknown))}: the lib's "
                             "data must be literals (FUNCTION LOAD runs it without Lua's globals)")
    if len(names) + 2 > MAX_LOCALS:
        raise ValueError(f"{len(names)} lib names: the library's top level holds at most {MAX_LOCALS - 2}")
    return "local KEYS, ARGV\n" + prelude + "".join(d.source for d in defs)


def callback(defs: list[Definition], body: str) -> str:
    """`body` as the code of a library function called with (keys, argv), under library_top(defs): the call's
    KEYS and ARGV set for the helpers (flush_stats reads KEYS) and as the body's own locals (read faster than
    the library's: measured, `git show 8564d90:BENCHMARKS.md`), the lib's per-call state the body uses made afresh
    (`counts, runs = {}, {}`), then the body."""
    state = [d for d in _needed(defs, body) if _per_call(d)]
    upvalues = names_in(body) & frozenset().union(*(d.names for d in defs)) | {"KEYS", "ARGV"}
    upvalues |= frozenset().union(*(d.names for d in state))
    if len(upvalues) > MAX_UPVALUES - 1:  # (one kept for the tests' key guard)
        raise ValueError(f"a function reading {len(upvalues)} of the library's names: at most {MAX_UPVALUES - 1}")
    fresh = []
    for d in state:
        code = "".join(line for line in d.source.splitlines(keepends=True) if not line.startswith("--"))
        fresh.append(code.strip().removeprefix("local").lstrip() + "\n")
    return "KEYS, ARGV = keys, argv\nlocal KEYS, ARGV = keys, argv\n" + "".join(fresh) + body
