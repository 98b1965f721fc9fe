"""What the scripts answer, decoded into named tuples, and what finish.lua is given.

A script's reply is a list whose positions its header names (`-- Reply: {a, b, tail...}`); the tuple that
reads it has those names for fields, in that order (tests/store/test_script_headers.py holds them equal), and
its `from_reply` unpacks the list into them by name."""
from __future__ import annotations

from typing import Any, NamedTuple

from delayd.model.record import from_record
from delayd.model.task import DEFAULT_RETRIES, Task


class Promoted(NamedTuple):
    """What one promote.lua call did, and when the bucket needs looking at again."""

    moved: int       # due (or released) tasks moved to the ready lists
    reaped: int      # lapsed leases put back to run again
    next_due: int    # ms, the earliest due time still in `delayed` or `limited`; -1 if none
    next_lease: int  # ms, the earliest lease expiry; -1 if none
    clock_us: int    # µs, Redis's clock during the call
    full: bool       # a batch hit the limit, or the call wanted keys it was not given: call again at once
    learned: list[Any]  # the keys the next call is to declare (docs/redis-layout.md, "Declared keys")

    @classmethod
    def from_reply(cls, reply: list[Any]) -> Promoted:
        moved, reaped, next_due, next_lease, clock_us, full, *learned = reply
        return cls(moved, reaped, next_due, next_lease, clock_us, bool(full), learned)


class ClaimedTask(NamedTuple):
    """One task handed out by claim.lua: its member and the record fields it was claimed with.

    runs and claim were computed by the script; the other fields are as stored (so
    any of them may be corrupt: delayd.model.record checks them)."""

    member: str
    spec: str
    runs: int
    claim: int
    due: str
    created: str
    error: str
    priority: str
    first: str  # 'cron': a cron task added without a first due time (add.lua's mode next*), else ''

    def task(self, now_ms: int, default_retries: int = DEFAULT_RETRIES) -> Task:
        """The task as its handler sees it (`default_retries`: the daemon's `retries` setting);
        raises TaskError for a corrupt record."""
        return from_record(self.member, {
            "spec": self.spec, "priority": self.priority, "status": "running", "created": self.created,
            "due": self.due, "last_run": now_ms, "runs": self.runs, "claim": self.claim, "error": self.error},
            default_retries)


CLAIMED_FIELDS = len(ClaimedTask._fields)


class Claimed(NamedTuple):
    """claim.lua's reply: how many members it popped, and the tasks it started."""

    now: int                  # ms, Redis's clock during the claim (the runs' last_run)
    popped: int               # ready members popped (started, or held, parked, skipped, quarantined)
    tasks: list[ClaimedTask]

    @classmethod
    def from_reply(cls, reply: list[Any]) -> Claimed:
        now, popped, *tasks = reply
        return cls(now, popped, [ClaimedTask._make(tasks[i:i + CLAIMED_FIELDS])
                                 for i in range(0, len(tasks), CLAIMED_FIELDS)])


# finish's next due time for a recurring task's last run (ended by its outcome): it leaves `recurring`.
SCHEDULE_ENDS = "end"


class Resumed(NamedTuple):
    """resume.lua's answer: tasks moved back to `delayed`, how many are still parked, the
    resume's generation, and whether a pause that began after the resume holds the bucket."""

    moved: int
    left: int
    generation: int = 0
    overtaken: bool = False

    @classmethod
    def from_reply(cls, reply: list[Any]) -> Resumed:
        moved, left, generation, overtaken = reply
        return cls(int(moved), int(left), int(generation), bool(overtaken))


class Paused(NamedTuple):
    """A pause's outcome: the ready tasks it parked, its generation, and whether a resume that
    began after it reached the first bucket before the pause had flagged them all (the pause
    then finished that resume: the topic is not paused)."""

    parked: int
    generation: int
    overtaken: bool


