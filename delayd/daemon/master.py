"""The master: starts, supervises and stops the bucket, queue and embedded-Redis children.

Modelled on gunicorn's arbiter: signal handlers only put the signal on a queue;
one loop does all the work (reaping, restarting, reloading, heartbeat checks), and
an exception that escapes it is logged, the children are stopped, and the master
exits 1. Slots, backoff and heartbeat files: slots.py; SIGHUP: reload.py; status.json,
the registry entry and /metrics' view of the slots: status.py; the embedded Redis:
embedded.py; the fork of a child: delayd.workers.process.

The /metrics and registry threads open sockets while the master forks; a child
closes every descriptor it inherits except its own (start_child), so forks need
no lock against those threads and a slow Redis never stalls the loop.
"""
from __future__ import annotations

import logging
import os
import queue as queue_mod
import signal
import threading
import time
from typing import Callable

from setproctitle import setproctitle

from delayd import config as config_mod
from delayd import log as log_mod
from delayd.config import Config
from delayd.daemon import embedded, notify, start_record
from delayd.daemon.pidfile import PidFile
from delayd.daemon.preflight import StartError, check_redis
from delayd.daemon.registrar import Registrar
from delayd.daemon.reload import Reloading
from delayd.daemon.slots import (
    KILL_AFTER_ABORT,
    Retiring,
    Slot,
    backdate,
    close_quietly,
    describe_exit,
    heartbeat_file,
    read_note,
    silent_for,
)
from delayd.daemon.status import Reports, status_path
from delayd.log import event
from delayd.store import connection, registry
from delayd.web import child as web_child
from delayd.workers import bucket
from delayd.workers.process import HANDLED_SIGNALS, start_child, title
from delayd.workers.queue import loop as queue_loop

log = logging.getLogger("delayd.master")
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
UP = "up"  # an event beside the signals: a child's first heartbeat (the wake-up pipe)


