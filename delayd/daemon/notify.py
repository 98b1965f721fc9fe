"""systemd's notify protocol (sd_notify(3)): READY=1, RELOADING=1, STOPPING=1, WATCHDOG=1."""
from __future__ import annotations

import os
import socket
import time


def notify(state: str) -> bool:
    """Send `state` to $NOTIFY_SOCKET; False when not run under systemd (or it failed)."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.sendto(state.encode(), address)
        return True
    except OSError:
        return False


def reloading() -> bool:
    # Type=notify-reload wants MONOTONIC_USEC with RELOADING=1.
    return notify(f"RELOADING=1\nMONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")


def watchdog_interval() -> float | None:
    """Half of WatchdogSec= (seconds) if systemd asked this process for keep-alives."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or not usec.isdigit() or (pid and pid != str(os.getpid())):
        return None
    return int(usec) / 2e6
