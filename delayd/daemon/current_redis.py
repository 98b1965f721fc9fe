"""The Redis client of the master's own threads (the registrar, the metrics collector): one client,
kept (a client per beat or per scrape left the master's RSS growing: tests/daemon/test_registrar.py),
that follows the master's config across reloads: made at its first use, and again when a reload
changed `redis_url` (the password is part of it), the old one closed (a scrape still reading through
it then reports Redis down, once)."""
from __future__ import annotations

import threading
from typing import Any, Callable

from delayd.config import Config
from delayd.store import connection


class CurrentRedis:
    """The client of `current().redis_url` (the master's config as it is now), with `options`."""

    def __init__(self, current: Callable[[], Config], **options: Any):
        self.current = current
        self.options = options
        self.client: Any = None
        self.url: str | None = None
        self.lock = threading.Lock()  # (scrapes run in threads of their own)

    def get(self) -> Any:
        """The client; raises what connecting raises (REDIS_ERRORS: a Cluster none of whose nodes
        answers refuses to be made), and the next call tries again."""
        url = self.current().redis_url
        with self.lock:
            if self.client is None or url != self.url:
                self.close_client()
                self.client, self.url = connection.connect(url, **self.options), url
            return self.client

    def close(self) -> None:
        with self.lock:
            self.close_client()

    def close_client(self) -> None:
        if self.client is not None:
            connection.close(self.client)
            self.client = None
