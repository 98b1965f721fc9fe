"""`delayd reload` (SIGHUP): the start's flags and environment are kept, a changed file takes
effect, an invalid one leaves the old config running."""
from __future__ import annotations

import json
import os
import re
import select
import signal

import pytest
from daemon_helper import Daemon, delayd
from redis_server import RedisServer, free_port, wait_for
from test_observability import scrape

from delayd import Client
from delayd.store.registry import live

pytestmark = pytest.mark.system


def replaced_all(d: Daemon, before: set[int], count: int) -> bool:
    now = {c.pid for c in d.children()}
    return len(now) == count and not before & now


def test_reload_keeps_the_flags_of_the_start(redis_url, tmp_path, r):
    d = Daemon(redis_url, tmp_path / "d", buckets=1, queues=1, args=("--redis", redis_url, "--prefix", "other:"))
    del d.env["DELAYD_REDIS_URL"]  # only the flag says which Redis
    d.start()
    try:
        before = {c.pid for c in d.children()}
        delayd("reload", "--prefix", "other:", env=d.env)
        wait_for(lambda: replaced_all(d, before, 2), 30, message="children replaced")
        client = Client.from_url(redis_url, prefix="other:")
        client.add("t", 1, call="delayd.examples:record", params={"list": "ran", "redis": redis_url})
        wait_for(lambda: r.lrange("ran", 0, -1) == ["t:1:1"], 20, message="a task ran after the reload")
        client.close()
        assert "reload_failed" not in d.log() and "child_died" not in d.log()
    finally:
        d.stop()


def test_reload_applies_a_changed_file_and_keeps_the_old_one_when_invalid(redis_url, tmp_path):
    path = tmp_path / "delayd.toml"
    path.write_text("queues = 1\nconcurrency = 8\n")
    d = Daemon(redis_url, tmp_path / "d", buckets=1, queues=1, DELAYD_CONFIG=str(path))
    del d.env["DELAYD_QUEUES"]  # the file decides
    d.start()
    try:
        path.write_text("queues = 2\nconcurrency = 4\n")
        d.signal(signal.SIGHUP)
        wait_for(lambda: len(d.children("queue")) == 2, 30, message="the second queue of the new file")

        def concurrency() -> int | None:
            daemons = json.loads(delayd("status", "--cluster", "--json", env=d.env, check=None).stdout)["daemons"]
            return daemons[0]["concurrency"] if daemons else None
        wait_for(lambda: concurrency() == 4, 30, message="the new concurrency in the registry")

        for bad in (b"queues = [\n", b"queues = 3\nname = \"\xff\"\n", b"queues = 0\n"):
            path.write_bytes(bad)
            before = {c.pid for c in d.children()}
            failures = d.log().count("reload_failed")
            d.signal(signal.SIGHUP)
            wait_for(lambda: d.log().count("reload_failed") == failures + 1, 20, message=f"reload of {bad!r} refused")
            assert {c.pid for c in d.children()} == before and d.proc.poll() is None
        assert "master_crashed" not in d.log()
    finally:
        d.stop()


