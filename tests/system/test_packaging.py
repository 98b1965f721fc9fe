"""Packaging: the sample config, the systemd unit, the notify protocol, the installed package.

- etc/delayd.toml documents every Config option with its default, and is valid when
  every option is uncommented;
- systemd/delayd.service passes `systemd-analyze verify` and agrees with tmpfiles,
  logrotate and the config defaults;
- `delayd start --foreground` speaks sd_notify: READY=1 (with MAINPID), RELOADING=1
  then READY=1 on SIGHUP, STOPPING=1 on SIGTERM (exit 0), WATCHDOG=1 when asked;
- the console script and the Lua package data are installed.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import psutil
import pytest
from daemon_helper import ROOT, kill_tree
from redis_server import wait_for

import delayd
from delayd import Client
from delayd import config as config_mod
from delayd.config import Config

SAMPLE = ROOT / "etc" / "delayd.toml"
UNIT = ROOT / "systemd" / "delayd.service"
TMPFILES = ROOT / "systemd" / "delayd.tmpfiles"
LOGROTATE = ROOT / "etc" / "logrotate.d" / "delayd"
OPTION_LINE = re.compile(r"^# ([a-z_]+) = (.*)$")
NOT_OPTIONS = {"source", "start_dir", "explicit", "warnings", "lease_derived"}


def option_names() -> set[str]:
    return {f.name for f in dataclasses.fields(Config)} - NOT_OPTIONS


def delayd_command() -> list[str]:
    script = Path(sys.executable).parent / "delayd"
    return [str(script)] if script.exists() else [sys.executable, "-m", "delayd.cli"]


# -- etc/delayd.toml -----------------------------------------------------------------
def sample_options() -> dict[str, tuple[int, str]]:
    """key -> (line number, the comment line above it)."""
    lines = SAMPLE.read_text().splitlines()
    found: dict[str, tuple[int, str]] = {}
    for number, line in enumerate(lines):
        match = OPTION_LINE.match(line)
        if match:
            key = match.group(1)
            assert key not in found, f"{key} is documented twice (lines {found.get(key, (0,))[0] + 1}, {number + 1})"
            found[key] = (number, lines[number - 1] if number else "")
    return found


def test_sample_config_documents_every_option():
    found = sample_options()
    assert set(found) == option_names(), (
        f"missing: {sorted(option_names() - set(found))}, unknown: {sorted(set(found) - option_names())}")
    for key, (number, above) in found.items():
        assert above.startswith("# ") and not OPTION_LINE.match(above) and len(above) > 10, (
            f"{key} (line {number + 1}) has no explanatory comment line above it")


def test_sample_config_states_precedence():
    text = SAMPLE.read_text()
    assert "DELAYD_" in text and "environment" in text.lower()
    assert "flag" in text.lower() and "overrides both" in text


def test_sample_config_as_shipped_is_all_defaults():
    # Every option commented out: the file loads and changes nothing.
    loaded = config_mod.load(str(SAMPLE), env={})
    assert loaded == Config()
    assert loaded.explicit == frozenset({"source"})


def test_uncommented_sample_config_gives_the_defaults(tmp_path):
    text = "\n".join(line[2:] if OPTION_LINE.match(line) else line for line in SAMPLE.read_text().splitlines())
    path = tmp_path / "delayd.toml"
    path.write_text(text + "\n")
    loaded = config_mod.load(str(path), env={})
    assert loaded.explicit >= option_names(), "some documented option was not read from the file"
    defaults = Config()
    for name in sorted(option_names()):
        assert getattr(loaded, name) == getattr(defaults, name), f"{name}: file says {getattr(loaded, name)!r}"
    assert loaded == defaults
    # The empty-string defaults mean "derived": the same paths as a Config() with nothing set.
    assert loaded.pid_path == defaults.pid_path and loaded.log_path == defaults.log_path
    assert loaded.redis_url is None and loaded.metrics_port is None


def test_sample_config_values_are_checked(tmp_path):
    """The sample's syntax is the syntax load() enforces: a wrong type is an error."""
    path = tmp_path / "bad.toml"
    path.write_text('buckets = "many"\n')
    with pytest.raises(config_mod.ConfigError, match="buckets"):
        config_mod.load(str(path), env={})
    path.write_text("bukets = 4\n")
    with pytest.raises(config_mod.ConfigError, match="unknown option"):
        config_mod.load(str(path), env={})


