"""`durable=True` on Client.add/add_many: the write is confirmed beyond Redis's memory.

Redis acknowledges a write once it is in memory. With `appendfsync everysec` a crash
of Redis (not a clean SHUTDOWN) can lose up to about a second of acknowledged writes.
A durable add waits until the write is on a replica or on disk, choosing, before
anything is written:

1. a replica is connected (`INFO replication`: connected_slaves > 0):
   `WAIT 1 <timeout>` — at least one replica has the write;
2. else Redis >= 7.2 with `appendonly yes`: `WAITAOF 1 0 <timeout>` — the local AOF
   has been fsynced past the write;
3. else `appendonly yes` with `appendfsync always`: Redis fsyncs before it answers,
   so an acknowledged write is on disk already; nothing to wait for;
4. else it cannot be confirmed (no replica, and no AOF, or an AOF with `everysec` on a
   Redis older than 7.2): the add raises DurabilityError and writes nothing.

The wait is sent on the same connection as the write, after it: WAIT and WAITAOF
count the writes of their own connection. A client keeps a WAIT or WAITAOF plan for
PLAN_TTL seconds instead of sending INFO and CONFIG GET before every add: their reply
still decides (a replica gone or an AOF turned off makes the add fail as unconfirmed,
and the plan is asked for again); `appendfsync always`, which nothing confirms
afterwards, is checked before every add. If the wait times out, DurabilityError says that
the tasks were written but not confirmed (they are in Redis and will most likely
run; they are not known to survive a crash of Redis).
"""
from __future__ import annotations

from typing import Any

DEFAULT_TIMEOUT = 5.0  # seconds a durable add waits for the confirmation
PLAN_TTL = 10.0  # seconds a client keeps a WAIT / WAITAOF plan before asking INFO and CONFIG again


class Unconfirmable(Exception):
    """This Redis offers no way to confirm a write; the message says why (one line)."""


def version(info: dict[str, Any]) -> tuple[int, int]:
    parts = str(info.get("redis_version", "0.0")).split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return 0, 0


def command(info: dict[str, Any], appendfsync: str | None, timeout_ms: int) -> tuple[Any, ...]:
    """The command that confirms a write on this Redis, () if none is needed; else Unconfirmable.

    `info` is the reply of INFO (default sections), `appendfsync` the value of that
    setting (None when CONFIG is not available).
    """
    if int(info.get("connected_slaves", 0) or 0) > 0:
        return ("WAIT", 1, timeout_ms)
    aof = str(info.get("aof_enabled", 0)) in ("1", "True", "true")
    if aof and version(info) >= (7, 2):
        return ("WAITAOF", 1, 0, timeout_ms)
    if aof and appendfsync == "always":
        return ()
    have = f"Redis {info.get('redis_version', '?')}, "
    have += "no connected replica, " + (f"appendonly yes with appendfsync {appendfsync or 'unknown'}" if aof
                                        else "appendonly no")
    raise Unconfirmable(f"durable=True needs a connected replica (WAIT), Redis >= 7.2 with appendonly yes "
                        f"(WAITAOF), or appendfsync always; this one has {have}")


def confirmed(cmd: tuple[Any, ...], reply: Any) -> bool:
    """Whether the reply of `cmd` confirms the write."""
    if not cmd:
        return True
    if cmd[0] == "WAIT":
        return int(reply) >= 1
    return int(reply[0]) >= 1  # WAITAOF: [local fsyncs, replicas]
