"""What scripts/build-clients writes: into clients/php and clients/node the scripts each client calls, linked
exactly as the Python client sends them (delayd.store.scripts), the version files and the table of task fields
as each client reads it; the table's part of the add script's gate (delayd/store/lua/_fields.lua) and
docs/openapi.json's task schemas."""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from delayd import __version__
from delayd.model import api_schemas
from delayd.model.fields import ARGUMENTS, FIELDS, SHOWN, SPEC, TARGET, Check, text_pattern
from delayd.store import lua_fields
from delayd.store.dialect import FUNCTIONS_SINCE, PROBE
from delayd.store.keys import LAYOUT, PROTOCOL
from delayd.store.scripts import LIBRARY, SCRIPTS

ROOT = Path(__file__).resolve().parent.parent
CLIENT_SCRIPTS = ("add", "delete")  # what a producer calls (docs/protocol.md)
HEADER = "Written by scripts/build-clients from delayd/version.py and delayd/store/keys.py: do not edit."


def lua_files(package: Path) -> dict[Path, str]:
    """What a package calls: lua/NAME.lua, the linked scripts, the very source (and SHA1) Python sends with
    EVALSHA (Redis 6.2); lua/library.lua, delayd's function library as Python loads it (FUNCTION LOAD, Redis >= 7
    and Valkey); lua/library.json, the names Python calls it by and how it tells a server with functions."""
    names = {"library": LIBRARY.name, "functions": {name: SCRIPTS[name].function for name in CLIENT_SCRIPTS},
             "since": list(FUNCTIONS_SINCE), "probe": PROBE}
    return {**{package / "lua" / f"{name}.lua": SCRIPTS[name].source for name in CLIENT_SCRIPTS},
            package / "lua" / "library.lua": LIBRARY.code,
            package / "lua" / "library.json": json.dumps(names, indent=2) + "\n"}


def version_files() -> dict[Path, str]:
    """Each package's version and the protocol and layout it speaks, as code."""
    node = (f"// {HEADER}\nexport const VERSION = '{__version__}';\nexport const PROTOCOL = {PROTOCOL};\n"
            f"export const LAYOUT = {LAYOUT};\n")
    php = (f"<?php\n// {HEADER}\ndeclare(strict_types=1);\n\nnamespace Delayd;\n\nfinal class Version\n{{\n"
           f"    public const VERSION = '{__version__}';\n    public const PROTOCOL = {PROTOCOL};\n"
           f"    public const LAYOUT = {LAYOUT};\n}}\n")
    return {ROOT / "clients/node/src/version.js": node, ROOT / "clients/php/src/Version.php": php}


FIELDS_HEADER = "Written by scripts/build-clients from delayd/model/fields.py (the table of task fields): do not edit."
_UNSET = Check("")


def _check(check: Check, requires: tuple[str, ...], alone: str) -> dict[str, Any]:
    """A field's check as the clients read it: its kind (a target is text of a pattern, text is its pattern),
    and what differs from a check's defaults, in camelCase."""
    kind = "text" if check.kind == "target" else check.kind
    out: dict[str, Any] = {"kind": kind}
    if kind == "text":
        out["pattern"] = TARGET if check.kind == "target" else text_pattern(check)
    for name, value in vars(check).items():
        if name not in ("kind", "chars", *(("pattern", "low", "high") if kind == "text" else ())) \
                and value != getattr(_UNSET, name):
            out[re.sub(r"_(\w)", lambda m: m[1].upper(), name)] = list(value) if isinstance(value, tuple) else value
    return {**out, **({"requires": list(requires), "alone": alone} if requires else {})}


def field_tables() -> dict[str, Any]:
    """The table of fields as the clients read it."""
    return {
        "CHECKS": {f.name: _check(f.check, f.requires, f.alone) for f in FIELDS if f.check},
        "ARGUMENTS": {f.name: f.default if isinstance(f.default, (str, int, bool)) else None for f in ARGUMENTS},
        "SPEC": [[f.name, "set" if f.name == "params" else f.written,
                  list(f.omit) if f.written in ("changed", "with-url") and f.name != "params" else []] for f in SPEC],
        "SHOWN": {f.name: f.default for f in SHOWN},
    }


FIELDS_DOC = ("CHECKS: each add argument's check (its kind; text: its pattern, refused with its message; refused "
              "unless a field it requires is given, saying `alone`), by name.",
              "ARGUMENTS: a task's own add arguments, in the order they are checked, each with its default.",
              "SPEC: [field, when it is written, the values it is not written for], in the spec's order (params: their "
              "JSON, or null).", "SHOWN: what get shows, each with its default.")