class RunNow(NamedTuple):
    """run_now.lua's answer: code (1 due now, 2 due now but paused, 3 already due, 0 missing,
    -1 not delayed) and the task's status."""

    code: int
    status: str

    @classmethod
    def from_reply(cls, reply: list[Any]) -> RunNow:
        code, status = reply
        return cls(int(code), status)


class Parking(NamedTuple):
    """park.lua's reply: tasks parked, where the walk of the ready list goes on (-1: at its head, -2: the
    bucket no longer holds this pause), and the topic's members it looked at (for the next call)."""

    parked: int
    position: int
    members: list[str]

    @classmethod
    def from_reply(cls, reply: list[Any]) -> Parking:
        parked, position, *members = reply
        return cls(int(parked), int(position), members)


Score = int | float   # an index's time in ms; a float for the infinities Redis allows in a zset, and for
# a score of `delayed` skewed by its task's priority (a quarter ms: _lib.lua, due_score)


def score_of(text: str) -> Score:
    """A zset score as Redis sends it ('1700000000000', '1700000000000.25', 'inf', '-inf'): an int when
    it is a whole number, else a float (kept exact: a page's cursor must find the entry again)."""
    value = float(text)
    return int(value) if value.is_integer() else value


class BrowseReply(NamedTuple):
    """browse.lua's reply as sent (`browsed` decodes it): `matches` flat (member, score, ...), the last
    entry examined (False, False at the index's end), and `kind`, the key's type, only when the index is not
    a sorted set."""

    matches: list[Any]
    examined: int
    stop_score: Any
    stop_member: Any
    size: int
    kind: list[str]

    @classmethod
    def from_reply(cls, reply: list[Any]) -> BrowseReply:
        matches, examined, stop_score, stop_member, size, *kind = reply
        return cls(matches, examined, stop_score, stop_member, size, kind)


class Browsed(NamedTuple):
    """browse.lua's answer for one bucket's index (the dashboard's task list)."""

    matches: list[tuple[str, Score]]   # (member, score), in the walk's order
    examined: int                      # index entries looked at
    stop: tuple[Score, str] | None     # the last entry examined; None when the index was read to its end
    size: int                          # entries in the index
    problem: str | None                # why the index could not be read (a key of the wrong type), else None


class Finish(NamedTuple):
    """One run's outcome as finish.lua records it."""

    member: str
    claim: int
    outcome: str        # ok, failed, retry, quarantine, defer
    gap_ms: int = 0     # retry: from the due time to the next run
    error: str = ""     # '' clears last_error
    next_due: Any = ""  # a recurring task's next due time (ms), or ''
    wait_ms: int = 0    # the next run no earlier than now + wait (Retry-After; defer: the probe)
    attempt: str = ""   # a line for the delivery log (attempts.encode), or ''


FINISH_FIELDS = len(Finish._fields)


def browsed(index: str, reply: list[Any]) -> Browsed:
    """browse.lua's reply for `index`, decoded."""
    page = BrowseReply.from_reply(reply)
    flat = page.matches
    matches = [(flat[i], score_of(flat[i + 1])) for i in range(0, len(flat), 2)]
    stop = (score_of(page.stop_score), page.stop_member) if page.stop_member else None
    problem = f"{index} is a {page.kind[0]}, not a sorted set: it is left as it is for a person to look at" \
        if page.kind else None
    return Browsed(matches, int(page.examined), stop, int(page.size), problem)


class BucketStats(NamedTuple):
    """stats.lua's reply for one bucket: Redis's clock (ms), the first run-event window to read, the due
    time of the head of `delayed` (or None), tasks quarantined, the earliest due time of the tasks due but
    not started by topic (flat: topic, ms, ...), and whether a scan hit its limit."""

    now: int
    first_window: int
    head_due: Any
    quarantined: int
    lag: list[Any]
    truncated: int

    @classmethod
    def from_reply(cls, reply: list[Any]) -> BucketStats:
        now, first_window, head_due, quarantined, lag, truncated = reply
        return cls(int(now), int(first_window), head_due, int(quarantined), lag, int(truncated))
