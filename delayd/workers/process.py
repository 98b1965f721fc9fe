"""What every child process shares: the fork and the set-up after it, heartbeat, Redis backoff,
and (ChildProcess) the signals, Redis client and event queue of a bucket or queue process.

The master forks a child with `start_child` (the embedded Redis with `fork` alone); the child
never returns from it.
"""
from __future__ import annotations

import ctypes
import gc
import logging
import os
import queue as queue_mod
import random
import signal
import threading
import time
from typing import Any, Callable

from setproctitle import setproctitle

from delayd import log as log_mod
from delayd.config import Config
from delayd.store import connection
from delayd.store.connection import REDIS_ERRORS, EqualJitterBackoff
from delayd.store.transitions import Store

log = logging.getLogger("delayd.worker")
PR_SET_PDEATHSIG = 1
# Every error of a Redis call is an outage to a child, not a reason to die: a lost
# connection, and a working server that refuses (OOM under maxmemory noeviction,
# BUSY, LOADING, READONLY, MASTERDOWN, NOREPLICAS, CLUSTERDOWN, a script error).
# Dying would cost the outcomes a queue process holds and crash-loop every bucket
# process into the master's backoff; waiting it out costs nothing.
NOTE_BYTES = 2000  # at most this much of a dying child's note is kept
HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGCHLD,
                   signal.SIGTTIN, signal.SIGTTOU, signal.SIGQUIT)
# What a bucket or queue process's signals put on its event queue: stop gracefully, reopen the log.
CHILD_SIGNALS = {signal.SIGTERM: "stop", signal.SIGINT: "stop", signal.SIGUSR1: "reopen"}


class StartupFailure(RuntimeError):
    """A child cannot do its work (e.g. a preload module does not import); the message is one line."""


def crash_note(exc: BaseException) -> str:
    """One line on why a child died, for its master (`delayd start`, `delayd status`)."""
    if isinstance(exc, StartupFailure):
        return str(exc)
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def leave_note(fd: int, note: str) -> None:
    """Write `note` into the child's heartbeat file (the master emptied it at the spawn), in one
    write: the master reads it as the child's last error, and a note means "not up"."""
    try:
        os.pwrite(fd, note.encode(errors="backslashreplace")[:NOTE_BYTES], 0)
    except OSError:
        pass  # the log has the traceback anyway


