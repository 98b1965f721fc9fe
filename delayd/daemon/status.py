"""What the master tells the world about itself: state_dir/status.json (for `delayd status`
and `delayd reload`), its entry in the registry of live daemons, and /metrics (served from
a thread, with the slots' states).

A mixin of Master (delayd.daemon.master): it reads the master's bookkeeping, never changes it.
"""
from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

from delayd.config import Config
from delayd.daemon.preflight import StartError
from delayd.daemon.slots import Slot
from delayd.log import event
from delayd.store import connection
from delayd.version import __version__

log = logging.getLogger("delayd.master")


def status_path(config: Config) -> Path:
    return Path(config.state_dir) / "status.json"


class Reports:
    config: Config
    slots: list[Slot]
    started: float
    stopping: bool
    embedded: bool
    metrics: Any
    reloads: int
    reload_error: str

    def start_metrics(self) -> None:
        """Serve /metrics from a thread (config metrics_port; off when unset)."""
        if self.config.metrics_port is None:
            return
        from delayd.daemon.metrics import MetricsServer
        try:
            self.metrics = MetricsServer(lambda: self.config, self.slot_states).start()
        except OSError as exc:
            raise StartError(f"cannot serve metrics on {self.config.metrics_bind}:{self.config.metrics_port}: "
                             f"{exc.strerror or exc}") from None
        host, port = self.metrics.address
        event(log, "metrics_serving", url=f"http://{host}:{port}/metrics")

    def slot_states(self) -> list[tuple[str, str, bool, int, bool]]:
        """For /metrics (read from its thread): kind, name, up, restarts, crash-looping of each slot."""
        return [(s.kind, s.name, s.pid is not None, s.restarts, s.crash_looping) for s in list(self.slots)]

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
                "reloads": self.reloads, "reload_error": self.reload_error,
                "slots": [{"name": s.name, "pid": s.pid, "restarts": s.restarts,
                           "crash_looping": s.crash_looping, "last_error": s.last_error} for s in self.slots]}
        path = status_path(self.config)
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(data))
            os.replace(tmp, path)
        except OSError as exc:
            event(log, "status_not_written", logging.WARNING, error=str(exc))
