"""Redis connections from URLs: plain, TLS, unix socket, Cluster and Sentinel; and the few
redis-py names the rest of delayd uses (its errors, its reconnect backoff), so that only the
store and the clients import redis.

    redis://[[user]:password@]host[:port][/db]      rediss://… for TLS
    unix:///path/to/redis.sock[?db=0]
    redis+cluster://host1:port1,host2:port2/        or redis://host:port/?cluster=true
    redis+sentinel://host1:26379,host2:26379/service[/db]
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
from redis.backoff import EqualJitterBackoff as EqualJitterBackoff  # (re-exported: see the docstring)
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel

# Options every delayd connection uses: fail fast instead of hanging on a dead host.
# Replies are decoded as UTF-8 with surrogateescape: bytes that are not UTF-8 (written
# by anyone with access to Redis) become lone surrogates instead of an exception in
# the reply parser, which would crash whichever process read them. They survive a
# round trip (a member name sent back names the same key); delayd.model.record rejects
# them in a record, and task.printable() makes them safe to print.
SOCKET_OPTIONS = dict(socket_connect_timeout=5.0, socket_timeout=30.0, health_check_interval=15,
                      socket_keepalive=True, decode_responses=True, encoding_errors="surrogateescape")


# What every process treats as "Redis is not there (now)": retried, reported, never fatal.
REDIS_ERRORS = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)
ResponseError = redis.exceptions.ResponseError  # an error reply (WRONGTYPE, a renamed command...)


def not_redis(url: str, exc: Exception) -> str | None:
    """One line for a reply that is not Redis's protocol at all (an HTTP server, say, on the URL's
    port: redis-py raises InvalidResponse, a RedisError the callers would not recognise), naming
    the URL's host and port; None for any other error."""
    if isinstance(exc, redis.exceptions.InvalidResponse):
        return f"the server at {where(url)} did not answer as Redis: {exc}"
    return None


def embedded_socket(state_dir: str | os.PathLike) -> Path:
    """The unix socket of the embedded Redis of `state_dir` (the daemon starts it there)."""
    return Path(state_dir) / "redis.sock"


def embedded_url(state_dir: str | os.PathLike) -> str:
    """The URL clients use to reach the embedded Redis of `state_dir`."""
    return f"unix://{embedded_socket(state_dir)}"


class RedisURLError(ValueError):
    """A Redis URL that cannot be used."""


def redact(url: str | None) -> str:
    """The URL with any password replaced by `***`: safe for logs, errors and `ps`."""
    if not url:
        return "(embedded)"
    url = re.sub(r"(//[^/@]*?:)[^/@]*@", r"\1***@", url)
    return re.sub(r"([?&][a-z_]*password=)[^&]*", r"\1***", url)


def _hosts(netloc: str, default_port: int) -> list[tuple[str, int]]:
    hosts = []
    for part in netloc.split(","):
        host, _, port = part.rpartition(":") if ":" in part else (part, "", str(default_port))
        host = host.strip("[]")
        if not host or not port.isdigit():
            raise RedisURLError(f"bad host:port {part!r} in Redis URL")
        hosts.append((host, int(port)))
    return hosts


def _split_auth(netloc: str) -> tuple[str | None, str | None, str]:
    if "@" not in netloc:
        return None, None, netloc
    auth, _, hosts = netloc.rpartition("@")
    user, _, password = auth.partition(":")
    return unquote(user) or None, unquote(password) or None, hosts


def _is_cluster(parts: Any, query: dict[str, str]) -> bool:
    return parts.scheme in ("redis+cluster", "rediss+cluster") or \
        query.get("cluster", "").lower() in ("1", "true", "yes")


class Flavour(NamedTuple):
    """redis-py's client classes of one kind: blocking (SYNC) or redis.asyncio (ASYNC)."""

    redis: Any
    cluster: Any
    node: Any
    sentinel: Any


SYNC = Flavour(redis.Redis, RedisCluster, ClusterNode, Sentinel)
ASYNC = Flavour(redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster, redis.asyncio.cluster.ClusterNode,
                redis.asyncio.sentinel.Sentinel)


def connect(url: str, flavour: Flavour = SYNC, **options: Any) -> Any:
    """A redis-py client for `url` (Redis, RedisCluster, or a Sentinel-managed master); with
    flavour=ASYNC the same of redis.asyncio."""
    opts = {**SOCKET_OPTIONS, **options}
    parts = urlsplit(url)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    scheme = parts.scheme
    if _is_cluster(parts, query):
        user, password, netloc = _split_auth(parts.netloc)
        nodes = [flavour.node(h, p) for h, p in _hosts(netloc, 6379)]
        opts.pop("health_check_interval", None)  # not a RedisCluster option
        return flavour.cluster(startup_nodes=nodes, username=user, password=password,
                               ssl=scheme.startswith("rediss"), **opts)
    if scheme == "redis+sentinel":
        user, password, netloc = _split_auth(parts.netloc)
        path = [p for p in parts.path.split("/") if p]
        if not path:
            raise RedisURLError("a sentinel URL needs a service name: redis+sentinel://host:26379/mymaster/0")
        service, db = path[0], int(path[1]) if len(path) > 1 and path[1].isdigit() else 0
        sentinel = flavour.sentinel(_hosts(netloc, 26379), sentinel_kwargs={
            "socket_timeout": 5.0, "password": query.get("sentinel_password")},
            username=user, password=password, db=db, **opts)
        return sentinel.master_for(service)
    return _plain(flavour.redis, url, opts)


def close(client: Any) -> None:
    """Close a sync client and, behind a Sentinel URL, its connections to the sentinels (the
    client's own close leaves those to the garbage collector: in a process that forks after, a
    child would then close descriptor numbers it reuses)."""
    client.close()
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    for sentinel in getattr(manager, "sentinels", ()):
        sentinel.close()


def _plain(factory: Any, url: str, opts: dict[str, Any]) -> Any:
    """A client of `factory` (redis.Redis or redis.asyncio.Redis) for a redis://, rediss:// or unix:// URL."""
    scheme = urlsplit(url).scheme
    if scheme not in ("redis", "rediss", "unix"):
        raise RedisURLError(f"unsupported Redis URL scheme {scheme!r}: use redis://, rediss://, unix://, "
                            "redis+cluster:// or redis+sentinel://")
    if scheme == "unix":
        opts.pop("socket_keepalive", None)  # a TCP option: unix-socket connections refuse it
    try:
        return factory.from_url(url, **opts)
    except ValueError as exc:
        raise RedisURLError(f"bad Redis URL {redact(url)}: {exc}") from None


def where(url: str) -> str:
    """Host and port (or socket path) of a URL, for error messages."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parts.path
    return _split_auth(parts.netloc)[2] or "localhost:6379"
