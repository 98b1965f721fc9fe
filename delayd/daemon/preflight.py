"""What is checked before the daemon starts, so that a start that cannot work fails
with one line on the terminal (StartError) instead of in the log of a daemon."""
from __future__ import annotations

import logging
import os

from delayd.config import Config
from delayd.daemon import embedded
from delayd.log import event
from delayd.store import connection
from delayd.store.connection import REDIS_ERRORS, ResponseError
from delayd.store.keys import StoreError, recorded_buckets
from delayd.store.server_info import describe
from delayd.store.steps import command
from delayd.store.transport import Transport

log = logging.getLogger("delayd.master")


class StartError(RuntimeError):
    """The daemon cannot start; the message is one line for the terminal."""


def check_redis(config: Config) -> None:
    """Redis answers, and the stored layout matches ours (bucket count); a server that can evict or lose
    tasks is warned about. Raises StartError, also for any command the server refuses but CONFIG."""
    client = connection.connect(config.redis_url)
    transport = Transport(client)
    try:
        transport.send(command("PING"))
        stored = recorded_buckets(client, config.prefix, config.buckets)
        if stored != config.buckets:
            raise StartError(f"the store at prefix {config.prefix!r} has {stored} buckets but the config says "
                             f"{config.buckets}; set buckets = {stored} (changing it would orphan tasks)")
        info = transport.send(command("INFO"))  # (the default sections: server and persistence among them)
        server = describe(info)
        event(log, "redis_server", server=server)
        try:
            policy = transport.send(command("CONFIG GET", "maxmemory-policy")).get("maxmemory-policy", "noeviction")
            compact = transport.send(command("CONFIG GET", "hash-max-ziplist-value")).get("hash-max-ziplist-value")
        except ResponseError as exc:  # managed Redis often renames or disables CONFIG: the policy is unknown
            policy = compact = None
            event(log, "redis_policy_unknown", server=server, reason=str(exc),
                  advice="CONFIG is refused: make sure maxmemory-policy is noeviction or tasks can be evicted")
        if policy not in (None, "noeviction"):
            event(log, "redis_may_evict", logging.WARNING, server=server, maxmemory_policy=policy,
                  advice="set maxmemory-policy noeviction or tasks can be evicted")
        if compact is not None and compact.isdigit() and int(compact) < embedded.RECORD_VALUE_BYTES:
            event(log, "redis_records_not_compact", server=server, hash_max_listpack_value=int(compact),
                  advice=f"set hash-max-listpack-value {embedded.RECORD_VALUE_BYTES}: a task whose spec is over "
                         f"{compact} bytes takes about 1.7 times the memory (docs/guides/running.md, Redis settings)")
        if not info.get("aof_enabled"):
            event(log, "redis_not_durable", logging.WARNING, server=server,
                  advice="enable appendonly yes (appendfsync everysec) or a Redis restart loses tasks")
    except ResponseError as exc:
        raise StartError(f"Redis at {connection.where(config.redis_url)}: {exc}") from None
    except REDIS_ERRORS as exc:
        raise StartError(connection.not_redis(config.redis_url, exc)
                         or f"cannot reach Redis at {connection.where(config.redis_url)}: {exc}") from None
    except StoreError as exc:
        raise StartError(str(exc)) from None
    finally:
        connection.close(client)


def preflight(config: Config) -> None:
    """Everything that can be checked before detaching, so errors reach the terminal."""
    if not os.access(config.state_dir, os.W_OK):
        raise StartError(f"state directory {config.state_dir} is not writable")
    if config.redis_url:
        check_redis(config)
    else:
        try:
            embedded.find_redis_server()
        except FileNotFoundError as exc:
            raise StartError(str(exc)) from None
