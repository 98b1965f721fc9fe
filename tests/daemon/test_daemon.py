"""The daemon as operators see it: real processes, real signals, real Redis."""
from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest
from daemon_helper import Daemon, delayd
from redis_server import wait_for

from delayd import Client

pytestmark = [pytest.mark.system, pytest.mark.daemon(buckets=2, queues=2)]


def record_task(client: Client, redis_url: str, i, **kw):
    params = {"list": "ran", "redis": redis_url, **kw.pop("params", {})}
    client.add("t", i, call=kw.pop("call", "delayd.examples:record"), params=params, **kw)


def test_titles_and_a_task_runs(daemon, client, r, redis_url):
    titles = sorted(" ".join(c.cmdline()).strip() for c in daemon.children())
    assert titles == ["delayd: bucket 0", "delayd: bucket 1", "delayd: queue 0", "delayd: queue 1"]
    assert " ".join(daemon.master.cmdline()).startswith("delayd: master")
    record_task(client, redis_url, 1)
    wait_for(lambda: r.lrange("ran", 0, -1) == ["t:1:1"], 10, message="task ran")
    wait_for(lambda: client.get("t", 1).status == "ok", 5, message="status ok")


@pytest.mark.parametrize("title", ["delayd: bucket 1", "delayd: queue 0"])
def test_killed_child_is_replaced(daemon, client, r, redis_url, title):
    old = daemon.child(title)
    old.kill()
    wait_for(lambda: [c for c in daemon.children() if " ".join(c.cmdline()).strip() == title
                      and c.pid != old.pid], 10, message=f"{title} replaced")
    record_task(client, redis_url, 2)
    wait_for(lambda: r.lrange("ran", 0, -1) == ["t:2:1"], 10, message="task ran after restart")
    assert "killed by SIGKILL" in daemon.log()


def test_no_zombies_after_many_restarts(daemon):
    # Quick deaths back off (1 s, then 2 s per slot), so every slot loses its child at once, twice:
    # the restarts' back-offs run side by side.
    titles = ["bucket 0", "bucket 1", "queue 0", "queue 1"]
    for _ in range(2):
        victims = {title: daemon.child(f"delayd: {title}") for title in titles}
        for victim in victims.values():
            victim.kill()
        wait_for(lambda: all([c for c in daemon.children(title) if c.pid != victim.pid]
                             for title, victim in victims.items()), 15, message="every slot's child replaced")
    kids = daemon.master.children()
    assert not [k for k in kids if k.status() == psutil.STATUS_ZOMBIE]
    assert len(daemon.children()) == 4


def test_status_exit_codes(daemon, tmp_path):
    out = delayd("status", env=daemon.env)
    assert "delayd: bucket 0" in out.stdout and "delayd: queue 1" in out.stdout
    out = delayd("status", "--json", env=daemon.env)
    state = json.loads(out.stdout)
    assert state["pid"] == daemon.proc.pid and len(state["processes"]) == 5
    other = {**daemon.env, "DELAYD_STATE_DIR": str(tmp_path / "nothing")}
    out = delayd("status", env=other, check=3)
    assert "not running" in out.stdout


def test_double_start_refused(daemon):
    out = delayd("start", "--foreground", env=daemon.env, timeout=30, check=1)
    assert "already running" in out.stderr and str(daemon.proc.pid) in out.stderr


def test_sigterm_lets_the_task_in_hand_finish(daemon, client, r, redis_url):
    client.add("t", "slow", call="delayd.examples:slow", params={"seconds": 1.5})
    wait_for(lambda: client.get("t", "slow").status == "running", 10, message="slow task running")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait(30) == 0
    assert client.get("t", "slow").status == "ok"
    assert not (daemon.state_dir / "delayd.pid").exists()
    assert daemon.children() == []


def test_stop_timeout_kills_a_hung_child(redis_url, tmp_path, client):
    d = Daemon(redis_url, tmp_path / "d", queues=1, DELAYD_GRACEFUL_TIMEOUT="1",
               DELAYD_TASK_TIMEOUT="60", DELAYD_LEASE="90").start()
    try:
        client.add("t", "hang", call="delayd.examples:slow", params={"seconds": 120})
        wait_for(lambda: client.get("t", "hang").status == "running", 10, message="hung task running")
        queue_pid = d.child("delayd: queue 0").pid
        started = time.monotonic()
        d.signal(signal.SIGTERM)
        assert d.wait(30) == 0
        assert time.monotonic() - started < 15
        assert not psutil.pid_exists(queue_pid) or psutil.Process(queue_pid).status() == psutil.STATUS_ZOMBIE
        assert "graceful timeout" in d.log() or "stop_timeout" in d.log()
    finally:
        d.stop()


