"""One total deadline for an HTTP request, enforced on every socket operation.

httpx's timeouts are per phase and per read: the wait for a pooled connection, the
connect and every read each get the whole timeout, so a request could take several
times its timeout, and a server dribbling its answer a byte at a time could hold it
forever. Here the connection pool's network backend cuts every connect, TLS
handshake, read and write to the time left before the calling thread's deadline,
and refuses to start one once it has passed: the request as a whole ends by then.

The deadline is per thread (a sync httpx request runs entirely on its caller's
thread), so one pool serves concurrent requests with deadlines of their own.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Iterator

import httpcore
import httpx

_local = threading.local()


@contextlib.contextmanager
def total(seconds: float) -> Iterator[None]:
    """Within this block, this thread's HTTP requests end `seconds` from now at the latest."""
    _local.at = time.monotonic() + seconds
    try:
        yield
    finally:
        _local.at = None


def _clamp(timeout: float | None, error: type[Exception]) -> float | None:
    """`timeout` cut to the time left before this thread's deadline; `error` if none is left."""
    at = getattr(_local, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise error("the request's total deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream):
        self.stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.stream.read(max_bytes, _clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, _clamp(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self.stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _Stream(self.stream.start_tls(ssl_context, server_hostname, _clamp(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self.stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, backend: httpcore.NetworkBackend):
        self.backend = backend

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return _Stream(self.backend.connect_tcp(host, port, _clamp(timeout, httpcore.ConnectTimeout),
                                                local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        return _Stream(self.backend.connect_unix_socket(path, _clamp(timeout, httpcore.ConnectTimeout),
                                                        socket_options))

    def sleep(self, seconds: float) -> None:
        self.backend.sleep(seconds)


def transport(**options: Any) -> httpx.HTTPTransport:
    """An httpx transport (`options` as for httpx.HTTPTransport) whose requests keep to `total`."""
    result = httpx.HTTPTransport(**options)
    # httpx has no public way to give its transport a network backend: wrap the one
    # its httpcore pool holds. A test (test_handlers.py, dribbled headers) fails if
    # a new httpx or httpcore version moves it.
    pool = result._pool
    pool._network_backend = _Backend(pool._network_backend)
    return result
