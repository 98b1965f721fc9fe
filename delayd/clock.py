"""Times as people read them, for the command line and the dashboard alike."""
from __future__ import annotations

import time


def local_time(seconds: float | None) -> str:
    """Unix seconds as local time to the ms ('-' for none); a time no calendar holds (from a
    corrupt record) as `?(value)` instead of an error."""
    if seconds is None:
        return "-"
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds)) + f".{int(seconds * 1000) % 1000:03d}"
    except (OverflowError, ValueError, OSError):
        return f"?({seconds})"
