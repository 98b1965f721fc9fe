"""Getting started as the documentation says: the README's tour and the getting-started guide's (blocks
marked `<!-- runnable: ... -->`, tests/docs_examples.py) run line by line in a copy of the checkout, and
./scripts/run beside a daemon already running or a store holding a user's tasks."""
from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from daemon_helper import ROOT, Daemon
from docs_examples import example
from redis_server import free_port, wait_for

pytestmark = pytest.mark.system

VENV = ROOT / ".venv"


def clone(tmp_path: Path) -> Path:
    """A directory that is a fresh clone as far as the tour goes: this checkout's scripts and
    setup.cfg, and its .venv, which scripts/_venv.sh finds installed (nothing is installed again)."""
    made = [stamp for stamp in VENV.glob(".delayd-installed*")
            if stamp.stat().st_mtime >= (ROOT / "setup.cfg").stat().st_mtime]
    if not made:
        pytest.skip("the checkout's .venv was not made by scripts/_venv.sh (./scripts/test makes it)")
    place = tmp_path / "clone"
    place.mkdir()
    for name in ("scripts", "setup.cfg", ".venv"):
        (place / name).symlink_to(ROOT / name)
    return place


def plain_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a new shell: no DELAYD_* variable, no venv on PATH, a home of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELAYD_") and k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if Path(p).resolve() != VENV / "bin")
    env["HOME"] = str(tmp_path / "home")
    return {**env, **extra}


@pytest.mark.parametrize("lines", [example("readme-tour"), example("tour")], ids=["readme", "getting-started"])
def test_the_tour_works_as_written(lines, tmp_path):
    """The tour ran `delayd start` before `export DELAYD_STATE_DIR=...` (status then said "not
    running"), used a tasks.jsonl it never made and a URL nothing answers."""
    assert "delayd web &" in lines and "\n. .venv/bin/activate" in lines
    place = clone(tmp_path)
    # Only change: the dashboard's port, as 8470 may be taken on the machine running the tests.
    script = "set -eE\ntrap 'echo \"tour failed at: $BASH_COMMAND\" >&2' ERR\n" + lines.replace(
        "delayd web &", f"delayd web --port {free_port()} &")
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("w") as stdout, err.open("w") as stderr:  # files: a stray background job holds no pipe
        proc = subprocess.Popen(["bash", "-c", script], cwd=place, env=plain_env(tmp_path), stdout=stdout,
                                stderr=stderr, start_new_session=True)
    try:
        code = proc.wait(120)
        stdout, stderr = out.read_text(), err.read_text()
        assert code == 0, (stdout, stderr)
        assert "Traceback" not in stderr and "error" not in stderr and "warning" not in stderr, stderr
        assert "delayd started (pid" in stdout and "delayd is running (pid" in stdout
        got = next(line for line in stdout.splitlines() if line.startswith("{"))  # get order:cancel 42 --json
        assert json.loads(got)["key"] == "order:cancel:42"
        assert "paused order:notify" in stdout and "report:daily:1 is due now" in stdout
        assert "added 1 task" in stdout or "--from" not in lines
        assert stdout.rstrip().splitlines()[-1].startswith("delayd stopped (pid")
        assert (place / "state" / "delayd.log").exists()  # the state directory the tour exported
    finally:
        subprocess.run([str(VENV / "bin" / "delayd"), "stop", "--timeout", "30"], capture_output=True,
                       env=plain_env(tmp_path, DELAYD_STATE_DIR=str(place / "state")), timeout=60)
        with_group_gone(proc.pid)


def with_group_gone(pgid: int) -> None:
    """SIGKILL whatever is left of a process group (a background job of a script that failed)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_script(tmp_path: Path, redis_url: str, state: Path) -> subprocess.Popen:
    """./scripts/run with its output in files (run.out, run.err), in a process group of its own."""
    env = plain_env(tmp_path, DELAYD_STATE_DIR=str(state), DELAYD_REDIS_URL=redis_url, DELAYD_BUCKETS="1",
                    DELAYD_QUEUES="1")
    with (tmp_path / "run.out").open("w") as stdout, (tmp_path / "run.err").open("w") as stderr:
        return subprocess.Popen([str(ROOT / "scripts" / "run")], env=env, stdout=stdout, stderr=stderr,
                                start_new_session=True)


def test_scripts_run_beside_a_running_daemon_writes_nothing(redis_url, client, r, tmp_path):
    """A second ./scripts/run re-added the demo's order:cancel 42 with a 2 s delay over the user's
    1,800 s one (the start failed, but `status` saw the other daemon), then exited 1."""
    r.hset("delayd:meta", "buckets", 1)  # the daemons' layout, before the client first uses the store
    client.add("order:cancel", 42, call="delayd.examples:cancel_order", delay=1800)
    before = client.get("order:cancel", 42)
    with Daemon(redis_url, tmp_path / "state", buckets=1, queues=1):
        proc = run_script(tmp_path, redis_url, tmp_path / "state")
        try:
            assert proc.wait(60) == 1
        finally:
            with_group_gone(proc.pid)
        assert [task.key for task in client.iter_tasks()] == ["order:cancel:42"]
        assert client.get("order:cancel", 42).due_at == before.due_at
        err = (tmp_path / "run.err").read_text()
        assert f"delayd is already running on {tmp_path / 'state'}" in err and "no demo task added" in err


def test_scripts_run_demo_tasks_never_replace_a_users_task(redis_url, client, r, tmp_path):
    r.hset("delayd:meta", "buckets", 1)
    client.add("order:cancel", 42, call="delayd.examples:cancel_order", delay=1800)
    client.add("demo:later", 1, call="delayd.examples:echo", delay=3600)  # one of the demo's own names
    before = {key: client.get(*key).due_at for key in (("order:cancel", 42), ("demo:later", 1))}
    proc = run_script(tmp_path, redis_url, tmp_path / "state")
    try:
        wait_for(lambda: "--- try:" in (tmp_path / "run.out").read_text() or proc.poll() is not None, 60,
                 message="the demo tasks added")
        out = (tmp_path / "run.out").read_text()
        assert "added demo:cancel:42" in out and "exists demo:later:1 (nothing changed)" in out, out
        assert {key: client.get(*key).due_at for key in before} == before
        proc.send_signal(signal.SIGTERM)  # what Ctrl-C does: the daemon stops gracefully
        proc.wait(60)
        assert not (tmp_path / "state" / "delayd.pid").exists()  # stopped, pidfile removed
    finally:
        with_group_gone(proc.pid)