# -- systemd/delayd.service, tmpfiles, logrotate ----------------------------------------
def unit_settings(text: str) -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        assert current is not None, f"setting outside a section: {raw!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|sec|min|m)?", value)
    assert match, f"cannot parse a time span {value!r}"
    return float(match.group(1)) * (60 if match.group(2) in ("min", "m") else 1)


def test_unit_file_settings():
    unit = unit_settings(UNIT.read_text())
    service, head = unit["Service"], unit["Unit"]
    one = {key: values[-1] for key, values in service.items()}
    assert one["Type"] == "notify" and one["NotifyAccess"] == "main"
    assert one["ExecStart"].endswith("delayd start --foreground")
    assert one["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert one["KillMode"] == "mixed"
    assert seconds(one["TimeoutStopSec"]) > Config().graceful_timeout
    assert seconds(one["WatchdogSec"]) > 2  # the master beats every WatchdogSec/2
    assert one["Restart"] == "on-failure" and one["User"] == "delayd" and one["Group"] == "delayd"
    assert "StartLimitIntervalSec" in head and "StartLimitBurst" in head
    assert "network-online.target" in head["After"][0] and "network-online.target" in head["Wants"][0]
    env = dict(v.partition("=")[::2] for v in service["Environment"])
    assert env["DELAYD_STATE_DIR"] == "/var/lib/delayd"
    assert env["DELAYD_CONFIG"] == "/etc/delayd/delayd.toml"
    assert one["StateDirectory"] == "delayd" and one["RuntimeDirectory"] == "delayd"
    for flag in ("NoNewPrivileges", "ProtectHome", "PrivateTmp", "PrivateDevices", "ProtectKernelTunables",
                 "ProtectKernelModules", "ProtectKernelLogs", "ProtectControlGroups", "RestrictSUIDSGID",
                 "LockPersonality", "RestrictRealtime", "RestrictNamespaces"):
        assert one[flag] == "yes", flag
    assert one["ProtectSystem"] == "strict" and one["SystemCallArchitectures"] == "native"
    assert "/var/lib/delayd" in one["ReadWritePaths"].split() and one["UMask"] == "0027"


def test_tmpfiles_logrotate_and_unit_agree():
    service = unit_settings(UNIT.read_text())["Service"]
    env = dict(v.partition("=")[::2] for v in service["Environment"])
    state_dir = env["DELAYD_STATE_DIR"]
    # The pidfile logrotate signals is the one the daemon writes under that state dir.
    expected = Config(state_dir=state_dir)
    assert "DELAYD_PIDFILE" not in env, "logrotate reads the pidfile from the state dir"
    rotate = LOGROTATE.read_text()
    stanza = next(line for line in rotate.splitlines() if line.rstrip().endswith("{"))
    assert stanza.split()[0] == str(expected.log_path)
    assert f"/bin/kill -USR1 $(cat {expected.pid_path}" in rotate and "|| true" in rotate
    for word in ("weekly", "rotate 8", "compress", "delaycompress", "missingok", "notifempty", "postrotate"):
        assert re.search(rf"^\s*{word}\s*$", rotate, re.M), word
    lines = [l.split() for l in TMPFILES.read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert {(l[0], l[1], l[3], l[4]) for l in lines} == {("d", "/var/lib/delayd", "delayd", "delayd"),
                                                          ("d", "/run/delayd", "delayd", "delayd")}


def test_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed on this host")
    executable = Path(delayd_command()[0])
    assert executable.is_absolute()
    text = re.sub(r"^ExecStart=\S+", f"ExecStart={executable}", UNIT.read_text(), flags=re.M)
    if len(delayd_command()) > 1:  # no console script: python -m delayd.cli
        text = re.sub(r"^ExecStart=(\S+)", r"ExecStart=\1 -m delayd.cli", text, flags=re.M)
    unit = tmp_path / "delayd.service"
    unit.write_text(text)
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": "cat"})
    ours = [line.replace(str(unit), "UNIT") for line in (done.stdout + done.stderr).splitlines()
            if line.strip() and ("delayd" in line or str(tmp_path) in line)]
    # The delayd user need not exist on a test host; nothing else may be reported.
    missing_user = re.compile(r"\b(user|group)\b\W*delayd\b.*(not exist|no such|unknown|not found|resolve)|"
                              r"(not exist|no such|unknown|not found|resolve).*\b(user|group)\b\W*delayd\b", re.I)
    problems = [line for line in ours if not missing_user.search(line)]
    assert not problems, "systemd-analyze verify:\n" + "\n".join(problems)
    if done.returncode != 0:
        assert ours and len(problems) == 0, f"verify failed (rc {done.returncode}):\n{done.stdout}{done.stderr}"


def test_systemd_unit_is_hardened(tmp_path):
    """`systemd-analyze security` rated the unit 5.7 MEDIUM; with the sandboxing the daemon
    survives (no capabilities, @system-service calls, three address families, no W+X) it is OK."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed on this host")
    done = subprocess.run([analyze, "security", "--offline=true", str(UNIT)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "SYSTEMD_LOG_COLOR": "0", "SYSTEMD_PAGER": "cat"})
    if "--offline" in done.stderr and "unrecognized" in done.stderr:
        pytest.skip("this systemd-analyze cannot rate a unit file offline")
    score = re.search(r"Overall exposure level for \S+: ([0-9.]+)", done.stdout)
    assert score, done.stdout + done.stderr
    assert float(score.group(1)) <= 2.0, done.stdout


# Exec argv[1:] as the unit's sandbox would leave it: PR_SET_MDWE (what MemoryDenyWriteExecute=
# sets; inherited over fork and exec), under `setpriv` with no capabilities and no_new_privs.
SANDBOXED_EXEC = """
import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).prctl(65, 1, 0, 0, 0) != 0:  # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN
    sys.exit(f"PR_SET_MDWE: errno {ctypes.get_errno()}")
os.execv(sys.argv[1], sys.argv[1:])
"""


@pytest.mark.system
def test_the_daemon_runs_in_the_units_sandbox(tmp_path, monkeypatch):
    """The unit's CapabilityBoundingSet=, NoNewPrivileges= and MemoryDenyWriteExecute= (the parts
    that can be applied without systemd): the master, the embedded redis-server and a queue
    process running a task need none of what they take away."""
    setpriv = shutil.which("setpriv")
    probe = subprocess.run([sys.executable, "-c", SANDBOXED_EXEC, "/bin/true"], capture_output=True, text=True)
    if setpriv is None or probe.returncode != 0:
        pytest.skip(f"needs setpriv and PR_SET_MDWE (Linux >= 6.3): {probe.stderr.strip()}")
    state = tmp_path / "state"
    monkeypatch.setenv("DELAYD_STATE_DIR", str(state))
    env = {**os.environ, "DELAYD_BUCKETS": "1", "DELAYD_QUEUES": "1", "DELAYD_GRACEFUL_TIMEOUT": "5"}
    command = [setpriv, "--no-new-privs", "--bounding-set", "-all", "--inh-caps", "-all", "--",
               sys.executable, "-c", SANDBOXED_EXEC, sys.executable, "-m", "delayd.cli", "start", "--foreground"]
    log = open(tmp_path / "stderr.log", "wb")
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
    log.close()
    try:
        wait_for(lambda: proc.poll() is not None or "master_ready" in output(tmp_path), 60, message="daemon up")
        assert proc.poll() is None, output(tmp_path)
        kids = psutil.Process(proc.pid).children()
        assert {" ".join(k.cmdline()).split(" ")[1] for k in kids} >= {"redis", "queue"}, kids
        for pid in [proc.pid, *(k.pid for k in kids)]:
            fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
            assert int(fields["CapEff"], 16) == 0 and fields["NoNewPrivs"] == "1", (pid, fields)
        client = Client(config=config_mod.load())
        client.add("sandbox", 1, call="delayd.examples:noop")
        wait_for(lambda: client.get("sandbox", 1).status == "ok", 30, message="a task ran in the sandbox")
        client.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, output(tmp_path)
    finally:
        kill_tree(proc)


# -- the notify protocol -----------------------------------------------------------------
class Notifications:
    """An AF_UNIX datagram socket standing in for systemd's $NOTIFY_SOCKET."""

    def __init__(self, directory: Path):
        path = directory / "notify.sock"
        if len(str(path).encode()) >= 100:  # sun_path is 108 bytes
            path = Path(tempfile.mkdtemp(prefix="delayd-notify-")) / "notify.sock"
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.seen: list[dict[str, str]] = []

    def messages(self, timeout: float):
        """Datagrams (as dicts) arriving within `timeout` s; each is also kept in self.seen."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                return
            message = dict(line.partition("=")[::2] for line in data.decode().splitlines() if line)
            self.seen.append(message)
            yield message

    def expect(self, key: str, value: str = "1", timeout: float = 30.0) -> dict[str, str]:
        """The next datagram that sets key=value (earlier ones are kept in self.seen)."""
        for message in self.messages(timeout):
            if message.get(key) == value:
                return message
        raise AssertionError(f"no {key}={value} within {timeout} s; got {self.seen}")

    def quiet(self, key: str, timeout: float) -> None:
        """No datagram setting `key` arrives within `timeout` s."""
        for message in self.messages(timeout):
            assert key not in message, f"unexpected {message}"

    def close(self) -> None:
        self.sock.close()
        self.path.unlink(missing_ok=True)


def start_foreground(tmp_path: Path, notify: Notifications, **extra: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS")}
    config = tmp_path / "empty.toml"
    config.write_text("")
    env.update(NOTIFY_SOCKET=str(notify.path), DELAYD_STATE_DIR=str(tmp_path / "state"),
               DELAYD_CONFIG=str(config), DELAYD_BUCKETS="2", DELAYD_QUEUES="1", DELAYD_GRACEFUL_TIMEOUT="5")
    env.update(extra)
    assert env.get("DELAYD_REDIS_URL"), "the redis_url fixture sets DELAYD_REDIS_URL"
    log = open(tmp_path / "stderr.log", "wb")
    try:
        return subprocess.Popen(delayd_command() + ["start", "--foreground"], env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=log, start_new_session=True)
    finally:
        log.close()


@contextlib.contextmanager
def foreground(tmp_path: Path, **extra: str) -> Iterator[tuple[subprocess.Popen, Notifications]]:
    """`delayd start --foreground` (start_foreground) with its notify socket; its output is printed
    if the test fails, and whatever is left of it is killed at the end (kill_tree)."""
    notify = Notifications(tmp_path)
    proc = start_foreground(tmp_path, notify, **extra)
    try:
        yield proc, notify
    except BaseException:
        print(output(tmp_path))
        raise
    finally:
        kill_tree(proc)
        notify.close()


def output(tmp_path: Path) -> str:
    return (tmp_path / "stderr.log").read_text(errors="replace")[-3000:]


@pytest.mark.system
def test_notify_ready_reload_stop(redis_url, tmp_path):
    with foreground(tmp_path) as (proc, notify):
        ready = notify.expect("READY", timeout=30)
        assert ready.get("MAINPID") == str(proc.pid), ready
        assert proc.poll() is None

        notify.seen.clear()
        proc.send_signal(signal.SIGHUP)
        reloading = notify.expect("RELOADING", timeout=10)
        assert "READY" not in reloading
        # MONOTONIC_USEC lets Type=notify-reload match the reload to the signal.
        assert int(reloading["MONOTONIC_USEC"]) <= time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        notify.expect("READY", timeout=20)
        assert [m for m in notify.seen if "RELOADING" in m or "READY" in m][0] is reloading

        proc.send_signal(signal.SIGTERM)
        notify.expect("STOPPING", timeout=10)
        assert proc.wait(timeout=20) == 0, output(tmp_path)
    assert not (tmp_path / "state" / "delayd.pid").exists(), "the pidfile is removed on a clean stop"


@pytest.mark.system
def test_no_ready_when_a_queue_process_cannot_start(redis_url, tmp_path):
    """A preload module that does not import: the master sent READY=1 while its queue processes
    crash-looped, so systemd called the service started."""
    with foreground(tmp_path, DELAYD_ALLOWED_MODULES="delayd.examples,nosuchmodule",
                    DELAYD_PRELOAD="nosuchmodule") as (proc, notify):
        assert proc.wait(timeout=60) == 1, output(tmp_path)
        notify.quiet("READY", timeout=0.5)  # every datagram it sent is queued on the socket by now
        assert {"STOPPING": "1"} in notify.seen
        assert output(tmp_path).strip().splitlines()[-1].startswith(
            "delayd: error: queue 0 could not start: preload: cannot import module 'nosuchmodule'")


@pytest.mark.system
def test_notify_watchdog(redis_url, tmp_path):
    with foreground(tmp_path, WATCHDOG_USEC="1000000") as (proc, notify):
        notify.expect("READY", timeout=30)
        notify.expect("WATCHDOG", timeout=10)
        notify.expect("WATCHDOG", timeout=10)  # and again: keep-alives keep coming (every WATCHDOG_USEC/2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, output(tmp_path)


@pytest.mark.system
def test_notify_watchdog_for_another_pid_is_not_sent(redis_url, tmp_path):
    # WATCHDOG_PID names the process systemd expects keep-alives from; not us: stay quiet.
    with foreground(tmp_path, WATCHDOG_USEC="1000000", WATCHDOG_PID="1") as (proc, notify):
        notify.expect("READY", timeout=30)
        notify.quiet("WATCHDOG", timeout=1.5)


def started_lines(buckets: int, queues: int) -> list[str]:
    return ([f"event=bucket_started bucket={b}" for b in range(buckets)] +
            [f"event=queue_started queue={q}" for q in range(queues)])


@pytest.mark.system
def test_ready_is_sent_after_every_child_started(redis_url, tmp_path):
    with foreground(tmp_path) as (proc, notify):
        notify.expect("READY", timeout=30)
        text = (tmp_path / "stderr.log").read_text(errors="replace")
        missing = [line for line in started_lines(buckets=2, queues=1) if line not in text]
        assert not missing, f"READY=1 arrived before {missing}"


@pytest.mark.system
def test_logrotate_postrotate_signal_reopens_logs_and_keeps_children(redis_url, tmp_path):
    """What etc/logrotate.d/delayd does: move the log, SIGUSR1 the master via the pidfile."""
    from redis_server import wait_for

    log = tmp_path / "state" / "delayd.log"
    with foreground(tmp_path, DELAYD_LOG_FILE=str(log)) as (proc, notify):
        notify.expect("READY", timeout=30)
        wait_for(lambda: all(word in log.read_text() for word in started_lines(buckets=2, queues=1)), 15,
                 message="every child started")
        pid = int((tmp_path / "state" / "delayd.pid").read_text().split()[0])
        assert pid == proc.pid
        log.rename(log.with_suffix(".log.1"))
        os.kill(pid, signal.SIGUSR1)
        wait_for(lambda: log.exists() and "event=log_reopened" in log.read_text(), 10, message="log reopened")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    text = log.read_text() + log.with_suffix(".log.1").read_text()
    assert "SIGUSR1" not in text, "a child was killed by the log-reopen signal"
    # The children write to the new file too, not to the rotated one.
    assert "proc=queue.0" in log.read_text() and "proc=bucket.0" in log.read_text()


@pytest.mark.system
def test_after_a_log_reopen_what_a_daemonized_process_writes_to_stderr_goes_to_the_new_log(redis_url, tmp_path):
    """A daemonized process's stderr is the log file open at start. SIGUSR1 reopened the log handler
    only, so after logrotate uvicorn's warnings (and any traceback) went on into delayd.log.1."""
    from redis_server import free_port, wait_for

    state = tmp_path / "state"
    log = state / "delayd.log"
    port = free_port()
    env = {**os.environ, "DELAYD_REDIS_URL": redis_url, "DELAYD_STATE_DIR": str(state), "DELAYD_BUCKETS": "1",
           "DELAYD_QUEUES": "1", "DELAYD_WEB_PORT": str(port)}
    env.pop("DELAYD_LOG_FILE", None)
    out = subprocess.run([*delayd_command(), "start"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "started" in out.stdout, out.stderr
    master = psutil.Process(int((state / "delayd.pid").read_text()))
    try:
        wait_for(lambda: len(master.children()) == 3 and "event=web_started" in log.read_text(), 30,
                 message="bucket, queue and web children up")
        processes = [master, *master.children()]
        log.rename(log.with_suffix(".log.1"))
        master.send_signal(signal.SIGUSR1)

        def has_new_log(proc: psutil.Process) -> bool:
            return any(f.path == str(log) for f in proc.open_files())
        wait_for(lambda: log.exists() and all(has_new_log(p) for p in processes), 15,
                 message="every process reopened its log")
        with socket.create_connection(("127.0.0.1", port)) as sock:  # uvicorn warns on stderr
            sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            sock.recv(1024)
        wait_for(lambda: "Invalid HTTP request received" in log.read_text()
                 + log.with_suffix(".log.1").read_text(), 15, message="uvicorn's warning")
        assert "Invalid HTTP request received" in log.read_text(), "uvicorn's warning went to the rotated log"
        assert all(os.readlink(f"/proc/{p.pid}/fd/2") == str(log) for p in processes)
    finally:
        master.send_signal(signal.SIGTERM)
        psutil.wait_procs([master], timeout=30)


@pytest.mark.system
def test_a_log_file_that_cannot_be_reopened_keeps_the_old_one_and_every_process(redis_url, tmp_path):
    """SIGUSR1 after the log's directory was removed: the master crashed (master_crashed, every child
    stopped). Now each process warns in the old file and goes on writing there."""
    from redis_server import wait_for

    log = tmp_path / "logs" / "delayd.log"
    log.parent.mkdir()
    with foreground(tmp_path, DELAYD_LOG_FILE=str(log)) as (proc, notify):
        notify.expect("READY", timeout=30)
        wait_for(lambda: all(word in log.read_text() for word in started_lines(buckets=2, queues=1)), 15,
                 message="every child started")
        children = {c.pid for c in psutil.Process(proc.pid).children()}
        old = log.rename(tmp_path / "delayd.log.1")
        log.parent.rmdir()
        os.kill(proc.pid, signal.SIGUSR1)
        procs = ("master", "bucket.0", "bucket.1", "queue.0")
        def warned() -> set[str]:
            lines = [line for line in old.read_text().splitlines() if "level=warning" in line
                     and "event=log_reopen_failed" in line]
            return {p for p in procs if any(f" proc={p} " in line for line in lines)}
        wait_for(lambda: warned() == set(procs), 10, message="each process warned in the old log")
        assert proc.poll() is None and {c.pid for c in psutil.Process(proc.pid).children()} == children
        assert "No such file or directory" in old.read_text() and "log_reopened" not in old.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    text = old.read_text()
    assert "master_crashed" not in text and "child_crashed" not in text and "event=master_stopped" in text


# -- the installed package ------------------------------------------------------------
@pytest.mark.system
def test_console_script_prints_the_version():
    scripts = [ep for ep in importlib.metadata.entry_points(group="console_scripts") if ep.name == "delayd"]
    assert scripts and scripts[0].value == "delayd.cli:main"
    script = Path(sys.executable).parent / "delayd"
    assert script.exists(), f"the console script is not installed next to {sys.executable}"
    done = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"delayd {delayd.__version__}"


def test_lua_scripts_are_package_data():
    import importlib.resources

    lua = importlib.resources.files("delayd.store") / "lua"
    assert (lua / "add.lua").is_file()
    assert "redis.call" in (lua / "add.lua").read_text()


@pytest.mark.system
def test_built_package_contains_the_lua_files(tmp_path):
    """What `pip install .` copies (setuptools build_py): the .lua files must be in it."""
    build = tmp_path / "build"
    done = subprocess.run([sys.executable, "-c", "import setuptools; setuptools.setup()", "-q", "build_py",
                           "-d", str(build)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    source = {p.name for p in (ROOT / "delayd" / "store" / "lua").glob("*.lua")}
    built = {p.name for p in (build / "delayd" / "store" / "lua").glob("*.lua")}
    assert source and built == source
    for web in ("web/templates", "web/static"):  # the dashboard's pages, style sheet and script
        source = {p.name for p in (ROOT / "delayd" / web).iterdir()}
        assert source and {p.name for p in (build / "delayd" / web).iterdir()} == source, web
    # the HTTP API's OpenAPI document, which `delayd web` serves (docs/openapi.json links to it)
    assert (build / "delayd" / "web" / "openapi.json").read_bytes() == (ROOT / "docs" / "openapi.json").read_bytes()
    probe = ("import importlib.resources, delayd; "
             "print(delayd.__file__); print((importlib.resources.files('delayd.store') / 'lua/add.lua').is_file())")
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(build)})
    assert done.returncode == 0, done.stderr
    where, found = done.stdout.split()
    assert Path(where).is_relative_to(build) and found == "True"
