"""The client packages as shipped: the Lua scripts inside them are the very ones the Python client
sends (scripts/build-clients links them with delayd's one linker), its function library and the names it
calls it by too, and each package's version and protocol are delayd's."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import subprocess

import pytest
from node_helper import need_node
from packages_helper import NODE_DIR, PHP_DIR, ROOT, node_app, php_app
from php_helper import require_php

from delayd import __version__
from delayd.store.dialect import FUNCTIONS_SINCE, PROBE
from delayd.store.keys import LAYOUT, PROTOCOL
from delayd.store.scripts import LIBRARY, SCRIPTS

PACKAGES = [PHP_DIR, NODE_DIR]


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_each_shipped_script_is_what_the_python_client_sends(package):
    """A change to delayd/store/lua without ./scripts/build-clients would ship half-done."""
    shipped = {p.stem: p.read_bytes() for p in (package / "lua").glob("*.lua")}
    assert set(shipped) == {"add", "delete", "library"}
    for name in ("add", "delete"):
        assert hashlib.sha1(shipped[name]).hexdigest() == SCRIPTS[name].sha, f"{package.name}/lua/{name}.lua: run " \
                                                                             "./scripts/build-clients"


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_each_package_ships_the_function_library_python_loads_and_its_names(package):
    """Under FCALL (Redis >= 7, Valkey) a client loads and calls what Python does: nothing computed at run time."""
    assert (package / "lua" / "library.lua").read_text() == LIBRARY.code, "run ./scripts/build-clients"
    names = json.loads((package / "lua" / "library.json").read_text())
    assert names == {"library": LIBRARY.name, "since": list(FUNCTIONS_SINCE), "probe": PROBE,
                     "functions": {"add": SCRIPTS["add"].function, "delete": SCRIPTS["delete"].function}}


def test_every_file_the_build_writes_is_as_it_would_write_it():
    """Above all the table of fields (delayd/model/fields.py) as each client reads it (clients/node/src/fields.js,
    clients/php/src/Fields.php): a change to the table without ./scripts/build-clients would ship half-done."""
    build = importlib.util.spec_from_file_location("build_clients", ROOT / "scripts" / "build_clients.py")
    build_clients = importlib.util.module_from_spec(build)
    build.loader.exec_module(build_clients)
    for path, text in build_clients.wanted().items():
        assert path.read_text() == text, f"{path.relative_to(ROOT)}: run ./scripts/build-clients"


def test_no_linker_but_delayds_own():
    """The PHP and JavaScript ports of lua_lib are gone: the packages read shipped files, nothing else."""
    for path in [*PHP_DIR.rglob("*.php"), *(NODE_DIR / "src").rglob("*.js")]:
        text = path.read_text()
        assert "_lib.lua" not in text and "LUA_DIR" not in text and "lua_dir" not in text, path


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_each_package_has_delayds_version_and_states_its_protocol(package):
    manifest = json.loads((package / ("package.json" if package == NODE_DIR else "composer.json")).read_text())
    assert manifest["version"] == __version__
    stated = manifest["delayd"] if package == NODE_DIR else manifest["extra"]["delayd"]
    assert stated == {"protocol": PROTOCOL, "layout": LAYOUT}
    code = (package / ("src/version.js" if package == NODE_DIR else "src/Version.php")).read_text()
    assert re.search(rf"VERSION = '{re.escape(__version__)}';", code) and f"PROTOCOL = {PROTOCOL};" in code
    lock = json.loads((NODE_DIR / "package-lock.json").read_text())
    assert lock["version"] == lock["packages"][""]["version"] == __version__


@pytest.mark.system
def test_the_node_package_from_its_tarball_works_alone():
    """The tarball holds what the package needs (the `files` field) and reads nothing outside itself."""
    app = node_app()
    installed = app / "node_modules" / "delayd-client"
    assert not installed.is_symlink() and (installed / "lua" / "add.lua").is_file()
    assert not (installed / "node_modules").exists()
    probe = ("import { CLAIMED, Client, PROTOCOL, VERSION } from 'delayd-client'; import Redis from 'ioredis';"
             "import { library, script } from './node_modules/delayd-client/src/lua.js';"
             "new Client(new Redis({ lazyConnect: true }));"
             "console.log(VERSION, PROTOCOL, script('add').sha, library().functions.add, library().code.length,"
             " CLAIMED);")
    out = subprocess.run([need_node(), "--input-type=module", "-e", probe], cwd=app, capture_output=True, text=True,
                         timeout=30, check=True).stdout.split()
    assert out == [__version__, str(PROTOCOL), SCRIPTS["add"].sha, SCRIPTS["add"].function, str(len(LIBRARY.code)),
                   "claimed"]


@pytest.mark.system
def test_the_php_package_from_composer_works_alone(tmp_path):
    """vendor/ alone: the application's copy is moved away from any checkout before it is used."""
    require_php()
    app = tmp_path / "app"
    subprocess.run(["cp", "-a", str(php_app()), str(app)], check=True)
    assert not (app / "vendor" / "delayd" / "client").is_symlink()
    probe = ("require 'vendor/autoload.php'; echo Delayd\\Version::VERSION, ' ', Delayd\\Client::PROTOCOL, ' ',"
             " Delayd\\Lua::script('add')[1], ' ', Delayd\\Lua::library()['functions']['add'], ' ',"
             " strlen(Delayd\\Lua::library()['code']), ' ', Delayd\\Client::CLAIMED;")
    out = subprocess.run(["php", "-r", probe], cwd=app, capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.split() == [__version__, str(PROTOCOL), SCRIPTS["add"].sha, SCRIPTS["add"].function,
                                  str(len(LIBRARY.code.encode())), "claimed"] and not out.stderr
    assert str(ROOT) not in (app / "vendor" / "composer" / "autoload_psr4.php").read_text()


@pytest.mark.system
def test_without_composer_autoload_php_loads_the_same_classes(tmp_path):
    """`require '/path/to/delayd/clients/php/autoload.php'` (no Composer), from anywhere."""
    require_php()
    probe = (f"require {str(PHP_DIR / 'autoload.php')!r}; echo Delayd\\Version::VERSION, ' ',"
             " Delayd\\Lua::script('delete')[1];")
    out = subprocess.run(["php", "-r", probe], cwd=tmp_path, capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.split() == [__version__, SCRIPTS["delete"].sha] and not out.stderr


@pytest.mark.system
def test_the_installed_type_declarations_name_what_the_package_exports():
    """The .d.ts in the tarball (package.json `types`) declares exactly the values the module exports."""
    app = node_app()
    installed = app / "node_modules" / "delayd-client"
    declared = (installed / json.loads((installed / "package.json").read_text())["types"]).read_text()
    values = set(re.findall(r"^export (?:declare )?(?:class|function|const) (\w+)", declared, re.M))
    probe = "const m = await import('delayd-client'); console.log(JSON.stringify(Object.keys(m)));"
    out = subprocess.run([need_node(), "--input-type=module", "-e", probe], cwd=app, capture_output=True, text=True,
                         timeout=30, check=True).stdout
    assert values == set(json.loads(out))
