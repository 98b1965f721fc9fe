"""The client packages as users install them, built fresh once per test process in a temporary
directory: delayd-client from its `npm pack` tarball beside ioredis in a new Node application,
delayd/client by Composer from a path repository (no symlink, Packagist off) in a new PHP one.
The tests that drive either client go through these installs, not through clients/."""
from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NODE_DIR = ROOT / "clients" / "node"
PHP_DIR = ROOT / "clients" / "php"


@functools.cache
def _scratch() -> Path:
    place = Path(tempfile.mkdtemp(prefix="delayd-packages-"))
    atexit.register(shutil.rmtree, place, ignore_errors=True)
    return place


def _run(args: list[str], cwd: Path, **env: str) -> None:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300, env={**os.environ, **env})
    assert proc.returncode == 0, f"{' '.join(args)} failed in {cwd}:\n{proc.stdout}\n{proc.stderr}"


def ioredis_version() -> str:
    """The ioredis the package's lock file pins (npm ci put it in npm's cache: installed offline when it is there)."""
    return json.loads((NODE_DIR / "package-lock.json").read_text())["packages"]["node_modules/ioredis"]["version"]


@functools.cache
def node_app() -> Path:
    """A new Node application with `npm install ioredis delayd-client-X.tgz` done (the tarball
    `npm pack` makes of clients/node) and the tests' driver (tests/node_driver.mjs) in it."""
    app = _scratch() / "node-app"
    app.mkdir()
    _run(["npm", "pack", "--silent", "--pack-destination", str(app)], NODE_DIR)
    tarball = next(app.glob("delayd-client-*.tgz"))
    (app / "package.json").write_text('{"name": "app", "private": true, "type": "module"}\n')
    _run(["npm", "install", "--prefer-offline", "--no-audit", "--no-fund", "--silent", f"./{tarball.name}",
          f"ioredis@{ioredis_version()}"], app)
    shutil.copy(ROOT / "tests" / "node_driver.mjs", app / "driver.mjs")
    return app


def need_composer() -> str:
    """composer; skips the test when it is missing (fails it under CI=true: ./scripts/test installs it)."""
    composer = shutil.which("composer")
    if composer is None:
        if os.environ.get("CI") == "true":
            pytest.fail("composer is missing (./scripts/test installs it): the PHP package cannot be tested")
        pytest.skip("composer is not installed (apt-get install composer)")
    return composer


@functools.cache
def php_app() -> Path:
    """A new PHP application with delayd/client installed by Composer as Packagist would deliver it
    (a path repository mirrored, not symlinked; Packagist disabled: nothing is fetched)."""
    composer = need_composer()
    app = _scratch() / "php-app"
    app.mkdir()
    (app / "composer.json").write_text(json.dumps({
        "name": "test/app", "require": {"delayd/client": "*"},
        "repositories": [{"type": "path", "url": str(PHP_DIR), "options": {"symlink": False}},
                         {"packagist.org": False}]}))
    _run([composer, "install", "--no-interaction", "--no-progress"], app, COMPOSER_HOME=str(_scratch() / "composer"))
    assert not (app / "vendor" / "delayd" / "client").is_symlink()
    return app