def test_stale_pidfile_is_replaced(redis_url, tmp_path):
    state = tmp_path / "d"
    state.mkdir()
    (state / "delayd.pid").write_text(f"{os.getpid()}\n")  # a live pid that is not a delayd master
    with Daemon(redis_url, state) as d:
        assert (state / "delayd.pid").read_text().strip() == str(d.proc.pid)


def test_master_sigkill_leaves_no_orphans_and_start_works_again(redis_url, tmp_path):
    d = Daemon(redis_url, tmp_path / "d", buckets=2, queues=2).start()
    kids = d.children()
    d.master.kill()
    d.proc.wait(10)
    wait_for(lambda: not [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE], 5,
             message="children gone after master SIGKILL")
    with Daemon(redis_url, tmp_path / "d", buckets=2, queues=2) as again:
        assert len(again.children()) == 4


def test_sighup_replaces_children_and_tasks_keep_flowing(daemon, client, r, redis_url):
    before = {c.pid for c in daemon.children()}
    for i in range(20):
        record_task(client, redis_url, f"a{i}", delay=i * 0.05)
    daemon.signal(signal.SIGHUP)
    wait_for(lambda: len(daemon.children()) == 4 and not before & {c.pid for c in daemon.children()}, 20,
             message="all children replaced")
    for i in range(20):
        record_task(client, redis_url, f"b{i}")
    wait_for(lambda: r.llen("ran") >= 40, 20, message="all 40 tasks ran")
    assert len({x.rsplit(":", 1)[0] for x in r.lrange("ran", 0, -1)}) == 40


def test_ttin_ttou_resize_queues(daemon):
    daemon.signal(signal.SIGTTIN)
    wait_for(lambda: len(daemon.children("queue")) == 3, 10, message="a third queue process")
    assert daemon.child("delayd: queue 2")
    daemon.signal(signal.SIGTTOU)  # one at a time: the kernel merges pending signals
    wait_for(lambda: len(daemon.children("queue")) == 2, 15, message="back to two queue processes")
    daemon.signal(signal.SIGTTOU)
    wait_for(lambda: len(daemon.children("queue")) == 1, 15, message="one queue process left")


# A preload module that imports until the file FLAKY_PRELOAD_OFF names exists.
FLAKY_PRELOAD = """
import os
if os.path.exists(os.environ["FLAKY_PRELOAD_OFF"]):
    raise ImportError("flaky_preload is switched off")
"""


