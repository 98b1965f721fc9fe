"""SIGHUP: the master rereads its config and replaces its children, all or none: the new ones
start beside the old, which stop only once every new one is up; otherwise the reload is undone.

A mixin of Master (delayd.daemon.master): it uses the master's slot bookkeeping (spawn, hold,
let_go, retire, drop, kill, wait_children_up); the outcome goes to status.json, and `delayd
reload`, waiting on a FIFO (reload_wait), is woken to read it.
"""
from __future__ import annotations

import logging
import signal
import time
from typing import Callable, NamedTuple

from delayd import config as config_mod
from delayd import log as log_mod
from delayd.config import Config
from delayd.daemon import notify
from delayd.daemon.preflight import StartError
from delayd.daemon.reload_wait import wake_reload_waiters
from delayd.daemon.slots import Retiring, Slot
from delayd.log import event

log = logging.getLogger("delayd.master")


class Held(NamedTuple):
    """A slot's old child during a reload: running, not yet told to stop (Master.hold)."""
    slot: Slot
    started: float
    spawned_at: float
    child: Retiring


class Reloading:
    config: Config
    reread: Callable[[], Config]
    embedded: bool
    slots: list[Slot]
    reloads: int
    reload_error: str

    def reload(self) -> None:
        """SIGHUP: reread the config and start a new child beside each old one; once every new child
        is up, the old ones are told to stop. If one does not come up, the reload is undone (undo):
        the new children stop and the old ones, never signalled, go on with the old config. Children
        waiting to restart start at once (the reload may be their fix). The outcome goes to
        status.json, where `delayd reload` waits for it."""
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
        old_config, self.config = self.config, new
        log_mod.setup(new.log_level, new.log_format, log_mod.current_path())
        queues = [s for s in self.slots if s.kind == "queue"]
        surplus = queues[new.queues:]  # dropped once the new children are up
        self.slots += [Slot("queue", index) for index in range(len(queues), new.queues)]
        held: list[Held] = []
        for slot in self.slots:
            if slot.kind == "redis" or slot in surplus:
                continue
            if slot.pid:
                held.append(Held(slot, slot.started, slot.spawned_at, self.hold(slot)))
            slot.start_at = time.monotonic()
        self.spawn_due()
        try:
            self.wait_children_up()
        except StartError as exc:
            self.undo(old_config, held, surplus)
            self.reloaded(f"{exc}; the old config keeps running", "reload failed, running the old config")
            return
        for slot in surplus:
            self.drop(slot)
        for old in held:
            self.let_go(old.child)
        event(log, "reloaded", queues=new.queues)
        self.reloaded("", "running")

    def undo(self, old_config: Config, held: list[Held], kept: list[Slot]) -> None:
        """Back to `old_config`: each slot's new child is told to stop, and its old child (held, still
        running) is the slot's again; one that died meanwhile restarts with the old config. A slot the
        old config has no child for (new, or down before the reload) is removed or waits for its restart."""
        self.config = old_config
        log_mod.setup(old_config.log_level, old_config.log_format, log_mod.current_path())
        olds = {old.slot: old for old in held}
        for slot in [s for s in self.slots if s.kind == "queue"][old_config.queues:]:
            self.drop(slot)  # added by this reload
        for slot in self.slots:
            if slot.kind == "redis" or slot in kept:
                continue
            if slot.pid:
                self.kill(self.retire(slot), signal.SIGTERM)
            old = olds.get(slot)
            if old is not None and self.retiring.pop(old.child.pid, None) is not None:
                slot.pid, slot.heartbeat, slot.started, slot.spawned_at = (old.child.pid, old.child.heartbeat,
                                                                          old.started, old.spawned_at)
                self.by_pid[slot.pid] = slot
            elif old is not None:
                slot.start_at = time.monotonic()
            else:
                slot.back_off()
        self.write_status()

    def reloaded(self, error: str, status: str) -> None:
        """Record a reload's outcome ('' = done) for `delayd reload`, and end systemd's RELOADING=1."""
        if error:
            event(log, "reload_failed", logging.ERROR, error=error)
        self.reloads += 1
        self.reload_error = error
        notify.notify(f"READY=1\nSTATUS={status}")
        self.write_status()
        wake_reload_waiters(self.config.state_dir)
