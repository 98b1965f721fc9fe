"""`durable=True` on Client.add/add_many: the write is confirmed beyond Redis's memory.

A durable add waits, on the connection that wrote, until the write is on a replica (`WAIT`)
or fsynced to the AOF (`WAITAOF`, Redis >= 7.2; nothing to wait for with `appendfsync
always`); where neither can confirm it, it raises DurabilityError before writing anything
(`command` chooses). A client keeps the plan for PLAN_TTL seconds instead of asking INFO and
CONFIG GET before every add; the wait's reply still decides. A wait that times out raises
DurabilityError saying the tasks were written but not confirmed.
"""
from __future__ import annotations

from typing import Any

from delayd.store.server_info import describe, version

DEFAULT_TIMEOUT = 5.0  # seconds a durable add waits for the confirmation
PLAN_TTL = 10.0  # seconds a client keeps a WAIT / WAITAOF plan before asking INFO and CONFIG again


class Unconfirmable(Exception):
    """This Redis offers no way to confirm a write; the message says why (one line)."""


def command(info: dict[str, Any], appendfsync: str | None, timeout_ms: int) -> tuple[Any, ...]:
    """The command that confirms a write on this Redis, () if none is needed; else Unconfirmable.

    In this order: a connected replica: `WAIT 1`; Redis >= 7.2 with appendonly: `WAITAOF 1 0`;
    appendfsync always: nothing (an acknowledged write is on disk); anything else (no replica,
    no AOF, or everysec before 7.2) cannot be confirmed.
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
    have = f"{describe(info)}, "
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