def set_death_signal(sig: int, parent: int) -> None:
    """Die with `sig` when the master dies (and right now if it already has)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the heartbeat-free master check below still catches it at start
    if os.getppid() != parent:  # the master died before prctl took effect
        os._exit(1)


def title(config: Config, role: str) -> str:
    return f"delayd: {role}" + (f" [{config.name}]" if config.name else "")


class Heartbeat:
    """A child touches its (unlinked) temp file; the master reads its mtime (gunicorn's way).

    The mtime is set to the monotonic clock, not the wall clock: CLOCK_MONOTONIC is
    system-wide on Linux, so the master compares it with its own time.monotonic(),
    and a step of the wall clock neither aborts every child nor hides a hung one."""

    def __init__(self, fd: int, up: int | None = None):
        self.fd = fd
        self.up = up  # the master's wake-up pipe: one byte at the first beat says "up", then closed
        self.last = float("-inf")

    def beat(self) -> None:
        now = time.monotonic()
        if now - self.last >= 1.0:
            os.utime(self.fd, (now, now))
            self.last = now
            if self.up is not None:
                up, self.up = self.up, None
                try:
                    os.write(up, b"u")
                except OSError:
                    pass  # a master that is gone reads nothing: it no longer waits for us
                finally:
                    os.close(up)


# Seconds before the next try to reach Redis after `failures` failed ones (redis-py's capped
# exponential backoff, half of it jittered).
RECONNECT = EqualJitterBackoff(cap=5.0, base=0.1)


# What a script's error says (Redis 6.2 and 7, Valkey); unless it carries an error reply that means the
# server cannot serve now (a write refused for memory, a replica, a disk, a failover), which is an outage.
SCRIPT_ERRORS = ("user_script", "user_function", "Error running script")
OUTAGES = ("OOM command not allowed", "READONLY", "MISCONF", "LOADING", "MASTERDOWN", "NOREPLICAS", "CLUSTERDOWN",
           "TRYAGAIN")


def refused(exc: Exception) -> bool:
    """Whether `exc` is a script failing in Redis (a defect to report as such), not Redis unavailable."""
    text = str(exc)
    return (isinstance(exc, connection.ResponseError) and any(marker in text for marker in SCRIPT_ERRORS)
            and not any(marker in text for marker in OUTAGES))


class RedisHealth:
    """Logs a Redis outage once when it starts and once when it ends; a request Redis refuses (a script's
    error) is logged as `redis_refused` with the error, once per spell, since it is no outage."""

    def __init__(self, log: logging.Logger, url: str):
        self.log, self.url, self.down_since = log, url, None
        self.failures = 0

    def failed(self, exc: Exception) -> float:
        if self.down_since is None:
            self.down_since = time.monotonic()
            name = "redis_refused" if refused(exc) else "redis_unavailable"
            self.log.warning(name, extra={"fields": {"redis": connection.where(self.url), "error": str(exc)}})
        self.failures += 1
        return RECONNECT.compute(self.failures)

    def ok(self) -> None:
        if self.down_since is not None:
            self.log.warning("redis_back", extra={"fields": {
                "redis": connection.where(self.url), "down_s": round(time.monotonic() - self.down_since, 3)}})
            self.down_since = None
            self.failures = 0


def listen(redis_client: Any, channel: str, events: Any, kind: str, stop_after: float = 5.0) -> None:
    """Thread body: put (kind, data) on `events` for every message on `channel`.

    After every (re)subscription it puts (kind, None), meaning "look at everything",
    since messages published while the connection was down are lost. It outlives
    any error (without it, wake-ups would wait for the sleep cap): a Redis outage
    is logged by the process's main loop, anything else here once per episode.

    The one Redis use outside the store's transport: a subscription is not a request and its
    reply but a connection that stays in subscribed mode, which redis-py's PubSub holds (and
    routes on Cluster, where a message reaches every node); this loop is its retry on errors.
    """
    failures = 0
    failing = False
    while True:
        pubsub = None
        try:
            pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(channel)
            events.put((kind, None))
            failures = 0
            while True:
                message = pubsub.get_message(timeout=stop_after)
                failing = False
                if message is not None:
                    events.put((kind, message["data"]))
        except Exception as exc:  # noqa: BLE001 - see the docstring
            if not failing and not isinstance(exc, REDIS_ERRORS):
                log.warning("listener_error", exc_info=True, extra={"fields": {"channel": channel}})
            failing = True
        finally:
            if pubsub is not None:
                try:
                    pubsub.close()
                except Exception:  # noqa: BLE001 - a broken connection may not close cleanly
                    pass
        failures += 1
        time.sleep(RECONNECT.compute(failures))


class ChildProcess:
    """What a bucket and a queue process are made of: the config and heartbeat, a Redis client
    and Store, RedisHealth for outages, and one event queue on which the signals (CHILD_SIGNALS)
    and the listener of the wake-up channel put what happens, so the process sleeps in one place."""

    def __init__(self, config: Config, heartbeat: Heartbeat, log: logging.Logger):
        self.config = config
        self.heartbeat = heartbeat
        self.redis = connection.connect(config.redis_url)
        self.store = Store(self.redis, config.prefix, config.buckets)
        self.health = RedisHealth(log, config.redis_url)
        self.events: queue_mod.SimpleQueue = queue_mod.SimpleQueue()

    def start_listening(self, channel: str, kind: str) -> None:
        """Route the signals to the event queue and start the listener thread of `channel`."""
        for sig, what in CHILD_SIGNALS.items():
            signal.signal(sig, lambda s, f, what=what: self.events.put((what, None)))
        threading.Thread(target=listen, args=(self.redis, channel, self.events, kind),
                         daemon=True, name="listener").start()


def close_inherited(keep: set[int]) -> None:
    """Close every descriptor above stderr except `keep`: the master's lock, the other
    children's heartbeat files, and whatever its /metrics and registry threads had open
    at the moment of the fork (a scrape's connection, a Redis socket) are not ours."""
    low = 3
    for fd in sorted(fd for fd in keep if fd >= low):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def fork(death_signal: int) -> int:
    """Fork; returns the child's pid, or 0 in the child. The child gets the default handling of
    every signal the master handles, an empty signal mask and a process group of its own (a
    terminal's Ctrl-C reaches the master only; it stops the children), and dies with
    `death_signal` when the master dies. The caller's child branch must end in os._exit.

    The child never garbage-collects what it inherits (gc.freeze): the master's garbage (a
    preflight's Sentinel client, say) holds sockets whose descriptors the child closes, and
    finalized later it would close whatever reuses those numbers (an epoll, a Redis socket)."""
    parent = os.getpid()
    gc.freeze()
    try:
        pid = os.fork()
    except BaseException:
        gc.unfreeze()
        raise
    if pid:
        gc.unfreeze()
        return pid
    try:
        for sig in HANDLED_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        os.setpgid(0, 0)
        set_death_signal(death_signal, parent)
    except BaseException:  # noqa: BLE001 - a child must never return into the master's code
        os._exit(1)
    return 0


def start_child(config: Config, role: str, heartbeat_fd: int, body: Callable[[Config, Heartbeat], Any],
                keep: tuple[int, ...] = (), up: int | None = None) -> int:
    """Fork; in the child, prepare the process and run `body`, then exit. Returns the pid.

    The child closes every inherited descriptor but its heartbeat, `up` (the master's wake-up
    pipe, written at the first beat), the log and `keep`. A child that dies of an exception
    leaves a one-line note in its heartbeat file (leave_note).
    """
    pid = fork(signal.SIGKILL)
    if pid:
        return pid
    code = 0
    try:
        close_inherited({heartbeat_fd, *log_mod.descriptors(), *keep, *([] if up is None else [up])})
        os.environ["DELAYD_PROC"] = role.replace(" ", ".")
        setproctitle(title(config, role))
        random.seed()
        body(config, Heartbeat(heartbeat_fd, up))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # noqa: BLE001 - a child must never return into the master's code
        logging.getLogger("delayd").exception("child_crashed", extra={"fields": {"role": role}})
        leave_note(heartbeat_fd, crash_note(exc))
        code = 1
    finally:
        logging.shutdown()
        os._exit(code)
