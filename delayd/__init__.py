"""delayd: delayed and recurring tasks stored in Redis, run by a supervised daemon.

The public names below are imported on first use (PEP 562), so that importing a part of the
package (the `delayd` command, the model) does not import both clients and redis-py with it.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from delayd.version import __version__

if TYPE_CHECKING:
    from delayd.client.async_client import AsyncClient
    from delayd.client.errors import Overtaken
    from delayd.client.sync_client import AddInterrupted, Client, DelaydError, DurabilityError, RedisUnavailable
    from delayd.model.deletion import CLAIMED
    from delayd.model.task import Task, TaskError

_HOMES = {"Client": "delayd.client.sync_client", "AsyncClient": "delayd.client.async_client",
          "Task": "delayd.model.task", "TaskError": "delayd.model.task", "DelaydError": "delayd.client.sync_client",
          "DurabilityError": "delayd.client.sync_client", "RedisUnavailable": "delayd.client.sync_client",
          "AddInterrupted": "delayd.client.sync_client", "Overtaken": "delayd.client.errors",
          "CLAIMED": "delayd.model.deletion"}

__all__ = ["Client", "AsyncClient", "Task", "TaskError", "DelaydError", "DurabilityError", "RedisUnavailable",
           "AddInterrupted", "Overtaken", "CLAIMED", "__version__"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'delayd' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
