"""The master's thread that keeps its entry in the registry of live daemons fresh (the entries
and their keys: delayd.store.registry), and logs each URL host disabled or enabled (delayd hosts
disable|enable, by any client) as it sees the change, within a beat: every daemon's log says so."""
from __future__ import annotations

import logging
import signal
import threading
from typing import Any, Callable

from delayd.config import Config
from delayd.daemon.current_redis import CurrentRedis
from delayd.log import event
from delayd.store import connection
from delayd.store.connection import REDIS_ERRORS
from delayd.store.keys import hosts_off_key
from delayd.store.registry import BEAT, register, unregister
from delayd.store.steps import command
from delayd.store.transport import Transport
from delayd.workers.process import HANDLED_SIGNALS

log = logging.getLogger("delayd.registry")


class Registrar(threading.Thread):
    """The master's thread that keeps its entry fresh; `stop()` removes the entry.

    It blocks the master's signals; a child forked while it has a connection open
    closes its copy at once (worker.close_inherited), so it needs no lock. Every beat
    uses one client (CurrentRedis, made again when a reload changes redis_url): a client
    per beat left the master's RSS growing for hours (each one's reply buffers wait for a
    full garbage collection and fragment the heap).
    """

    def __init__(self, current: Callable[[], Config], ident: str, entry: Callable[[], dict[str, Any]]):
        """`current` is the master's config as it is now (it follows reloads)."""
        super().__init__(name="delayd-registry", daemon=True)
        self.current = current
        self.daemon_id = ident
        self.entry = entry
        self.stopped = threading.Event()
        self.failing: set[str] = set()  # the calls (register, watch_hosts) failing now: each logs its own outage
        self.disabled: dict[str, str] | None = None  # origin -> when (ms), as last seen; None: not read yet
        self.redis = CurrentRedis(current, socket_connect_timeout=2.0, socket_timeout=2.0)

    def run(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
        while not self.stopped.is_set():
            self.call(register, self.entry())
            self.call(self.watch_hosts)
            self.stopped.wait(BEAT)

    def stop(self) -> None:
        self.stopped.set()
        self.join(timeout=10)
        self.call(unregister)
        self.redis.close()

    def watch_hosts(self, client: Any, prefix: str, _daemon_id: str) -> None:
        """Log the hosts disabled and enabled since the last look (at start: those disabled)."""
        try:
            now: dict[str, str] = Transport(client).send(command("HGETALL", hosts_off_key(prefix)))
        except connection.ResponseError:  # not a hash: the next disable or enable sets it aside
            now = {}
        before = self.disabled or {}
        for origin in sorted(now.keys() - before.keys()):
            event(log, "host_disabled", logging.WARNING, host=origin, since_ms=now[origin])
        for origin in sorted(before.keys() - now.keys()):
            event(log, "host_enabled", host=origin)
        self.disabled = now

    def call(self, func: Callable[..., Any], *args: Any) -> None:
        """func(client, prefix, daemon id, *args); a Redis error is logged once per outage of that call
        (the children say more about it), and never ends the thread."""
        config, name = self.current(), func.__name__
        try:
            func(self.redis.get(), config.prefix, self.daemon_id, *args)
        except REDIS_ERRORS as exc:
            if name not in self.failing:
                self.failing.add(name)
                event(log, "registry_unavailable", logging.WARNING, call=name,
                      redis=connection.where(config.redis_url), error=str(exc))
            return
        if name in self.failing:
            self.failing.discard(name)
            event(log, "registry_back", call=name)