def test_crashing_child_backs_off_and_status_says_degraded(redis_url, tmp_path):
    """A queue process that crash-loops after the start: `status` exited 0 ("waiting to restart"),
    `status --json` had no field saying so, and the child's error was only in the log."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "flaky_preload.py").write_text(FLAKY_PRELOAD)
    off = tmp_path / "off"
    d = Daemon(redis_url, tmp_path / "d", queues=1, DELAYD_ALLOWED_MODULES="delayd.examples,flaky_preload",
               DELAYD_PRELOAD="flaky_preload", DELAYD_PYTHONPATH=str(lib), FLAKY_PRELOAD_OFF=str(off)).start()
    try:
        delayd("status", env=d.env)
        off.touch()
        d.child("delayd: queue 0").kill()
        wait_for(lambda: d.log().count("child_died") >= 3, 30, message="three quick deaths")
        deaths = [line for line in d.log().splitlines() if "child_died" in line]
        delays = [float(line.split("restart_in_s=")[1].split()[0]) for line in deaths]
        assert delays[:3] == [1.0, 2.0, 4.0]
        assert all("queue 0" in line for line in deaths)
        assert len(d.children("bucket")) == 2  # the others keep running
        out = delayd("status", env=d.env, check=1)
        assert "DEGRADED: queue 0 is down, waiting to restart" in out.stdout
        assert "ImportError: flaky_preload is switched off" in out.stdout
        state = json.loads(delayd("status", "--json", env=d.env, check=1).stdout)
        assert state["problems"] and state["problems"][0].startswith("queue 0 is down")
        queue = [c for c in state["children"] if c["name"] == "queue 0"][0]
        assert queue["pid"] is None and queue["restarts"] >= 3 and "switched off" in queue["last_error"]
        off.unlink()  # fixed: the next restart comes up, and status is well again
        wait_for(lambda: delayd("status", env=d.env, check=None).returncode == 0, 30,
                 message="status 0 once the queue is up")
    finally:
        d.stop()


@pytest.mark.parametrize("foreground", [False, True], ids=["daemonized", "foreground"])
def test_start_fails_when_a_queue_process_cannot_start(redis_url, tmp_path, foreground):
    """A preload module that cannot be imported: `start` said "delayd started" and exited 0 while
    every queue process crash-looped (the error only in the log)."""
    state = tmp_path / "s"
    env = {**os.environ, "DELAYD_REDIS_URL": redis_url, "DELAYD_STATE_DIR": str(state), "DELAYD_BUCKETS": "2",
           "DELAYD_QUEUES": "2", "DELAYD_ALLOWED_MODULES": "delayd.examples,nosuchmodule",
           "DELAYD_PRELOAD": "nosuchmodule.handlers"}
    out = delayd("start", *(["--foreground"] if foreground else []), env=env, check=1)
    assert "started" not in out.stdout
    # the last line of stderr is the reason (in the foreground the log goes to stderr too, before it)
    reason = out.stderr.strip().splitlines()[-1]
    assert reason.startswith("delayd: error: queue ") and " could not start: preload: cannot import module " \
        "'nosuchmodule.handlers': ModuleNotFoundError: No module named 'nosuchmodule'" in reason, out.stderr
    if not foreground:
        assert "Traceback" not in out.stderr
    delayd("status", env=env, check=3)
    assert not [p for p in psutil.process_iter(["environ", "status"]) if (p.info["environ"] or {}).get(
        "DELAYD_STATE_DIR") == str(state) and p.info["status"] != psutil.STATUS_ZOMBIE]


def test_hung_child_is_killed_and_replaced(redis_url, tmp_path):
    cfg = tmp_path / "delayd.toml"
    cfg.write_text("heartbeat_timeout = 2.0\n")
    d = Daemon(redis_url, tmp_path / "d", DELAYD_CONFIG=str(cfg)).start()
    try:
        victim = d.child("delayd: bucket 0")
        victim.suspend()  # SIGSTOP: alive, but its heartbeat stops
        wait_for(lambda: [c for c in d.children("bucket 0") if c.pid != victim.pid], 20,
                 message="hung bucket replaced")
        assert "child_hung" in d.log()
    finally:
        d.stop()


def test_daemonized_start_and_stop(redis_url, tmp_path, client, r):
    env = {**os.environ, "DELAYD_REDIS_URL": redis_url, "DELAYD_STATE_DIR": str(tmp_path / "bg"),
           "DELAYD_BUCKETS": "2", "DELAYD_QUEUES": "1"}
    out = delayd("start", env=env)
    assert "started" in out.stdout
    pid = int((tmp_path / "bg" / "delayd.pid").read_text())
    try:
        master = psutil.Process(pid)
        assert master.ppid() != os.getpid()  # detached
        wait_for(lambda: len(master.children()) == 3, 10, message="children of the daemon")
        record_task(client, redis_url, "bg")
        wait_for(lambda: r.lrange("ran", 0, -1) == ["t:bg:1"], 10, message="task ran")
        out = delayd("stop", env=env)
        assert "stopped" in out.stdout
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # exited
        assert "master_stopped" in (tmp_path / "bg" / "delayd.log").read_text()
        out = delayd("stop", env=env)
        assert "not running" in out.stdout
    finally:
        if psutil.pid_exists(pid):
            os.kill(pid, signal.SIGKILL)


def test_start_error_reaches_the_terminal(redis_url, tmp_path, r):
    r.hset("delayd:meta", "buckets", 7)
    env = {**os.environ, "DELAYD_REDIS_URL": redis_url, "DELAYD_STATE_DIR": str(tmp_path / "x"),
           "DELAYD_BUCKETS": "2"}
    out = delayd("start", env=env, check=1)
    assert "7 buckets" in out.stderr and "Traceback" not in out.stderr
    delayd("status", env=env, check=3)  # no daemon was left running for this state dir
    env["DELAYD_REDIS_URL"] = "redis://:hunter2@127.0.0.1:1/0"
    out = delayd("start", env=env, check=1)
    assert "127.0.0.1:1" in out.stderr and "hunter2" not in out.stderr


def test_lease_must_exceed_task_timeout(redis_url, tmp_path):
    env = {**os.environ, "DELAYD_REDIS_URL": redis_url, "DELAYD_STATE_DIR": str(tmp_path / "x"),
           "DELAYD_LEASE": "10", "DELAYD_TASK_TIMEOUT": "20"}
    out = delayd("start", "--foreground", env=env, check=1)
    assert "lease" in out.stderr
