"""SIGHUP: the master rereads its config and replaces its children one by one.

A mixin of Master (delayd.daemon.master): it uses the master's slot bookkeeping (spawn,
retire, drop, kill, wait_children_up); the outcome goes to status.json, where `delayd reload`
waits for it.
"""
from __future__ import annotations

import logging
import signal
import time
from typing import Callable

from delayd import config as config_mod
from delayd import log as log_mod
from delayd.config import Config
from delayd.daemon import notify
from delayd.daemon.preflight import StartError
from delayd.daemon.slots import Slot
from delayd.log import event

log = logging.getLogger("delayd.master")


class Reloading:
    config: Config
    reread: Callable[[], Config]
    embedded: bool
    slots: list[Slot]
    reloads: int
    reload_error: str

    def reload(self) -> None:
        """SIGHUP: reread the config and replace the children one by one; children waiting to restart
        start at once (the reload may be their fix). The outcome goes to status.json, where `delayd
        reload` waits for it: refused (the old config keeps running), or a child that did not come up."""
        notify.reloading()
        try:
            new = self.reread()
            if self.embedded:
                new = config_mod.replace(new, redis_url=self.config.redis_url)
            if new.buckets != self.config.buckets or new.prefix != self.config.prefix:
                raise config_mod.ConfigError("buckets and prefix cannot change on reload; restart instead")
        except config_mod.ConfigError as exc:
            self.reloaded(f"{exc}; the old config keeps running", "reload failed, running the old config")
            return
        self.config = new
        log_mod.setup(new.log_level, new.log_format, log_mod.current_path())
        wanted = new.queues
        queues = [s for s in self.slots if s.kind == "queue"]
        for extra in queues[wanted:]:
            self.drop(extra)
        for index in range(len(queues), wanted):
            self.slots.append(Slot("queue", index))
        for slot in self.slots:
            if slot.kind != "redis" and slot.pid:
                old = self.retire(slot)
                self.spawn(slot)          # the new child starts before the old one is told to stop
                self.kill(old, signal.SIGTERM)
            elif slot.kind != "redis":
                slot.start_at = time.monotonic()
        self.spawn_due()
        try:
            self.wait_children_up()
        except StartError as exc:
            self.reloaded(f"the new config is in use, but {exc}", "reloaded, a child is down")
            return
        event(log, "reloaded", queues=wanted)
        self.reloaded("", "running")

    def reloaded(self, error: str, status: str) -> None:
        """Record a reload's outcome ('' = done) for `delayd reload`, and end systemd's RELOADING=1."""
        if error:
            event(log, "reload_failed", logging.ERROR, error=error)
        self.reloads += 1
        self.reload_error = error
        notify.notify(f"READY=1\nSTATUS={status}")
        self.write_status()
