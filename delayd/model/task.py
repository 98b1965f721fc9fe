"""The task model: what a task is and how it is validated.

Everything written is validated first (`Task.new`, with the checks of delayd.model.checks,
whose names are imported from here too); how a task is stored, and read back defensively, is
delayd.model.record (the wire format).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from delayd.model import make, schedule
from delayd.model.checks import (
    DEFAULT_PARAMS_LIMIT,
    DEFAULT_RETRIES,
    MAX_RETRIES,
    RETRY_JITTER,
    TaskError,
    check_key_name,
    check_target,
    check_topic,
    is_utf8,
    module_allowed,
    parse_intervals,
    printable,
)
from delayd.model.fields import SHOWN

FINISHED = ("ok", "failed", "deleted")
STATUSES = ("delayed", "running", *FINISHED)  # the one table of statuses (delayed first: stats counts it by state)


@dataclass(slots=True)
class Task:
    """One delayed or recurring task, as handlers and the Client see it.

    Times (`created_at`, `due_at`, `last_run_at`) are Unix seconds as floats, by
    Redis's clock. `runs` is the number of the current (or last) run, 1-based.
    """

    topic: str
    id: str
    call: str | None = None
    url: str | None = None
    push: str | None = None
    method: str = "GET"
    body: str = "form"
    params: dict = field(default_factory=dict)
    intervals: list = field(default_factory=lambda: [0])
    persistent: bool = True
    priority: int = 2
    callback: str | None = None
    timeout: float | None = None
    # Recurring schedules (at most one of intervals, every, cron): success does not end them.
    every: float | None = None
    cron: str | None = None
    tz: str | None = None
    # No intervals, every or cron given: a run that neither succeeds nor fails is retried with
    # exponential backoff, at most `retries` times (SPEC 8; None: the reader's `default_retries`).
    backoff: bool = True
    retries: int | None = None
    signing_key: str | None = None  # a url task: the url_signing_keys entry that signs it (None: the default)
    trace: str | None = None  # the W3C trace context of its add: traceparent[ tracestate] (delayd.tracing)
    group: str | None = None  # the tenant it is for (SPEC section 10)
    status: str = "delayed"
    created_at: float | None = None
    due_at: float | None = None
    last_run_at: float | None = None
    runs: int = 0
    last_error: str | None = None
    last_due_at: float | None = None  # a recurring task: the due time its last run was for
    attempts: list = field(default_factory=list)  # the delivery log: the last runs, newest last
    # The fencing token of the claim this copy was read under (internal).
    claim: int = field(default=0, repr=False, compare=False)
    # The params' JSON as add checked it, which the record stores (internal; None: encoded when written).
    params_json: str | None = field(default=None, repr=False, compare=False)
    # `retries` when the task gives none: the reader's (the daemon's, a client's) setting (internal).
    default_retries: int = field(default=DEFAULT_RETRIES, repr=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.topic}:{self.id}"

    @property
    def target(self) -> str:
        """What the task runs, for logs: `call:…`, `url:…` or `push:…`."""
        if self.call:
            return f"call:{self.call}"
        if self.url:
            return f"url:{self.url}"
        return f"push:{self.push}" if self.push else "-"

    @property
    def traceparent(self) -> str | None:
        """The traceparent of its trace context (`trace`), as get shows it."""
        return self.trace and self.trace[:55]

    # Task.new(topic, id, *, call=None, url=None, ..., params_limit=DEFAULT_PARAMS_LIMIT): validate user input
    # (every add argument of the table of fields, delayd.model.fields) and build a task; TaskError with one clear
    # line. params_limit=None is for the fields of a stored record: its params need no serialisability check or
    # copy, and its URL is not held to the add-time rules (a task stored before a rule keeps running). Made at
    # import (delayd.model.make), below the class.
    new: ClassVar[Callable[..., Task]]

    def to_dict(self) -> dict[str, Any]:
        """The task as `delayd get --json` prints it: the fields the table shows (delayd.model.fields.SHOWN)."""
        return {f.name: getattr(self, f.shown) for f in SHOWN}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    # -- schedule --------------------------------------------------------------------
    @property
    def recurring(self) -> bool:
        """An `every` or `cron` task: it runs at each due time whatever the outcome."""
        return self.every is not None or self.cron is not None

    @property
    def retry_limit(self) -> int | None:
        """How many times a run that neither succeeds nor fails is retried (persistent=False: none);
        None for a task with a schedule (intervals, every or cron), which follows it instead."""
        if not self.backoff:
            return None
        if not self.persistent:
            return 0
        return self.default_retries if self.retries is None else self.retries

    def retry_delay(self, max_delay: float, jitter: float) -> float | None:
        """Seconds from the end of this run (number `runs`) to the retry that follows it, or None
        when no retry is left: retry k comes 2^(k-1) s after the run before it, `jitter` (a
        fraction in [0, RETRY_JITTER)) later, capped at `max_delay`."""
        limit = self.retry_limit
        if limit is None or self.runs > limit:
            return None
        exponent = min(max(self.runs, 1) - 1, 64)  # (2^64 s is past any cap: no float overflow)
        return min(2.0 ** exponent * (1 + jitter), max_delay)

    def describe_retries(self, now: float) -> str | None:
        """Retries used, and when the next one comes (`now`: Unix seconds), for `delayd get` and
        the dashboard; None for a task with a schedule."""
        limit = self.retry_limit
        if limit is None:
            return None
        if self.status == "delayed" and self.runs >= 1 and self.due_at is not None:
            wait = max(self.due_at - now, 0.0)
            return f"retry {self.runs} of {limit}, next in {wait:.{1 if wait < 10 else 0}f} s"
        return f"{max(self.runs - 1, 0)} of {limit} used"

    def describe_schedule(self) -> str:
        """The schedule in words, for `delayd get`."""
        once = "" if self.persistent else ", one run"
        if self.every is not None:
            return f"every {self.every:g} s{once}"
        if self.cron is not None:
            return f"cron '{self.cron}' in {self.tz}{once}"
        if self.backoff:
            limit = self.retry_limit
            return "once when due" + (f"; on error retried with backoff (1, 2, 4 … s) up to {limit} "
                                      f"time{'s' if limit != 1 else ''}, then failed" if limit else
                                      ", no retries")
        until = "then every last interval" if self.persistent else "then failed"
        return f"intervals {','.join(f'{i:g}' for i in self.intervals)} until success ({until})"

    def next_due_ms(self, due_ms: int, now_ms: int) -> int | None:
        """A recurring task's next due time after a run that was due at `due_ms` and was
        claimed at `now_ms` (Redis's clock); None when the schedule has no next time."""
        if self.every is not None:
            return schedule.next_every(self.every, due_ms, now_ms)
        return schedule.next_cron(self.cron, self.tz, now_ms)

    def next_gap(self) -> float | None:
        """Seconds from this run's due time to the next run, or None when the list is used up.

        After run k (1-based) the next gap is intervals[k]; past the end it is
        intervals[-1] if persistent, else the task is over. A repeat gap of 0 is
        raised to 1 s so that a task that never succeeds cannot spin.
        """
        if self.runs < len(self.intervals):
            gap = self.intervals[self.runs]
        elif self.persistent:
            gap = self.intervals[-1]
        else:
            return None
        return gap if gap > 0 else 1


Task.new = classmethod(make.task_new(Task, DEFAULT_PARAMS_LIMIT))

__all__ = ["FINISHED", "STATUSES", "Task", "TaskError", "DEFAULT_RETRIES", "MAX_RETRIES", "RETRY_JITTER",
           "check_key_name", "check_target", "check_topic", "is_utf8", "module_allowed", "parse_intervals",
           "printable"]
