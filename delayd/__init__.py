"""delayd: delayed and recurring tasks stored in Redis, run by a supervised daemon."""
__version__ = "0.1.0"

from .async_client import AsyncClient  # noqa: E402
from .client import AddInterrupted, Client, DelaydError, DurabilityError, RedisUnavailable  # noqa: E402
from .task import Task, TaskError  # noqa: E402

__all__ = ["Client", "AsyncClient", "Task", "TaskError", "DelaydError", "DurabilityError", "RedisUnavailable",
           "AddInterrupted", "__version__"]
