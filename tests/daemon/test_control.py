"""The master as `delayd stop/status/start` and signals see it: real processes, real Redis."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest
from daemon_helper import DELAYD, Daemon, delayd
from redis_server import RedisServer, free_port, wait_for

pytestmark = pytest.mark.system


def test_stop_returns_when_the_master_exited_even_unreaped(redis_url, tmp_path):
    # The harness (Popen) does not reap the master: it stays a zombie after it exits.
    d = Daemon(redis_url, tmp_path / "d").start()
    try:
        out = delayd("stop", "--timeout", "20", env=d.env)
        assert "stopped" in out.stdout
        assert psutil.Process(d.proc.pid).status() == psutil.STATUS_ZOMBIE  # nobody reaped it yet
        out = delayd("status", env=d.env, check=3)
        assert "not running" in out.stdout
        out = delayd("restart", "--timeout", "20", env=d.env)  # nothing to stop, then a daemonized start
        assert "started" in out.stdout, out.stderr
        out = delayd("stop", "--timeout", "20", env=d.env)
        assert "stopped" in out.stdout, out.stderr
    finally:
        d.stop()


def test_status_while_the_lock_is_held_before_the_pidfile_says_starting(redis_url, tmp_path):
    """A master holds the lock from before its start-up checks, but writes its pidfile only after
    them: in between, status said "not running" (exit 3), which is what scripts wait on to start one."""
    import fcntl
    import json

    state = tmp_path / "state"
    state.mkdir()
    env = {**os.environ, "DELAYD_STATE_DIR": str(state)}
    (state / "delayd.pid").write_text(f"{os.getpid()}\n")  # stale: not a master's pid
    fd = os.open(state / "delayd.pid.lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # what PidFile.acquire does
        out = delayd("status", env=env, check=4)
        assert out.stdout.startswith("delayd is starting"), out.stdout
        out = delayd("status", "--json", env=env, check=4)
        assert json.loads(out.stdout) == {"running": False, "starting": True}
    finally:
        os.close(fd)
    out = delayd("status", env=env, check=3)
    assert "not running" in out.stdout


def blocked_on_a_lock(pid: int) -> bool:
    """Whether process `pid` waits for a flock (a `->` line of /proc/locks)."""
    with open("/proc/locks") as fh:
        return any(line.split()[1] == "->" and line.split()[5] == str(pid) for line in fh)


def test_not_running_says_where_it_looked(tmp_path):
    """A DELAYD_STATE_DIR set after `delayd start` (or not set for it) made status and stop say only
    "not running" while the daemon ran under another state directory."""
    import json

    env = {**os.environ, "DELAYD_STATE_DIR": str(tmp_path / "elsewhere")}
    where = f"(state directory {tmp_path / 'elsewhere'})"
    status, stop = delayd("status", env=env, check=3), delayd("stop", env=env)
    assert status.stdout.strip() == f"delayd is not running {where}"
    assert stop.stdout.strip() == f"delayd is not running {where}"
    out = delayd("status", "--json", env=env, check=3)
    assert json.loads(out.stdout) == {"running": False, "state_dir": str(tmp_path / "elsewhere")}
    out = delayd("status", env=env, check=3, DELAYD_PIDFILE=str(tmp_path / "p.pid"))
    assert out.stdout.strip() == f"delayd is not running (pidfile {tmp_path / 'p.pid'})"


@pytest.mark.parametrize("foreground", [True, False], ids=["foreground", "daemonized"])
def test_stop_while_the_master_starts_waits_for_it_and_stops_it(tmp_path, foreground):
    """`systemctl start delayd; delayd stop`: the stop came while the master held its lock but had
    not written its pidfile (its start-up checks wait on a Redis that does not answer: a
    SIGSTOPped one); stop said "not running" and the daemon came up anyway."""
    with RedisServer(str(tmp_path / "redis")) as server:
        state = tmp_path / "state"
        env = {**os.environ, "DELAYD_REDIS_URL": server.url, "DELAYD_STATE_DIR": str(state), "DELAYD_BUCKETS": "1",
               "DELAYD_QUEUES": "1", "DELAYD_ALLOWED_MODULES": "delayd.examples"}
        server.proc.send_signal(signal.SIGSTOP)
        start = subprocess.Popen([*DELAYD, "start", *(["--foreground"] if foreground else [])], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stop = None
        try:
            wait_for(lambda: delayd("status", env=env, check=None).returncode == 4, 30, message="status says starting")
            out = delayd("stop", "--timeout", "0.5", env=env, check=1)
            assert "still starting after 0.5 s" in out.stderr, (out.stdout, out.stderr)
            stop = subprocess.Popen([*DELAYD, "stop", "--timeout", "60"], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            wait_for(lambda: stop.poll() is not None or blocked_on_a_lock(stop.pid), 30, message="stop waiting")
            assert stop.poll() is None, ("stop returned while the master was starting", stop.communicate())
            server.proc.send_signal(signal.SIGCONT)  # the start-up checks go on; the master comes up
            out, err = stop.communicate(timeout=90)
            assert stop.returncode == 0 and out.startswith("delayd stopped (pid"), (out, err)
            master = int(out.split("pid ")[1].rstrip(")\n"))
            assert not psutil.pid_exists(master) or psutil.Process(master).status() == psutil.STATUS_ZOMBIE
            start.wait(60)
            delayd("status", env=env, check=3)
            assert not [p for p in psutil.process_iter(["environ", "status"]) if (p.info["environ"] or {}).get(
                "DELAYD_STATE_DIR") == str(state) and p.info["status"] != psutil.STATUS_ZOMBIE]
        finally:
            server.proc.send_signal(signal.SIGCONT)
            for proc in (start, stop):
                if proc is not None and proc.poll() is None:
                    proc.kill()
            delayd("stop", "--timeout", "30", env=env, check=None)


# A stand-in for a master whose start-up checks take `start_s` seconds and that then ignores
# SIGTERM: it holds the locks a master holds, has a master's title, writes its pidfile late.
SLOW_MASTER = """
import fcntl, os, signal, sys, time
import setproctitle
setproctitle.setproctitle("delayd: master (test stand-in)")
signal.signal(signal.SIGTERM, signal.SIG_IGN)
state, start_s = sys.argv[1], float(sys.argv[2])
starting = os.open(os.path.join(state, "delayd.pid.starting"), os.O_RDWR | os.O_CREAT)
fcntl.flock(starting, fcntl.LOCK_EX)
lock = os.open(os.path.join(state, "delayd.pid.lock"), os.O_RDWR | os.O_CREAT)
fcntl.flock(lock, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(start_s)  # its start-up checks
with open(os.path.join(state, "delayd.pid"), "w") as fh:
    fh.write(f"{os.getpid()}\\n")
fcntl.flock(starting, fcntl.LOCK_UN)
time.sleep(600)
"""


def test_stop_timeout_covers_the_start_up_wait_and_the_stop_together(tmp_path):
    """`stop --timeout T` on a master still starting waited up to T for its start, then up to T
    again for it to stop: 2T in all. One deadline now covers both."""
    state = tmp_path / "state"
    state.mkdir()
    master = subprocess.Popen([sys.executable, "-c", SLOW_MASTER, str(state), "4"], stdout=subprocess.PIPE, text=True)
    try:
        assert master.stdout.readline() == "locked\n"
        began = time.monotonic()
        out = delayd("stop", "--timeout", "6", check=1, DELAYD_STATE_DIR=str(state))
        took = time.monotonic() - began
        assert f"(pid {master.pid}) did not stop within 6 s" in out.stderr, out
        assert took < 9, f"stop took {took:.1f} s with --timeout 6 (a 4 s start, then up to 6 s more before)"
    finally:
        master.kill()
        master.wait()


def test_a_long_task_timeout_alone_gets_a_longer_lease(redis_url, tmp_path):
    d = Daemon(redis_url, tmp_path / "d", DELAYD_TASK_TIMEOUT="300").start()
    try:
        started = next(line for line in d.log().splitlines() if "master_started" in line)
        assert "lease_s=360.0" in started and "task_timeout" in started
    finally:
        d.stop()


def heartbeat_files(pid: int) -> dict[int, os.stat_result]:
    """fd -> stat of the (unlinked) heartbeat files a process has open."""
    found = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if "/delayd-" in target and target.endswith("(deleted)"):
                found[int(fd)] = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            pass
    return found


def test_signals_sent_while_the_master_starts_are_handled_once_up(redis_url, tmp_path):
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    d = Daemon(redis_url, tmp_path / "d", queues=1, GATE_FIFO=str(gate), DELAYD_PRELOAD="gated_start_fixture",
               DELAYD_ALLOWED_MODULES="delayd.examples,gated_start_fixture")
    d.start(wait=False)
    writer = None
    try:
        wait_for(lambda: len(d.children()) == 3, 30, message="master and children in ps")
        assert not d.ready()  # queue 0 is held in its import: the master is waiting for it
        d.signal(signal.SIGTTIN)
        writer = os.open(gate, os.O_WRONLY)  # lets queue 0 (and any later one) finish its start
        wait_for(lambda: len(d.children("queue")) == 2, 30, message="the queue process SIGTTIN asked for")
        assert d.child("delayd: queue 1")
    finally:
        if writer is not None:
            os.close(writer)
        d.stop()


def test_heartbeats_are_on_the_monotonic_clock(redis_url, tmp_path):
    d = Daemon(redis_url, tmp_path / "d").start()
    try:
        child = d.child("delayd: queue 0")
        (beat,) = heartbeat_files(child.pid).values()
        # The child touched it with time.monotonic() (system-wide on Linux), not with the wall clock.
        assert abs(beat.st_mtime - time.monotonic()) < 60, (beat.st_mtime, time.monotonic(), time.time())
    finally:
        d.stop()


def test_each_child_has_its_own_heartbeat_and_retired_ones_are_closed(redis_url, tmp_path):
    d = Daemon(redis_url, tmp_path / "d", buckets=1, queues=1).start()
    try:
        d.signal(signal.SIGTTIN)
        wait_for(lambda: len(d.children("queue")) == 2, 20, message="a second queue process")
        d.signal(signal.SIGTTOU)
        wait_for(lambda: len(d.children("queue")) == 1 and "child_retired" in d.log(), 20,
                 message="the second queue process retired")
        before = {c.pid for c in d.children()}
        d.signal(signal.SIGHUP)
        wait_for(lambda: len(d.children()) == 2 and not before & {c.pid for c in d.children()}
                 and d.log().count("child_retired") == 3, 30, message="every child replaced by the reload")
        kids = d.children()
        inodes = [[s.st_ino for s in heartbeat_files(k.pid).values()] for k in kids]
        assert all(len(own) == 1 for own in inodes) and len({own[0] for own in inodes}) == len(kids)
        master = {s.st_ino for s in heartbeat_files(d.proc.pid).values()}
        assert master == {own[0] for own in inodes}  # no heartbeat file of a retired child left open
    finally:
        d.stop()


def test_a_retiring_child_that_does_not_stop_is_killed(redis_url, tmp_path):
    d = Daemon(redis_url, tmp_path / "d", buckets=1, queues=2, DELAYD_GRACEFUL_TIMEOUT="1").start()
    try:
        stuck = d.child("delayd: queue 1")
        stuck.suspend()  # SIGSTOP: its SIGTERM stays pending
        d.signal(signal.SIGTTOU)
        wait_for(lambda: not stuck.is_running() or stuck.status() == psutil.STATUS_ZOMBIE, 30,
                 message="the stuck retiring child killed")
        assert "retiring past its graceful timeout" in d.log()
    finally:
        d.stop()


def test_a_slow_metrics_client_does_not_hold_up_the_master(redis_url, tmp_path):
    port = free_port()
    d = Daemon(redis_url, tmp_path / "d", buckets=1, queues=1, DELAYD_METRICS_PORT=str(port)).start()
    done = threading.Event()

    def trickle() -> None:  # a scrape whose headers never end: the serving thread stays in it
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nX-Slow: ")
            while not done.wait(0.5):
                sock.sendall(b"x")

    slow = threading.Thread(target=trickle, daemon=True)
    slow.start()
    try:
        d.signal(signal.SIGTTIN)
        wait_for(lambda: len(d.children("queue")) == 2, 20, message="a queue process while a scrape hangs")
    finally:
        done.set()
        slow.join(5)
        d.stop()


def test_a_failed_spawn_is_retried_and_the_master_lives(redis_url, tmp_path):
    import resource
    d = Daemon(redis_url, tmp_path / "d", buckets=1, queues=1).start()
    pid = d.proc.pid
    limits = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    try:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, limits[1]))  # the master can open nothing new
        d.signal(signal.SIGTTIN)  # a new slot needs a new heartbeat file: EMFILE
        wait_for(lambda: "spawn_failed" in d.log(), 20, message="the failed spawn logged")
        assert "Too many open files" in d.log()
        assert d.proc.poll() is None and len(d.children("queue")) == 1
        resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
        wait_for(lambda: len(d.children("queue")) == 2, 30, message="the slot started on a retry")
    finally:
        if d.proc.poll() is None:
            resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
        d.stop()
    assert d.proc.returncode == 0


CRASHING_MASTER = """
import sys
from delayd.daemon import master
def resize_queues(self, delta):
    raise RuntimeError("injected fault in the master loop")
master.Master.resize_queues = resize_queues  # SIGTTIN makes the master raise, for real, in its loop
from delayd.cli import main
sys.exit(main(["start"]))
"""


def test_a_daemonized_master_that_raises_logs_it_and_stops_cleanly(redis_url, tmp_path, r):
    state = tmp_path / "bg"
    env = {**os.environ, "DELAYD_REDIS_URL": redis_url, "DELAYD_STATE_DIR": str(state), "DELAYD_BUCKETS": "1",
           "DELAYD_QUEUES": "1"}
    out = subprocess.run([sys.executable, "-c", CRASHING_MASTER], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "started" in out.stdout, out.stderr
    pid = int((state / "delayd.pid").read_text())
    master = psutil.Process(pid)
    try:
        kids = wait_for(lambda: len(master.children()) == 2 and master.children(), 20, message="children up")
        wait_for(lambda: r.zcard("delayd:{daemons}:expires") == 1, 20, message="registered")
        master.send_signal(signal.SIGTTIN)
        log = state / "delayd.log"
        wait_for(lambda: "master_crashed" in log.read_text(), 30, message="the crash logged")
        psutil.wait_procs([master, *kids], timeout=30)
        assert not [p for p in [master, *kids] if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        text = log.read_text()
        assert "injected fault in the master loop" in text and "Traceback" in text
        assert text.count("child_stopped") == 2  # stopped by the master, not orphaned
        assert not (state / "status.json").exists() and not (state / "delayd.pid").exists()
        assert r.zcard("delayd:{daemons}:expires") == 0  # it left the registry
    finally:
        if master.is_running():
            master.kill()