class Master(Reloading, Reports):
    def __init__(self, config: Config, pidfile: PidFile, reread: config_mod.Recipe,
                 ready: Callable[[str], None] | None = None):
        """`reread` builds the config again on SIGHUP, with the start's file, flags and environment
        (and `delayd restart` starts on it: start_record)."""
        self.config = config
        self.reread = reread
        self.pidfile = pidfile
        self.ready_callback = ready
        self.events: queue_mod.SimpleQueue = queue_mod.SimpleQueue()
        self.embedded = config.redis_url is None
        if self.embedded:
            self.config = config_mod.replace(config, redis_url=connection.embedded_url(config.state_dir))
        self.slots: list[Slot] = []
        self.by_pid: dict[int, Slot] = {}
        self.retiring: dict[int, Retiring] = {}
        self.stopping = False
        self.started = time.time()
        self.reloads = 0           # SIGHUPs handled, and the last one's error ('' = reloaded): status.json
        self.reload_error = ""
        self.watchdog = notify.watchdog_interval()
        self.next_watchdog = time.monotonic()
        self.metrics = None
        self.registrar: Registrar | None = None
        self.web_socket = None  # the dashboard's listening socket, shared by each `delayd: web` child
        self.up_pipe: int | None = None  # the write end each child is given (Heartbeat): see watch_ups

    # -- signals -------------------------------------------------------------------
    def install_signals(self) -> None:
        for sig in HANDLED_SIGNALS:
            signal.signal(sig, lambda signum, frame: self.events.put(signum))

    def watch_ups(self) -> None:
        """A pipe every child writes one byte to at its first heartbeat; a thread turns each byte
        into an UP event, so waiting for children to come up sleeps until one does (or a signal)."""
        read_end, self.up_pipe = os.pipe()  # (not inherited by the embedded redis-server's exec)

        def relay() -> None:
            while os.read(read_end, 512):
                self.events.put(UP)
        threading.Thread(target=relay, name="child-ups", daemon=True).start()

    # -- lifecycle -----------------------------------------------------------------
    def run(self) -> int:
        setproctitle(title(self.config, "master"))
        os.environ["DELAYD_PROC"] = "master"
        self.install_signals()
        self.watch_ups()
        self.pidfile.write()
        try:
            start_record.save(self.config, self.reread)
        except OSError as exc:  # `delayd restart` then starts on its own config, and says so
            event(log, "start_record_not_written", logging.WARNING, error=str(exc))
        event(log, "master_started", redis=connection.redact(self.config.redis_url), buckets=self.config.buckets,
              queues=self.config.queues, lease_s=self.config.lease,
              lease_from="task_timeout + max(30 s, 20 %)" if self.config.lease_derived else "config")
        for warning in self.config.warnings:
            event(log, "config_warning", logging.WARNING, warning=warning)
        try:
            if not self.start_children():
                return 1
            while not self.stopping:
                self.loop_once()
        except Exception:  # noqa: BLE001 - as gunicorn's arbiter: log it, stop cleanly, exit non-zero
            log.critical("master_crashed", exc_info=True, extra={"fields": {"children": len(self.by_pid)}})
            self.ready("error: the master crashed; see the log")
            self.stop_all()
            return 1
        self.stop_all()
        event(log, "master_stopped")
        return 0

    def start_children(self) -> bool:
        """Start Redis (if embedded) and the children and wait for them; False (all stopped) if it failed."""
        try:
            if self.embedded:
                self.start_embedded_redis()
            check_redis(self.config)
            self.start_metrics()
            self.start_web()
            self.slots += [Slot("bucket", b) for b in range(self.config.buckets)]
            self.slots += [Slot("queue", q) for q in range(self.config.queues)]
            self.spawn_due()
            self.wait_children_up()
        except StartError as exc:
            event(log, "start_failed", logging.ERROR, error=str(exc))
            self.ready(f"error: {exc}")
            self.stop_all()
            return False
        self.write_status()
        notify.notify(f"READY=1\nMAINPID={os.getpid()}\nSTATUS=running")
        self.ready("ok")
        event(log, "master_ready", children=len(self.by_pid))
        self.registrar = Registrar(lambda: self.config, registry.daemon_id(self.config, os.getpid()),
                                   self.registry_entry)
        self.registrar.start()
        return True

    def ready(self, message: str) -> None:
        if self.ready_callback:
            self.ready_callback(message)
            self.ready_callback = None

    def loop_once(self) -> None:
        try:
            item = self.events.get(timeout=self.next_timeout())
        except queue_mod.Empty:
            item = None
        if item is not None and item != UP:  # (a restarted child's first beat: nothing to do)
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
        timers += [r.kill_at - now for r in self.retiring.values() if r.kill_at is not None]
        if self.watchdog:
            timers.append(self.next_watchdog - now)
        return max(0.0, min(timers))

    def handle_signal(self, sig: int) -> None:
        if sig in STOP_SIGNALS:
            event(log, "stopping", signal=signal.Signals(sig).name)
            self.stopping = True
        elif sig == signal.SIGHUP:
            self.reload()
        elif sig == signal.SIGUSR1:
            reopened = log_mod.reopen()  # False: it goes on with the old file (and said so)
            self.signal_children(signal.SIGUSR1, ("bucket", "queue", "web"))
            if reopened:
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

    def start_web(self) -> None:
        """Open the dashboard's socket and add its `delayd: web` slot (config web_port; off when unset)."""
        try:
            self.web_socket = web_child.open_socket(self.config)
        except config_mod.ConfigError as exc:
            raise StartError(str(exc)) from None
        if self.web_socket is not None:
            self.slots.append(Slot("web", 0))

    def spawn(self, slot: Slot) -> bool:
        """Start the slot's child; a failed fork or mkstemp (EAGAIN, EMFILE) is retried after a backoff."""
        try:
            self._spawn(slot)
            return True
        except OSError as exc:
            delay = slot.back_off()
            slot.last_error = f"spawn failed: {exc}"
            event(log, "spawn_failed", logging.ERROR, child=slot.name, error=str(exc), retry_in_s=delay)
            return False

    def _spawn(self, slot: Slot) -> None:
        if slot.kind == "redis":
            pid = embedded.spawn(self.config)
        else:
            if slot.heartbeat is None:
                slot.heartbeat = heartbeat_file(slot)
            slot.spawned_at = backdate(slot.heartbeat)
            body = bucket.main if slot.kind == "bucket" else queue_loop.main
            keep = ()
            if slot.kind == "web":
                body = lambda cfg, _index, hb: web_child.main(cfg, self.web_socket, hb)  # noqa: E731
                keep = (self.web_socket.fileno(),)
            pid = start_child(self.config, slot.name, slot.heartbeat,
                              lambda cfg, hb, index=slot.index: body(cfg, index, hb), keep=keep, up=self.up_pipe)
        slot.pid, slot.started, slot.aborted_at = pid, time.monotonic(), None
        self.by_pid[pid] = slot
        event(log, "child_started", child=slot.name, child_pid=pid, restarts=slot.restarts)

    def start_embedded_redis(self) -> None:
        slot = Slot("redis", 0)
        self.slots.append(slot)
        self.spawn(slot)

        def alive() -> bool:
            self.reap()
            return slot.pid is not None
        problem = embedded.wait_until_up(self.config, alive)
        if problem:
            raise StartError(problem)

    def wait_children_up(self) -> None:
        """Until every Python child has touched its heartbeat once. A child that dies first (or
        cannot be forked), or one still silent after heartbeat_timeout, fails the start: StartError
        with the error it left (so `delayd start` says it, and systemd never hears READY=1).

        It sleeps until a child's first beat (UP), a signal or the deadline: no poll. A stop signal
        ends the wait at once; other signals are kept for the main loop."""
        timeout = self.config.heartbeat_timeout
        deadline = time.monotonic() + timeout
        kept = []
        while True:
            self.reap()
            for slot in self.slots:
                note = read_note(slot.heartbeat) if slot.pid and slot.heartbeat is not None else ""
                if slot.pid is None or note:  # dead, or dying: its note also touched the heartbeat file
                    raise StartError(f"{slot.name} could not start: {note or slot.last_error}")
            waiting = [s for s in self.slots
                       if s.kind != "redis" and os.fstat(s.heartbeat).st_mtime < s.spawned_at - 0.5]
            if not waiting:
                break
            if time.monotonic() >= deadline:
                raise StartError(f"{', '.join(s.name for s in waiting)} did not come up within {timeout:g} s "
                                 "(heartbeat_timeout); see the log")
            try:
                sig = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue_mod.Empty:
                continue
            if sig in STOP_SIGNALS:
                self.stopping = True
                return
            if sig not in (signal.SIGCHLD, UP):
                kept.append(sig)
        for sig in kept:
            self.events.put(sig)

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
        retired = self.retiring.pop(pid, None)
        if retired is not None:
            close_quietly(retired.heartbeat)
            event(log, "child_retired", child=retired.name, child_pid=pid, how=describe_exit(status))
            return
        slot = self.by_pid.pop(pid, None)
        if slot is None:
            return
        ran = time.monotonic() - slot.started
        if self.stopping:
            slot.pid = None
            event(log, "child_stopped", child=slot.name, child_pid=pid, how=describe_exit(status))
            return
        delay = slot.died(ran)
        note = read_note(slot.heartbeat) if slot.heartbeat is not None else ""
        slot.last_error = note or describe_exit(status)
        level = logging.CRITICAL if slot.crash_looping else logging.WARNING
        event(log, "child_died", level, child=slot.name, child_pid=pid, how=describe_exit(status),
              ran_s=round(ran, 3), restart_in_s=delay, crash_looping=slot.crash_looping or None, error=note or None)
        self.write_status()

    def check_heartbeats(self) -> None:
        """Abort a silent child, kill an aborted one that is still there, and a retiring one past its time."""
        now = time.monotonic()
        for retired in self.retiring.values():
            if retired.kill_at is not None and now >= retired.kill_at:
                event(log, "child_killed", logging.WARNING, child=retired.name, child_pid=retired.pid,
                      reason="retiring past its graceful timeout")
                self.kill(retired.pid, signal.SIGKILL)
                retired.kill_at = None
        for slot in self.slots:
            if slot.pid is None or slot.heartbeat is None:
                continue
            if slot.aborted_at is not None:
                if now - slot.aborted_at >= KILL_AFTER_ABORT:
                    self.kill(slot.pid, signal.SIGKILL)
                continue
            silent = silent_for(slot.heartbeat)
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

    def children_of(self, kinds: tuple[str, ...]) -> dict[int, str]:
        """pid -> name of the children of these kinds, retiring ones included."""
        found = {pid: slot.name for pid, slot in self.by_pid.items() if slot.kind in kinds}
        found.update((pid, r.name) for pid, r in self.retiring.items() if r.kind in kinds)
        return found

    def signal_children(self, sig: int, kinds: tuple[str, ...] = ("bucket", "queue")) -> None:
        for pid in self.children_of(kinds):
            self.kill(pid, sig)

    def retire(self, slot: Slot) -> int:
        """The slot's child becomes a retiring one, with its heartbeat file; returns its pid (not signalled)."""
        pid = self.hold(slot).pid
        self.retiring[pid].kill_at = time.monotonic() + self.config.graceful_timeout + KILL_AFTER_ABORT
        return pid

    def hold(self, slot: Slot) -> Retiring:
        """The slot's child leaves it and is kept aside, running and not signalled, with no deadline
        (a reload's old child, until the new one is up: let_go, or taken back)."""
        held = Retiring(slot.pid, slot.kind, slot.name, slot.heartbeat, None)
        self.by_pid.pop(slot.pid, None)
        self.retiring[held.pid] = held
        slot.pid, slot.heartbeat, slot.aborted_at = None, None, None
        return held

    def let_go(self, child: Retiring) -> None:
        """Tell a retiring child to stop; it is killed if it outlives its graceful timeout."""
        if child.pid in self.retiring:
            child.kill_at = time.monotonic() + self.config.graceful_timeout + KILL_AFTER_ABORT
            self.kill(child.pid, signal.SIGTERM)

    def drop(self, slot: Slot) -> None:
        """Remove a slot: its child is told to stop and retires."""
        self.slots.remove(slot)
        if slot.pid:
            self.kill(self.retire(slot), signal.SIGTERM)
        close_quietly(slot.heartbeat)

    def resize_queues(self, delta: int) -> None:
        queues = [s for s in self.slots if s.kind == "queue"]
        if delta > 0:
            self.slots.append(Slot("queue", max((s.index for s in queues), default=-1) + 1))
        elif len(queues) > 1:
            self.drop(queues[-1])
        event(log, "queues_resized", queues=len([s for s in self.slots if s.kind == "queue"]))
        self.write_status()

    def stop_all(self) -> None:
        """Stop the workers, leave the registry, then stop Redis (the embedded one goes last)."""
        notify.notify("STOPPING=1")
        self.stopping = True
        self.stop_children(("bucket", "queue", "web"))
        if self.registrar is not None:
            self.registrar.stop()  # while Redis is still there to take the unregister
        self.stop_children(("redis",))
        if self.metrics is not None:
            self.metrics.close()
        if self.web_socket is not None:
            self.web_socket.close()
        self.pidfile.release()
        status_path(self.config).unlink(missing_ok=True)
        start_record.remove(self.config)

    def stop_children(self, kinds: tuple[str, ...]) -> None:
        """SIGTERM to the children of these kinds, wait up to graceful_timeout, SIGKILL the rest."""
        self.signal_children(signal.SIGTERM, kinds)
        deadline = time.monotonic() + self.config.graceful_timeout + 1.0
        while True:
            self.reap()
            if not self.children_of(kinds):
                return
            if time.monotonic() > deadline:
                for pid, name in self.children_of(kinds).items():
                    event(log, "child_killed", logging.WARNING, child=name, child_pid=pid, reason="graceful timeout")
                    self.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 5.0
            try:
                self.events.get(timeout=max(0.0, deadline - time.monotonic()))  # SIGCHLD wakes us; the rest is moot
            except queue_mod.Empty:
                pass