def test_reload_reports_what_the_master_refused(redis_url, tmp_path):
    """`delayd reload` said "reload requested" and exited 0 whatever happened; the error was only in
    the log. Now it waits for the master's outcome: a config the CLI cannot read is refused before
    any signal, one the master refuses (or whose new children do not come up) exits 1 with why."""
    path = tmp_path / "delayd.toml"
    path.write_text("queues = 1\n")
    d = Daemon(redis_url, tmp_path / "d", buckets=1, queues=1, DELAYD_CONFIG=str(path))
    del d.env["DELAYD_QUEUES"], d.env["DELAYD_ALLOWED_MODULES"]  # the file decides
    d.start()
    try:
        path.write_text("queues = [\n")  # the CLI reads it too: refused before the master is signalled
        out = delayd("reload", env=d.env, check=1)
        assert "is not valid TOML" in out.stderr, (out.stdout, out.stderr)
        assert "reload_failed" not in d.log()

        path.write_text("prefix = \"other:\"\n")  # valid, but the master refuses it
        out = delayd("reload", env=d.env, check=1)
        assert out.stderr.strip() == ("delayd: error: reload failed: buckets and prefix cannot change on reload; "
                                      "restart instead; the old config keeps running")

        # A config whose new children do not come up is undone: the old children were never told
        # to stop, and go on with the old config (a task still runs); the new ones are gone.
        before = {c.pid for c in d.children()}
        path.write_text('queues = 2\nallowed_modules = ["delayd.examples", "nosuchmodule"]\n'
                        'preload = ["nosuchmodule"]\n')
        out = delayd("reload", env=d.env, check=1)
        # (either new queue child may be the first to report)
        assert re.match(r"delayd: error: reload failed: queue [01] could not start: preload: cannot "
                        r"import module 'nosuchmodule'", out.stderr), out.stderr
        assert out.stderr.rstrip().endswith("; the old config keeps running"), out.stderr
        wait_for(lambda: {c.pid for c in d.children()} == before, 30, message="only the old children are left")
        delayd("status", env=d.env)
        client = Client.from_url(d.env["DELAYD_REDIS_URL"])
        client.add("t", 1, call="delayd.examples:record", params={"list": "ran", "redis": d.env["DELAYD_REDIS_URL"]})
        wait_for(lambda: client.get("t", 1).status == "ok", 20, message="a task ran with the old config")
        client.close()

        path.write_text("queues = 2\n")  # a good one then replaces every child
        out = delayd("reload", env=d.env)
        assert out.stdout.startswith("reloaded (pid"), (out.stdout, out.stderr)
        # the old children were told to stop: they may still be finishing when reload returns
        wait_for(lambda: len(d.children("queue")) == 2 and not before & {c.pid for c in d.children()}, 30,
                 message="only the new children are left")
        delayd("status", env=d.env)
    finally:
        d.stop()


def test_the_master_wakes_a_waiting_reload_on_the_embedded_redis_and_removes_a_dead_waiter(tmp_path):
    """`delayd reload` looked at status.json every 50 ms until the outcome came; now it waits on a FIFO
    in the state directory that the master writes to once the outcome is recorded (reload_wait). Seen
    here from outside, as the CLI's end: a FIFO nobody reads (its CLI was killed) is removed, and the
    CLI on the embedded Redis reports the outcome."""
    d = Daemon(None, tmp_path / "d", buckets=1, queues=1).start()
    try:
        dead = d.state_dir / "reload-1.wait"
        os.mkfifo(dead)
        waiting = d.state_dir / "reload-2.wait"
        os.mkfifo(waiting)
        fd = os.open(waiting, os.O_RDWR | os.O_NONBLOCK)
        try:
            d.signal(signal.SIGHUP)
            assert select.select([fd], [], [], 30)[0], "the master did not write to the waiting FIFO"
            assert json.loads((d.state_dir / "status.json").read_text())["reloads"] == 1
        finally:
            os.close(fd)
        wait_for(lambda: not dead.exists(), 10, message="the FIFO without a reader removed")
        out = delayd("reload", env=d.env)
        assert out.stdout.startswith("reloaded (pid"), (out.stdout, out.stderr)
        assert json.loads((d.state_dir / "status.json").read_text())["reloads"] == 2
        assert not list(d.state_dir.glob("reload-*"))  # the CLI's own removed, the test's (now closed) too
    finally:
        d.stop()


def registered(env: dict, prefix: str) -> dict | None:
    """The one live daemon's registry entry under `prefix` (None: none yet)."""
    out = delayd("status", "--cluster", "--json", "--prefix", prefix, env=env, check=None)
    daemons = json.loads(out.stdout)["daemons"] if out.stdout else []
    return daemons[0] if len(daemons) == 1 else None


