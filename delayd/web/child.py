"""The `delayd: web` child: the master opens the dashboard's socket once (so a bad bind
stops `delayd start` with one line, and a restarted child reuses the socket) and
supervises a child that serves on it and touches its heartbeat from the event loop
(a wedged loop stops the heartbeat, and the master replaces the child). SIGUSR1
reopens its log, as in every other process.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import socket

from delayd.config import Config, ConfigError
from delayd.log import event, reopen
from delayd.web import command
from delayd.workers.process import Heartbeat

log = logging.getLogger("delayd.web")


def open_socket(config: Config) -> socket.socket | None:
    """The listening socket when web_port is set, else None. Raises ConfigError (one line)."""
    if config.web_port is None:
        return None
    try:
        return command.listen(config)
    except OSError as exc:
        raise ConfigError(f"cannot serve the dashboard on {config.web_bind}:{config.web_port}: "
                          f"{exc.strerror or exc}") from None


def main(config: Config, sock: socket.socket, heartbeat: Heartbeat) -> None:
    # SIGUSR1 (log reopen) waits, blocked, until the event loop handles it: its default would kill the child.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})

    async def beat() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, reopen)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
        event(log, "web_started", bind=config.web_bind, port=sock.getsockname()[1])
        while True:
            heartbeat.beat()
            await asyncio.sleep(1.0)
    command.serve(config, sock, beat)
