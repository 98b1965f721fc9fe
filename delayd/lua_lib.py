"""The shared helpers of lua/_lib.lua, each script given only those it uses.

Redis runs a script's whole source on every call: the lib's ~25 closures and tables,
built and then collected again, cost ~1.7 us of a ~13 us add.lua call. The lib stays
one file of top-level definitions (`local function name` and `local a, b = ...`, each
with the comment lines just above it); a script's prelude is the definitions its body
names, and those that they name, transitively, in the lib's order (which is an order
Lua accepts: a local is defined before it is used).
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


def names_in(source: str) -> frozenset[str]:
    """The names `source` mentions outside comments and strings."""
    return frozenset(m.group(3) for m in _TOKEN.finditer(source) if m.group(3))


def definitions(lib: str) -> list[Definition]:
    """The lib's top-level definitions, in order (the header comment of the file is left out)."""
    lines = lib.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    starts: list[tuple[int, frozenset[str]]] = []
    for m in _DEFINITION.finditer(lib):
        line = lib.count("\n", 0, m.start())
        while line > 0 and lines[line - 1].startswith("--"):  # its comment goes with it
            line -= 1
        names = m.group(1) or m.group(2)
        starts.append((offsets[line], frozenset(n.strip() for n in names.split(","))))
    ends = [start for start, _ in starts[1:]] + [len(lib)]
    return [Definition(names, lib[start:end], names_in(lib[start:end]) - names)
            for (start, names), end in zip(starts, ends)]


def prelude(lib: str, script: str) -> str:
    """The definitions of `lib` that `script` uses, directly or through others, in lib order."""
    defs = definitions(lib)
    wanted = set(names_in(script))
    for d in reversed(defs):  # a definition uses only those above it
        if d.names & wanted:
            wanted |= d.uses
    return "".join(d.source for d in defs if d.names & wanted)
