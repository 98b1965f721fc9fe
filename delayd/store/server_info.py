"""Which server delayd talks to, from its INFO reply: Redis or Valkey, and its real version.

Valkey reports `server_name:valkey` and `valkey_version`, and pins `redis_version` at 7.2.4 (the
Redis it forked from), so the Redis version alone would call every Valkey "Redis 7.2.4". What a
command needs is still judged by `redis_version` (Valkey has all of Redis 7.2: functions, WAITAOF...):
version(); describe() is for what delayd shows people: the preflight's log lines and durable=True's refusals.
"""
from __future__ import annotations

from typing import Any


def describe(info: dict[str, Any]) -> str:
    """'Valkey 8.0.1', 'Redis 7.0.15' (or 'Redis ?' when INFO did not say), from an INFO reply."""
    name = str(info.get("server_name") or "redis")
    version = info.get(f"{name}_version") or info.get("redis_version") or "?"
    return f"{name.capitalize()} {version}"


def version(info: dict[str, Any]) -> tuple[int, int]:
    """The Redis version whose commands this server has (Valkey's `redis_version` says which)."""
    parts = str(info.get("redis_version", "0.0")).split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return 0, 0
