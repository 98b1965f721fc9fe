"""The master: starts, supervises and stops the bucket, queue and embedded-Redis children.

Modelled on gunicorn's arbiter: signal handlers only put the signal on a queue;
one loop does all the work (reaping, restarting, reloading, heartbeat checks).

    slot          one child the master keeps alive: ("redis", 0), ("bucket", 3), ("queue", 1)
    restart       a dead child's slot is started again after a backoff that doubles
                  with each quick death (1 s .. 60 s) and resets once a child ran STABLE s
    heartbeat     each Python child touches an unlinked temp file; one silent for
                  heartbeat_timeout gets SIGABRT, then SIGKILL
"""
from __future__ import annotations

import json
import logging
import os
import queue as queue_mod
import signal
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import redis
from setproctitle import setproctitle

from . import __version__, bucket, connection, embedded
from . import config as config_mod
from . import log as log_mod
from . import notify, registry
from . import queue as queue_worker
from .config import Config
from .log import event
from .pidfile import PidFile
from .store import recorded_buckets
from .worker import HANDLED_SIGNALS, REDIS_ERRORS, set_death_signal, start_child, title

log = logging.getLogger("delayd.master")
STABLE = 10.0            # a child that ran this long resets its slot's backoff
BACKOFF_MAX = 60.0
CRASH_LOOP = 5           # quick deaths in a row before a slot is reported as crash-looping
KILL_AFTER_ABORT = 5.0   # seconds between SIGABRT and SIGKILL for a hung child


class StartError(RuntimeError):
    """The daemon cannot start; the message is one line for the terminal."""


@dataclass(eq=False)
class Slot:
    kind: str
    index: int
    pid: int | None = None
    started: float = 0.0
    restarts: int = 0
    quick_deaths: int = 0
    start_at: float = 0.0            # monotonic time of the next (re)start
    heartbeat: int | None = None     # fd of the heartbeat temp file
    aborted_at: float | None = None
    spawned_at: float = 0.0          # wall-clock time of the last spawn (heartbeat files use mtime)
    retiring: set = field(default_factory=set)  # pids of replaced children still finishing

    @property
    def name(self) -> str:
        return self.kind if self.kind == "redis" else f"{self.kind} {self.index}"

    @property
    def crash_looping(self) -> bool:
        return self.quick_deaths >= CRASH_LOOP


def describe_exit(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.WEXITSTATUS(status)}"


def check_redis(config: Config) -> None:
    """Redis answers, and the stored layout matches ours (bucket count). Raises StartError."""
    client = connection.connect(config.redis_url)
    try:
        client.ping()
        stored = recorded_buckets(client, config.prefix, config.buckets)
        if stored != config.buckets:
            raise StartError(f"the store at prefix {config.prefix!r} has {stored} buckets but the config says "
                             f"{config.buckets}; set buckets = {stored} (changing it would orphan tasks)")
        info = client.info("persistence")
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy", "noeviction")
        if policy != "noeviction":
            event(log, "redis_may_evict", logging.WARNING, maxmemory_policy=policy,
                  advice="set maxmemory-policy noeviction or tasks can be evicted")
        if not info.get("aof_enabled"):
            event(log, "redis_not_durable", logging.WARNING,
                  advice="enable appendonly yes (appendfsync everysec) or a Redis restart loses tasks")
    except redis.exceptions.ResponseError as exc:
        if "unknown command" in str(exc).lower():  # CONFIG may be renamed on managed Redis
            return
        raise StartError(f"Redis at {connection.where(config.redis_url)}: {exc}") from None
    except REDIS_ERRORS as exc:
        raise StartError(f"cannot reach Redis at {connection.where(config.redis_url)}: {exc}") from None
    finally:
        client.close()


