"""Run a real delayd daemon for tests and find its processes with psutil."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
from redis_server import wait_for

DELAYD = [sys.executable, "-m", "delayd.cli"]
ROOT = Path(__file__).resolve().parent.parent  # the checkout whose tests/ this is


def delayd(*args: str, env: dict | None = None, check: int | tuple[int, ...] | None = 0, timeout: float = 60,
           errors: str = "strict", input: str | None = None, cwd: str | Path | None = None,
           **env_vars: str) -> subprocess.CompletedProcess:
    """`delayd ARGS` in a fresh interpreter, its output read as UTF-8 text: the one command runner.

    env is the whole environment (default: this process's, with the test's DELAYD_REDIS_URL),
    env_vars are set on top of it; check is the exit code (or codes) asserted, None for none;
    errors="replace" reads output that is not UTF-8 (damaged data echoed back); input is stdin; cwd is
    the directory it runs in (default: this process's)."""
    proc = subprocess.run([*DELAYD, *args], env={**(os.environ if env is None else env), **env_vars}, input=input,
                          capture_output=True, encoding="utf-8", errors=errors, timeout=timeout, cwd=cwd)
    codes = (check,) if isinstance(check, int) else check
    assert codes is None or proc.returncode in codes, (args, proc.returncode, proc.stdout, proc.stderr)
    return proc


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The one error line a failed command printed (asserted: one line, no traceback)."""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def settled(client, topic: str) -> bool:
    """Nothing of `topic` can run (again): no task of it delayed, ready or running (leased).

    "It ran once" is only proven after this and a stop of the daemon (which ends every
    run in flight): checked at the moment of success, a later duplicate would be missed.
    """
    counts = client.stats()["topics"].get(topic, {}).get("counts", {})
    return counts.get("delayed", 0) == 0 and counts.get("running", 0) == 0


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL a master that is still there: it, its children (each in a process group of its own)
    and its process group (a master started with start_new_session), then reap it."""
    if proc.poll() is None:
        try:
            children = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        for target in [proc.pid] + [c.pid for c in children]:
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait(10)


def redis_url_set(env: dict) -> bool:
    return bool(env.get("DELAYD_REDIS_URL"))


class Daemon:
    """`delayd start --foreground [ARGS]` in a subprocess, with its own state dir."""

    def __init__(self, redis_url: str | None, state_dir: Path, buckets: int = 2, queues: int = 1,
                 args: tuple[str, ...] = (), **env: str):
        self.state_dir = Path(state_dir)
        self.env = {**os.environ, "DELAYD_REDIS_URL": redis_url, "DELAYD_STATE_DIR": str(state_dir),
                    "DELAYD_BUCKETS": str(buckets), "DELAYD_QUEUES": str(queues),
                    "DELAYD_GRACEFUL_TIMEOUT": "10", "DELAYD_ALLOWED_MODULES": "delayd.examples",
                    "DELAYD_LOG_FILE": str(Path(state_dir) / "delayd.log"),
                    # tests/ importable, so that a refused target is refused by the allowlist alone
                    "PYTHONPATH": str(Path(__file__).parent), **env}
        if redis_url is None:  # the embedded Redis of state_dir
            del self.env["DELAYD_REDIS_URL"]
        self.buckets, self.queues, self.args = buckets, queues, tuple(args)
        self.proc: subprocess.Popen | None = None

    def start(self, wait: bool = True, timeout: float = 30) -> "Daemon":
        """Start it; with `wait`, until its children are up: if they are not within `timeout` s,
        the daemon is killed (kill_tree) before the AssertionError is raised."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([*DELAYD, "start", "--foreground", *self.args], env=self.env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)  # its own process group, for kill_tree
        if wait:
            embedded = not redis_url_set(self.env) and "--redis" not in self.args
            expected = self.buckets + self.queues + (1 if embedded else 0)
            try:
                wait_for(lambda: len(self.children()) == expected and self.ready(), timeout,
                         message="daemon children up")
            except AssertionError:
                self.stop(grace=0)
                raise
        return self

    def ready(self) -> bool:
        return "master_ready" in self.log()

    def log(self) -> str:
        try:
            return Path(self.env["DELAYD_LOG_FILE"]).read_text()
        except OSError:
            return ""

    @property
    def master(self) -> psutil.Process:
        return psutil.Process(self.proc.pid)

    def children(self, kind: str = "") -> list[psutil.Process]:
        try:
            kids = self.master.children()
        except psutil.NoSuchProcess:
            return []
        out = []
        for kid in kids:
            try:
                if kid.status() != psutil.STATUS_ZOMBIE and " ".join(kid.cmdline()).startswith(f"delayd: {kind}"):
                    out.append(kid)
            except psutil.NoSuchProcess:
                pass
        return out

    def child(self, title: str) -> psutil.Process:
        matches = [c for c in self.children() if " ".join(c.cmdline()).strip() == title]
        assert len(matches) == 1, f"expected one {title!r}, found {matches}"
        return matches[0]

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout)

    def stop(self, grace: float = 30) -> None:
        """SIGTERM, and after `grace` s (0: at once) SIGKILL to whatever is left (kill_tree)."""
        if self.proc and self.proc.poll() is None:
            try:
                if grace:
                    self.proc.send_signal(signal.SIGTERM)
                    self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
            kill_tree(self.proc)
        if self.proc and self.proc.stdout:
            self.proc.stdout.close()

    def __enter__(self) -> "Daemon":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
