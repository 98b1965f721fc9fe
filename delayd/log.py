"""Logging: one line per event, `key=value` or JSON, to stderr or a file.

    log = logging.getLogger("delayd.queue")
    event(log, "run", task="order:cancel:42", run=1, outcome="ok")
"""
from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from typing import Any

_handler: logging.Handler | None = None


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one event with fields (values are rendered by the formatter)."""
    if logger.isEnabledFor(level):
        logger.log(level, name, extra={"fields": fields})


class Formatter(logging.Formatter):
    def __init__(self, style: str):
        super().__init__()
        self.style = style
        self._second: tuple[int, str, str] = (-1, "", "")

    def timestamp(self, created: float) -> str:
        """Local time with milliseconds and its UTC offset (ISO 8601: 2026-12-04T21:50:07.123+01:00),
        so that lines from hosts in other zones compare; the strftime part is computed once per second."""
        second = int(created)
        if second != self._second[0]:
            local = time.localtime(second)
            offset = time.strftime("%z", local)
            self._second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", local), f"{offset[:3]}:{offset[3:]}")
        return f"{self._second[1]}.{int((created - second) * 1000):03d}{self._second[2]}"

    def format(self, record: logging.LogRecord) -> str:
        fields = {"ts": self.timestamp(record.created), "level": record.levelname.lower(),
                  "proc": os.environ.get("DELAYD_PROC", "delayd"), "pid": record.process,
                  "event": record.getMessage()}
        fields.update(getattr(record, "fields", {}))
        if record.exc_info:
            fields["exc"] = self.formatException(record.exc_info)
        if self.style == "json":
            return json.dumps(fields, default=str, separators=(",", ":"))
        return " ".join(f"{k}={_kv(v)}" for k, v in fields.items() if v is not None)


_NEEDS_QUOTES = re.compile(r'[\s"=]')


def _kv(value: Any) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if not text or _NEEDS_QUOTES.search(text):
        return json.dumps(text)
    return text


def setup(level: str, style: str, path: str | None) -> logging.Handler:
    """Send delayd's logs to `path` (a file) or stderr; replaces any earlier set-up."""
    global _handler
    # Records need no caller, thread or process-name lookups: the logging HOWTO's "Optimization"
    # section gives these three switches (_srcfile is its documented way to skip findCaller).
    logging._srcfile = None
    logging.logThreads = False
    logging.logMultiprocessing = False
    root = logging.getLogger("delayd")
    if _handler is not None:
        root.removeHandler(_handler)
        _handler.close()
    # backslashreplace: a name read from Redis may hold bytes that are not UTF-8 (delayd.store.connection)
    _handler = (logging.FileHandler(path, encoding="utf-8", errors="backslashreplace") if path
                else logging.StreamHandler(sys.stderr))
    _handler.setFormatter(Formatter(style))
    root.addHandler(_handler)
    root.setLevel(level)
    root.propagate = False
    return _handler


def current_path() -> str | None:
    """The log file in use, or None for stderr."""
    return _handler.baseFilename if isinstance(_handler, logging.FileHandler) else None


def descriptors() -> list[int]:
    """The file descriptors logging writes to (kept open in a forked child)."""
    stream = getattr(_handler, "stream", None)
    try:
        return [stream.fileno()] if stream is not None else []
    except (OSError, ValueError):
        return []


def reopen() -> bool:
    """Reopen the log file (SIGUSR1, after logrotate moved it), and stdout/stderr where they wrote
    to it; True if it was reopened. If it cannot be opened (its directory removed, permissions
    changed), logging goes on to the old file, with a warning there, and False."""
    if not isinstance(_handler, logging.FileHandler):
        return False
    try:
        stream = open(_handler.baseFilename, "a", encoding=_handler.encoding, errors=_handler.errors)
    except OSError as exc:
        event(logging.getLogger("delayd.log"), "log_reopen_failed", logging.WARNING, path=_handler.baseFilename,
              error=exc.strerror or str(exc), kept="the old log file")
        return False
    old = _handler.setStream(stream)  # under the handler's lock, the old stream flushed
    if old is not None:
        _follow(old.fileno(), stream.fileno())
        old.close()
    return True


def _follow(old: int, new: int) -> None:
    """Point stdout and stderr at the new log file if they wrote to the old one (as a daemonized
    process's do), so that what uvicorn, warnings and tracebacks write there follows the rotation."""
    was = os.fstat(old)
    for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
        try:
            if not os.path.samestat(os.fstat(fd), was):
                continue
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # closed, or not a file
            continue
        os.dup2(new, fd)