def test_a_background_start_with_a_relative_config_reloads_and_restarts_on_it(redis_url, tmp_path):
    """`cd app && delayd start -c delayd.toml && delayd reload` failed ("cannot read config file
    delayd.toml": the daemonized master works in its state directory, a relative one too), and
    `delayd restart` without -c started on the defaults. Now both use the start's file, flags,
    variables and directory; restart's own -c, flags and variables win."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "delayd.toml").write_text("buckets = 1\nqueues = 1\nconcurrency = 3\n")
    (app / "other.toml").write_text("buckets = 1\nqueues = 1\nconcurrency = 5\n")
    shell = {**os.environ, "DELAYD_REDIS_URL": redis_url, "DELAYD_STATE_DIR": "state",
             "DELAYD_GRACEFUL_TIMEOUT": "5"}
    started = delayd("start", "-c", "delayd.toml", "--prefix", "app:", env=shell, cwd=app, DELAYD_NAME="app")
    try:
        assert started.stdout.startswith("delayd started"), started.stderr
        assert (app / "state" / "delayd.pid").exists()
        wait_for(lambda: registered(shell, "app:"), 30, message="the daemon in the registry")
        out = delayd("reload", env=shell, cwd=app, check=None)
        assert out.returncode == 0 and out.stdout.startswith("reloaded (pid"), (out.stdout, out.stderr)

        out = delayd("restart", env=shell, cwd=app, check=None)  # no -c, no --prefix, no DELAYD_NAME
        assert out.returncode == 0 and "delayd started" in out.stdout, (out.stdout, out.stderr)
        entry = wait_for(lambda: registered(shell, "app:"), 30, message="the restarted daemon in the registry")
        assert (entry["concurrency"], entry["name"]) == (3, "app")
        out = delayd("reload", env=shell, cwd=app, check=None)
        assert out.returncode == 0, (out.stdout, out.stderr)

        out = delayd("restart", "-c", "other.toml", env=shell, cwd=app, check=None, DELAYD_NAME="again")
        assert out.returncode == 0, (out.stdout, out.stderr)
        entry = wait_for(lambda: registered(shell, "app:"), 30, message="the daemon of other.toml")
        assert (entry["concurrency"], entry["name"]) == (5, "again")
    finally:
        delayd("stop", env=shell, cwd=app, check=None)
        pid = app / "state" / "delayd.pid"
        if pid.exists() and delayd("status", env=shell, cwd=app, check=None).returncode != 3:
            os.kill(int(pid.read_text()), signal.SIGKILL)


def test_the_registry_and_the_metrics_follow_a_reload_to_another_redis(redis_url, r, tmp_path):
    """The master's registry thread and /metrics kept the start's Redis after a reload that moved the
    daemon to another one (or changed its password): the entry stayed on the old store, and the
    scrapes counted its tasks, while the new children worked on the new one."""
    port = free_port()
    path = tmp_path / "delayd.toml"
    path.write_text(f'redis_url = "{redis_url}"\nbuckets = 1\nqueues = 1\nmetrics_port = {port}\n')
    with RedisServer(str(tmp_path / "other"), password="new-pw") as other:
        d = Daemon(redis_url, tmp_path / "d", buckets=1, queues=1, DELAYD_CONFIG=str(path))
        for name in ("DELAYD_REDIS_URL", "DELAYD_BUCKETS", "DELAYD_QUEUES"):  # the file decides
            del d.env[name]
        d.start(wait=False)
        try:
            wait_for(d.ready, 30, message="the daemon up")
            Client.from_url(other.url).add("moved", 1, call="delayd.examples:noop", delay=600)
            path.write_text(f'redis_url = "{other.url}"\nbuckets = 1\nqueues = 1\nmetrics_port = {port}\n')
            out = delayd("reload", env=d.env, check=None)
            assert out.returncode == 0, (out.stdout, out.stderr)
            theirs = other.client()
            wait_for(lambda: live(theirs, "delayd:"), 15, message="the daemon's entry in the new Redis")
            text = scrape(port)
            assert 'topic="moved"' in text and "delayd_redis_up 1.0" in text, text
            theirs.close()
        finally:
            d.stop()
