"""What scripts/build-clients writes into clients/php and clients/node: the scripts each client calls,
linked exactly as the Python client sends them (delayd.store.scripts), and the version files."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from delayd import __version__
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
    return {**lua_files(ROOT / "clients/php"), **lua_files(ROOT / "clients/node"), **version_files(), **manifests()}


def main() -> int:
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
