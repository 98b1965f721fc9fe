"""Example handlers for the docs, the demo and the daemon tests.

`delayd.examples` is the one module allowed by default, so every handler here is
harmless whatever a task's params say. Each is called as `handler(task)`.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any
from urllib.parse import urlsplit

from delayd.log import event
from delayd.model.task import Task

log = logging.getLogger("delayd.examples")


def echo(task: Task) -> str:
    """Log the task's key and run number (and its params when the log level is DEBUG); succeed."""
    event(log, "echo", task=task.key, run=task.runs,
          params=task.params if log.isEnabledFor(logging.DEBUG) else None)  # params may be private
    return "success"


def cancel_order(task: Task) -> str:
    """The order-cancel example: cancel order `task.params['order']` (or `task.id`) if unpaid."""
    order = task.params.get("order", task.id)
    # A real handler would check the order is still unpaid, then cancel it, idempotently
    # (a task may run twice if a worker died mid-run): e.g. UPDATE … WHERE status = 'unpaid'.
    event(log, "cancel_order", task=task.key, run=task.runs, order=order)
    return "success"


def flaky(task: Task) -> str:
    """Ask for a retry until run `params['succeed_on']` (default 3), then succeed (and say so)."""
    if task.runs < int(task.params.get("succeed_on", 3)):
        return "retry"
    event(log, "flaky_succeeded", task=task.key, run=task.runs)
    return "success"


def noop(task: Task) -> bool:
    """Do nothing; succeed."""
    return True


_clients: dict[str, Any] = {}
_clients_lock = threading.Lock()


def _redis(url: str) -> Any:
    client = _clients.get(url)
    if client is None:
        with _clients_lock:
            client = _clients.get(url)
            if client is None:
                from delayd.store.connection import connect
                client = _clients[url] = connect(url)
    return client


def record(task: Task) -> str:
    """RPUSH `"<key>:<runs>"` to the list `params['list']` on the Redis at `params['redis']`.

    Tests use it to prove that (and how often) a run happened. Only a Redis on
    this host (loopback or a unix socket) may be named: this module is allowed by
    default, so a task must not be able to point it at another machine.
    """
    url = str(task.params["redis"])
    parts = urlsplit(url)
    if parts.scheme != "unix" and parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        return "fail"
    _redis(url).rpush(task.params["list"], f"{task.key}:{task.runs}")
    return "success"


def slow(task: Task) -> str:
    """Sleep `params['seconds']` (default 1), then succeed."""
    time.sleep(float(task.params.get("seconds", 1)))
    return "success"


def fail(task: Task) -> str:
    """Give up: the task ends failed."""
    return "fail"


def boom(task: Task) -> str:
    """Raise RuntimeError: the run is retried and the error kept in last_error."""
    raise RuntimeError(f"boom (task {task.key}, run {task.runs})")