def _php(value: Any) -> str:
    """`value` (JSON's kinds) as a PHP literal."""
    if isinstance(value, dict):
        return "[" + ", ".join(f"{_php(k)} => {_php(v)}" for k, v in value.items()) + "]"
    if isinstance(value, list):
        return "[" + ", ".join(_php(v) for v in value) + "]"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return json.dumps(value)


def _lines(value: Any, item: Any, key: Any, indent: str, step: str, brackets: str = "[]") -> str:
    """A table's literal with one item a line (`item` writes an item, `key` a key)."""
    if isinstance(value, dict):
        items = [f"{indent}{step}{key(k)}{item(v)},\n" for k, v in value.items()]
    else:
        items = [f"{indent}{step}{item(v)},\n" for v in value]
    return f"{brackets[0]}\n" + "".join(items) + f"{indent}{brackets[1]}"


def field_files() -> dict[Path, str]:
    """clients/node/src/fields.js and clients/php/src/Fields.php: the table of fields as each client reads it."""
    tables = field_tables()
    compact = lambda v: json.dumps(v, separators=(", ", ": "))  # noqa: E731
    node = "".join(f"// {line}\n" for line in (FIELDS_HEADER, *FIELDS_DOC)) + "".join(
        f"export const {name} = "
        f"{_lines(value, compact, lambda k: f'{compact(k)}: ', '', '  ', '{}' if isinstance(value, dict) else '[]')};\n"
        for name, value in tables.items())
    php = (f"<?php\n// {FIELDS_HEADER}\ndeclare(strict_types=1);\n\nnamespace Delayd;\n\n"
           + "".join(f"// {line}\n" for line in FIELDS_DOC) + "final class Fields\n{\n"
           + "".join(f"    public const {name} = {_lines(value, _php, lambda k: f'{_php(k)} => ', '    ', '    ')};\n"
                     for name, value in tables.items()) + "}\n")
    return {ROOT / "clients/node/src/fields.js": node, ROOT / "clients/php/src/Fields.php": php}


OPENAPI = ROOT / "delayd/web/openapi.json"  # (docs/openapi.json links to it)


def openapi_file() -> dict[Path, str]:
    """docs/openapi.json with its task schemas' properties made from the table of fields: TaskInput's (each add
    argument's schema and its doc) and Task's (what get shows), and the components they refer to (what a kind
    of value may be: delayd.model.api_schemas); the rules between fields are the document's own."""
    doc = json.loads(OPENAPI.read_text())
    schemas = doc["components"]["schemas"]
    schemas.update(api_schemas.components())
    schemas["TaskInput"]["properties"] = {f.name: {**f.schema, "description": f.doc} for f in FIELDS
                                          if f.schema is not None}
    schemas["Task"]["properties"] = {f.name: f.output for f in SHOWN}
    return {OPENAPI: json.dumps(doc, indent=2) + "\n"}


def manifests() -> dict[Path, str]:
    """package.json, its lock file and composer.json with the version and protocol stamped in."""
    out = {}
    for path, stamp in ((ROOT / "clients/node/package.json", _stamp_npm),
                        (ROOT / "clients/node/package-lock.json", _stamp_lock),
                        (ROOT / "clients/php/composer.json", _stamp_composer)):
        data = json.loads(path.read_text())
        stamp(data)
        out[path] = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    return out


def _stamp_npm(data: dict) -> None:
    data["version"] = __version__
    data["delayd"] = {"protocol": PROTOCOL, "layout": LAYOUT}


def _stamp_lock(data: dict) -> None:
    data["version"] = data["packages"][""]["version"] = __version__


def _stamp_composer(data: dict) -> None:
    data["version"] = __version__
    data.setdefault("extra", {})["delayd"] = {"protocol": PROTOCOL, "layout": LAYOUT}


def wanted() -> dict[Path, str]:
    """Every file the build writes, with its content."""
    return {ROOT / "delayd/store/lua" / lua_fields.FILE: lua_fields.source(), **lua_files(ROOT / "clients/php"),
            **lua_files(ROOT / "clients/node"), **version_files(), **manifests(), **field_files(), **openapi_file()}


def main() -> int:
    made = ROOT / "delayd/store/lua" / lua_fields.FILE  # (first: the scripts below are linked with it)
    if made.read_text() != lua_fields.source():
        made.write_text(lua_fields.source())
        print(f"wrote {made.relative_to(ROOT)}")
        os.execv(sys.executable, [sys.executable, *sys.argv])  # (the linker read the file before it changed)
    for path, text in wanted().items():
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    for package in (ROOT / "clients/php", ROOT / "clients/node"):  # a script no client calls any more
        for stale in set((package / "lua").glob("*.*")) - set(lua_files(package)):
            stale.unlink()
            print(f"removed {stale.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
