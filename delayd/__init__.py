"""delayd: delayed and recurring tasks stored in Redis, run by a supervised daemon."""
from delayd.client.async_client import AsyncClient
from delayd.client.sync_client import (
           AddInterrupted,
           Client,
           DelaydError,
           DurabilityError,
           RedisUnavailable,
)
from delayd.model.task import Task, TaskError
from delayd.version import __version__

__all__ = ["Client", "AsyncClient", "Task", "TaskError", "DelaydError", "DurabilityError", "RedisUnavailable",
           "AddInterrupted", "__version__"]