class Master:
    def __init__(self, config: Config, pidfile: PidFile, config_path: str | None = None,
                 ready: Callable[[str], None] | None = None):
        self.config = config
        self.config_path = config_path
        self.pidfile = pidfile
        self.ready_callback = ready
        self.events: queue_mod.SimpleQueue = queue_mod.SimpleQueue()
        self.embedded = config.redis_url is None
        if self.embedded:
            self.config = config_mod.replace(config, redis_url=embedded.url(config.state_dir))
        self.slots: list[Slot] = []
        self.by_pid: dict[int, Slot] = {}
        self.stopping = False
        self.started = time.time()
        self.watchdog = notify.watchdog_interval()
        self.next_watchdog = time.monotonic()
        # Held around every fork; the /metrics thread holds it while it has anything open.
        self.fork_lock = threading.Lock()
        self.metrics = None
        self.registrar: registry.Registrar | None = None

    # -- signals -------------------------------------------------------------------
    def install_signals(self) -> None:
        for sig in HANDLED_SIGNALS:
            signal.signal(sig, lambda signum, frame: self.events.put(signum))

    # -- lifecycle -----------------------------------------------------------------
    def run(self) -> int:
        setproctitle(title(self.config, "master"))
        os.environ["DELAYD_PROC"] = "master"
        self.install_signals()
        self.pidfile.write()
        event(log, "master_started", redis=connection.redact(self.config.redis_url), buckets=self.config.buckets,
              queues=self.config.queues, lease_s=self.config.lease,
              lease_from="task_timeout + max(30 s, 20 %)" if self.config.lease_derived else "config")
        for warning in self.config.warnings:
            event(log, "config_warning", logging.WARNING, warning=warning)
        try:
            if self.embedded:
                self.start_embedded_redis()
            check_redis(self.config)
            self.start_metrics()
            self.slots += [Slot("bucket", b) for b in range(self.config.buckets)]
            self.slots += [Slot("queue", q) for q in range(self.config.queues)]
            self.spawn_due()
            self.wait_children_up()
        except StartError as exc:
            event(log, "start_failed", logging.ERROR, error=str(exc))
            self.ready(f"error: {exc}")
            self.stop_all()
            return 1
        self.write_status()
        notify.notify(f"READY=1\nMAINPID={os.getpid()}\nSTATUS=running")
        self.ready("ok")
        event(log, "master_ready", children=len(self.by_pid))
        self.registrar = registry.Registrar(self.config, registry.daemon_id(self.config, os.getpid()),
                                            self.registry_entry, self.fork_lock)
        self.registrar.start()
        while not self.stopping:
            self.loop_once()
        self.stop_all()
        event(log, "master_stopped")
        return 0

    def ready(self, message: str) -> None:
        if self.ready_callback:
            self.ready_callback(message)
            self.ready_callback = None

    def loop_once(self) -> None:
        try:
            item = self.events.get(timeout=self.next_timeout())
        except queue_mod.Empty:
            item = None
        if item is not None:
            self.handle_signal(item)
        self.reap()
        self.check_heartbeats()
        self.spawn_due()
        if self.watchdog and time.monotonic() >= self.next_watchdog:
            notify.notify("WATCHDOG=1")
            self.next_watchdog = time.monotonic() + self.watchdog

    def next_timeout(self) -> float:
        now = time.monotonic()
        timers = [self.config.heartbeat_timeout / 4]
        timers += [s.start_at - now for s in self.slots if s.pid is None]
        timers += [s.aborted_at + KILL_AFTER_ABORT - now for s in self.slots if s.aborted_at]
        if self.watchdog:
            timers.append(self.next_watchdog - now)
        return max(0.0, min(timers))

    def handle_signal(self, sig: int) -> None:
        if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            event(log, "stopping", signal=signal.Signals(sig).name)
            self.stopping = True
        elif sig == signal.SIGHUP:
            self.reload()
        elif sig == signal.SIGUSR1:
            log_mod.reopen()
            self.signal_children(signal.SIGUSR1)
            event(log, "log_reopened")
        elif sig in (signal.SIGTTIN, signal.SIGTTOU):
            self.resize_queues(1 if sig == signal.SIGTTIN else -1)

    # -- children ------------------------------------------------------------------
    def spawn_due(self) -> None:
        now = time.monotonic()
        due = [s for s in self.slots if s.pid is None and s.start_at <= now and not self.stopping]
        for slot in due:
            self.spawn(slot)
        if due:
            self.write_status()

    def start_metrics(self) -> None:
        """Serve /metrics from a thread (config metrics_port; off when unset)."""
        if self.config.metrics_port is None:
            return
        from .metrics import MetricsServer
        try:
            self.metrics = MetricsServer(self.config, self.slot_states, self.fork_lock).start()
        except OSError as exc:
            raise StartError(f"cannot serve metrics on {self.config.metrics_bind}:{self.config.metrics_port}: "
                             f"{exc.strerror or exc}") from None
        host, port = self.metrics.address
        event(log, "metrics_serving", url=f"http://{host}:{port}/metrics")

    def slot_states(self) -> list[tuple[str, str, bool, int, bool]]:
        """For /metrics (read from its thread): kind, name, up, restarts, crash-looping of each slot."""
        return [(s.kind, s.name, s.pid is not None, s.restarts, s.crash_looping) for s in list(self.slots)]

    def spawn(self, slot: Slot) -> None:
        with self.fork_lock:  # never fork while the /metrics thread has a socket open
            self._spawn(slot)

    def _spawn(self, slot: Slot) -> None:
        if slot.kind == "redis":
            pid = self.spawn_redis()
        else:
            if slot.heartbeat is None:
                fd, path = tempfile.mkstemp(prefix=f"delayd-{slot.kind}{slot.index}-")
                os.unlink(path)
                slot.heartbeat = fd
            # Backdate the heartbeat, so that "up" means the child itself touched it.
            slot.spawned_at = time.time()
            os.utime(slot.heartbeat, (slot.spawned_at - 1, slot.spawned_at - 1))
            body = bucket.main if slot.kind == "bucket" else queue_worker.main
            keep = {slot.heartbeat}
            close = [s.heartbeat for s in self.slots if s.heartbeat is not None and s.heartbeat not in keep]
            if self.pidfile.lock_fd is not None:
                close.append(self.pidfile.lock_fd)
            if self.metrics is not None:
                close.append(self.metrics.fileno())
            pid = start_child(self.config, slot.name, slot.heartbeat, close,
                              lambda cfg, hb, index=slot.index: body(cfg, index, hb))
        slot.pid, slot.started, slot.aborted_at = pid, time.monotonic(), None
        self.by_pid[pid] = slot
        event(log, "child_started", child=slot.name, child_pid=pid, restarts=slot.restarts)

    def spawn_redis(self) -> int:
        Path(self.config.state_dir).mkdir(parents=True, exist_ok=True)
        args = embedded.server_args(self.config.state_dir)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                for sig in HANDLED_SIGNALS:
                    signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_SETMASK, [])
                os.setpgid(0, 0)
                set_death_signal(signal.SIGTERM, parent)  # Redis shuts down cleanly (AOF flushed)
                devnull = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(devnull, fd)
                os.execv(args[0], [title(self.config, "redis")] + args[1:])
            finally:
                os._exit(127)
        return pid

    def start_embedded_redis(self) -> None:
        slot = Slot("redis", 0)
        self.slots.append(slot)
        self.spawn(slot)
        client = connection.connect(self.config.redis_url, socket_connect_timeout=1.0)
        deadline = time.monotonic() + 30
        while True:
            try:
                if client.ping():
                    break
            except (*REDIS_ERRORS, FileNotFoundError):
                pass
            self.reap()
            if slot.pid is None:
                raise StartError(f"the embedded redis-server exited at start; see {self.config.state_dir}/redis.log")
            if time.monotonic() > deadline:
                raise StartError("the embedded redis-server did not answer within 30 s")
            time.sleep(0.02)  # start-up only: Redis has no readiness signal to wait on
        client.close()

    def wait_children_up(self, timeout: float = 15.0) -> None:
        """Until every Python child has touched its heartbeat once (or timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.reap()
            waiting = [s for s in self.slots if s.kind != "redis" and s.pid is not None
                       and os.fstat(s.heartbeat).st_mtime < s.spawned_at - 0.5]
            if not waiting:
                return
            try:
                sig = self.events.get(timeout=0.05)
                if sig in (signal.SIGTERM, signal.SIGINT):
                    self.stopping = True
                    return
            except queue_mod.Empty:
                pass

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.child_exited(pid, status)

    def child_exited(self, pid: int, status: int) -> None:
        slot = self.by_pid.pop(pid, None)
        if slot is None:
            return
        if pid in slot.retiring:
            slot.retiring.discard(pid)
            event(log, "child_retired", child=slot.name, child_pid=pid, how=describe_exit(status))
            return
        ran = time.monotonic() - slot.started
        slot.pid = None
        if self.stopping:
            event(log, "child_stopped", child=slot.name, child_pid=pid, how=describe_exit(status))
            return
        slot.restarts += 1
        slot.quick_deaths = 0 if ran >= STABLE else slot.quick_deaths + 1
        delay = 0.0 if slot.quick_deaths == 0 else min(BACKOFF_MAX, 2.0 ** (slot.quick_deaths - 1))
        slot.start_at = time.monotonic() + delay
        level = logging.CRITICAL if slot.crash_looping else logging.WARNING
        event(log, "child_died", level, child=slot.name, child_pid=pid, how=describe_exit(status),
              ran_s=round(ran, 3), restart_in_s=delay, crash_looping=slot.crash_looping or None)
        self.write_status()

    def check_heartbeats(self) -> None:
        now = time.time()
        for slot in self.slots:
            if slot.pid is None or slot.heartbeat is None:
                continue
            if slot.aborted_at is not None:
                if time.monotonic() - slot.aborted_at >= KILL_AFTER_ABORT:
                    self.kill(slot.pid, signal.SIGKILL)
                continue
            silent = now - os.fstat(slot.heartbeat).st_mtime
            if silent > self.config.heartbeat_timeout:
                event(log, "child_hung", logging.ERROR, child=slot.name, child_pid=slot.pid, silent_s=round(silent, 1))
                self.kill(slot.pid, signal.SIGABRT)
                slot.aborted_at = time.monotonic()

    @staticmethod
    def kill(pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def signal_children(self, sig: int, kinds: tuple[str, ...] = ("bucket", "queue")) -> None:
        for pid, slot in list(self.by_pid.items()):
            if slot.kind in kinds:
                self.kill(pid, sig)

    def resize_queues(self, delta: int) -> None:
        queues = [s for s in self.slots if s.kind == "queue"]
        if delta > 0:
            self.slots.append(Slot("queue", max((s.index for s in queues), default=-1) + 1))
        elif len(queues) > 1:
            last = queues[-1]
            self.slots.remove(last)
            if last.pid:
                last.retiring.add(last.pid)
                self.kill(last.pid, signal.SIGTERM)
        event(log, "queues_resized", queues=len([s for s in self.slots if s.kind == "queue"]))
        self.write_status()

    def reload(self) -> None:
        """SIGHUP: reread the config and replace the children one by one."""
        notify.reloading()
        try:
            new = config_mod.load(self.config_path)
            if self.embedded:
                new = config_mod.replace(new, redis_url=self.config.redis_url)
            if new.buckets != self.config.buckets or new.prefix != self.config.prefix:
                raise config_mod.ConfigError("buckets and prefix cannot change on reload; restart instead")
        except config_mod.ConfigError as exc:
            event(log, "reload_failed", logging.ERROR, error=str(exc))
            notify.notify("READY=1\nSTATUS=reload failed, running the old config")
            return
        self.config = new
        log_mod.setup(new.log_level, new.log_format, log_mod.current_path())
        wanted = new.queues
        queues = [s for s in self.slots if s.kind == "queue"]
        for extra in queues[wanted:]:
            self.slots.remove(extra)
            if extra.pid:
                extra.retiring.add(extra.pid)
                self.kill(extra.pid, signal.SIGTERM)
        for index in range(len(queues), wanted):
            self.slots.append(Slot("queue", index))
        for slot in self.slots:
            if slot.kind != "redis" and slot.pid:
                old = slot.pid
                slot.retiring.add(old)
                self.spawn(slot)          # the new child starts before the old one is told to stop
                self.kill(old, signal.SIGTERM)
        self.spawn_due()
        event(log, "reloaded", queues=wanted)
        notify.notify("READY=1\nSTATUS=running")
        self.write_status()

    def stop_all(self) -> None:
        """Stop the workers, leave the registry, then stop Redis (the embedded one goes last)."""
        notify.notify("STOPPING=1")
        self.stopping = True
        self.stop_children(("bucket", "queue"))
        if self.registrar is not None:
            self.registrar.stop()  # while Redis is still there to take the unregister
        self.stop_children(("redis",))
        if self.metrics is not None:
            self.metrics.close()
        self.pidfile.release()
        status = Path(self.config.state_dir) / "status.json"
        status.unlink(missing_ok=True)

    def stop_children(self, kinds: tuple[str, ...]) -> None:
        """SIGTERM to the children of these kinds, wait up to graceful_timeout, SIGKILL the rest."""
        self.signal_children(signal.SIGTERM, kinds)
        deadline = time.monotonic() + self.config.graceful_timeout + 1.0
        while any(s.kind in kinds for s in self.by_pid.values()):
            self.reap()
            if time.monotonic() > deadline:
                for pid, slot in list(self.by_pid.items()):
                    if slot.kind in kinds:
                        event(log, "child_killed", logging.WARNING, child=slot.name, child_pid=pid,
                              reason="graceful timeout")
                        self.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 5.0
            try:
                self.events.get(timeout=0.05)  # SIGCHLD wakes us; other signals are moot now
            except queue_mod.Empty:
                pass

    def registry_entry(self) -> dict:
        """This daemon's entry in the registry of live daemons (read from the registry thread)."""
        return {"host": socket.gethostname(), "pid": os.getpid(), "name": self.config.name,
                "version": __version__, "started": self.started, "state": "stopping" if self.stopping else "running",
                "buckets": self.config.buckets, "queues": self.config.queues,
                "concurrency": self.config.concurrency, "embedded_redis": self.embedded,
                "children": [{"name": s.name, "pid": s.pid, "restarts": s.restarts, "crash_looping": s.crash_looping}
                             for s in list(self.slots)]}

    def write_status(self) -> None:
        """state_dir/status.json: what `delayd status` adds to what psutil shows."""
        data = {"pid": os.getpid(), "started": self.started,
                "redis": connection.redact(self.config.redis_url), "embedded_redis": self.embedded,
                "metrics": "http://{}:{}/metrics".format(*self.metrics.address) if self.metrics else None,
                "slots": [{"name": s.name, "pid": s.pid, "restarts": s.restarts,
                           "crash_looping": s.crash_looping} for s in self.slots]}
        path = Path(self.config.state_dir) / "status.json"
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(data))
            os.replace(tmp, path)
        except OSError as exc:
            event(log, "status_not_written", logging.WARNING, error=str(exc))
