"""What a delete answers: True, False or CLAIMED (delete.lua's reply 1, 0 or 2; docs/protocol.md, section 4)."""
from __future__ import annotations

from typing import Union


class Claimed:
    """The type of `delayd.CLAIMED`, its one instance (copied or unpickled, still that one: compare with `is`)."""

    __slots__ = ()
    _instance: Claimed | None = None

    def __new__(cls) -> Claimed:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "delayd.CLAIMED"

    def __reduce__(self) -> str:
        return "CLAIMED"


CLAIMED = Claimed()
"""What `delete()` answers for a task it deleted too late: a run of it had already been claimed, and its
handler may be starting or running (it never runs again after that run, whose result changes nothing).
False as a bool, so that `if client.delete(...)` means "cancelled in time": True is the only answer after
which no run of the task starts; False means there was no such task."""

Deleted = Union[bool, Claimed]
"""The type of delete()'s answer."""


def deleted(reply: int) -> Deleted:
    """delete.lua's reply as delete() answers it: 1 True, 0 False, 2 CLAIMED."""
    return CLAIMED if reply == 2 else reply == 1
