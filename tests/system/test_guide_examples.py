"""The producer examples of the guide docs/guides/adding-tasks.md run as written against `./scripts/run`'s
daemon (its embedded Redis, on its socket only), from applications that installed the clients as the guide
says: the Python example, Node's install line and example, PHP's install lines and example, the HTTP one (blocks marked
`<!-- runnable: ... -->`, tests/docs_examples.py; the webhooks guide's Node receiver is run by
tests/targets/test_delivery.py)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from docs_examples import example
from node_helper import need_node
from packages_helper import NODE_DIR, ROOT, ioredis_version, need_composer
from php_helper import require_php
from redis_server import free_port, wait_for
from test_tour import VENV, clone, plain_env, with_group_gone

from delayd import Client

pytestmark = pytest.mark.system

@pytest.fixture(scope="module")
def scripts_run(tmp_path_factory):
    """./scripts/run --no-demo in a fresh clone (tests/system/test_tour.py's), its state in ./state,
    its Redis the embedded one: yields (clone, the environment of a shell there)."""
    base = tmp_path_factory.mktemp("run")
    place = clone(base)
    env = plain_env(base)
    with (base / "run.out").open("w") as stdout, (base / "run.err").open("w") as stderr:
        proc = subprocess.Popen([str(place / "scripts" / "run"), "--no-demo"], cwd=place, env=env, stdout=stdout,
                                stderr=stderr, start_new_session=True)
    try:
        status = [str(VENV / "bin" / "delayd"), "status", "--json"]
        state = {**env, "DELAYD_STATE_DIR": str(place / "state")}

        def up() -> bool:
            done = subprocess.run(status, env=state, capture_output=True, text=True, timeout=30)
            return done.returncode == 0 and json.loads(done.stdout)["redis"] == f"unix://{place}/state/redis.sock"
        wait_for(lambda: proc.poll() is not None or up(), 60, message="./scripts/run's daemon up")
        assert proc.poll() is None, (base / "run.err").read_text()
        yield place, env
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        finally:
            with_group_gone(proc.pid)


def store(place: Path) -> Client:
    """A client of the daemon's embedded Redis, every task of an earlier example removed."""
    client = Client.from_url(f"unix://{place}/state/redis.sock")
    for task in list(client.iter_tasks()):
        client.delete(task.topic, task.id, hard=True)
    return client


def run_in_shell(place: Path, env: dict, command: str, cwd: Path) -> subprocess.CompletedProcess:
    """`command` in `cwd` after the guide's `export REDIS_URL=...` line, run in the checkout."""
    script = f"cd {place} && {example('redis-url')} cd {cwd} && {command}"
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120)


def the_same_tasks_were_added(proc: subprocess.CompletedProcess, client: Client) -> None:
    """What the Python and Node examples (the same tasks) print and leave in the store."""
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "order:cancel" in proc.stdout and "give exactly one of call, url or push" in proc.stdout
    assert client.get("order:cancel", 42).status == "deleted"
    assert client.get("order:notify", 5).intervals == [0, 30, 60, 150] and client.count("mail:welcome") == 3


def test_the_python_example_works_as_written(scripts_run, tmp_path):
    place, env = scripts_run
    client = store(place)
    (tmp_path / "app.py").write_text(example("add-python"))
    proc = run_in_shell(place, env, f"{VENV / 'bin' / 'python'} app.py", tmp_path)
    assert not proc.stderr, proc.stderr
    the_same_tasks_were_added(proc, client)


def test_the_node_install_line_and_example_work_as_written(scripts_run, tmp_path):
    place, env = scripts_run
    need_node()
    client = store(place)
    install = example("node-install").strip()
    assert install == "npm install --install-links ioredis /path/to/delayd/clients/node"
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text('{"name": "app", "private": true, "type": "module"}\n')
    # (a fresh clone: the repository's folder, without the node_modules the tests installed in it)
    fresh = tmp_path / "delayd" / "clients" / "node"
    shutil.copytree(NODE_DIR, fresh, ignore=shutil.ignore_patterns("node_modules"))
    npm = {**os.environ, "npm_config_prefer_offline": "true"}  # (ioredis from npm's cache when it is there)
    done = subprocess.run(["bash", "-c", install.replace("/path/to/delayd", str(tmp_path / "delayd"))
                           .replace("ioredis ", f"ioredis@{ioredis_version()} ")], cwd=app, env=npm,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not (app / "node_modules" / "delayd-client").is_symlink()
    (app / "app.mjs").write_text(example("add-node"))
    proc = run_in_shell(place, env, f"{need_node()} app.mjs", app)
    the_same_tasks_were_added(proc, client)


def test_the_php_install_lines_and_example_work_as_written(scripts_run, tmp_path):
    """In a new, empty folder, as the guide says (Composer's network off: the path repository is all it needs)."""
    place, env = scripts_run
    require_php()
    need_composer()
    client = store(place)
    app = tmp_path / "app"
    app.mkdir()
    composer = {**os.environ, "COMPOSER_HOME": str(tmp_path / "composer"), "COMPOSER_DISABLE_NETWORK": "1"}
    done = subprocess.run(["bash", "-ec", example("php-install").replace("/path/to/delayd", str(ROOT))], cwd=app,
                          env=composer, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not (app / "vendor" / "delayd" / "client").is_symlink()
    (app / "example.php").write_text(example("add-php"))
    proc = run_in_shell(place, env, "php example.php", app)
    assert proc.returncode == 0 and not proc.stderr, (proc.stdout, proc.stderr)
    assert client.get("order:return", 1).status == "deleted"
    receipt = client.get("order:receipt", 2)
    assert receipt.intervals == [10] and not receipt.persistent
    assert client.get("order:notify", 5).params == {"content": "hello"}
    assert client.get("order:refund", 4).intervals == [0, 10, 20]


def test_the_http_example_works_as_written(scripts_run, tmp_path):
    place, env = scripts_run
    store(place)
    port = free_port()
    # Changed: the port (8470 may be taken here), and the web server waited for (a user types the next line later).
    ready = (f"delayd web --port {port} &\nfor _ in $(seq 300); do curl -s -o /dev/null "
             f"http://127.0.0.1:{port}/ && break; sleep 0.1; done\n")
    script = example("add-http").replace("delayd web &", ready, 1).replace("8470", str(port))
    shell = {**env, "DELAYD_STATE_DIR": str(place / "state"), "PATH": f"{VENV / 'bin'}{os.pathsep}{env['PATH']}"}
    with (tmp_path / "out").open("w") as stdout, (tmp_path / "err").open("w") as stderr:  # (files: `delayd web &`
        proc = subprocess.Popen(["bash", "-ec", script], cwd=place, env=shell, stdout=stdout,  # holds no pipe)
                                stderr=stderr, start_new_session=True)
    try:
        code = proc.wait(90)
    finally:
        with_group_gone(proc.pid)
    out = (tmp_path / "out").read_text()
    assert code == 0, (tmp_path / "err").read_text()
    assert '{"added":true}' in out and '{"added":2}' in out and '"key":"order:cancel:42"' in out, out
    assert '{"deleted":true,"claimed":false}' in out

