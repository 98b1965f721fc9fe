"""Statistics from the counters every script keeps in Redis (docs/redis-layout.md, "Counters").

Every daemon on every host writes into the same per-bucket hashes, so whoever
reads them (`delayd stats`, the master's /metrics) sees the whole installation.
Reading costs a peek at the heads of the ready lists, then one stats.lua call per bucket with
those members' records (two round trips), then the per-topic hashes a page at a time (HSCAN): in all
O(buckets x topics), never O(tasks), and no single call grows with the topics.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from delayd.model.task import STATUSES, printable
from delayd.store import limits as limits_mod
from delayd.store.keys import PRIORITIES, host_events_key, hosts_off_key
from delayd.store.replies import BucketStats
from delayd.store.scripts import SCRIPTS
from delayd.store.steps import Batch, ScriptCall, Steps, Stream, command
from delayd.store.transitions import Store
from delayd.store.transport import Transport
from delayd.store.windows import WINDOW_MS, recent_windows

# Upper bounds (ms) of the lateness histogram; lua/_counts.lua has the same list.
LATENESS_MS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000)
WINDOWS = 7          # "the last minute": the current window and the six before it (60-70 s)
SCAN_LIMIT = 200     # entries per list looked at for the per-topic oldest due time
SCAN_PAGE = 500      # fields per HSCAN of a per-topic hash (~0.4 ms of Redis each at 1,000,000 fields)
OUTCOMES = ("ok", "failed", "retry", "quarantine")  # of runs made (tasks/s counts these)
DEFER = "defer"  # a run not made: its URL's circuit was open, the task waits for the probe (no run counted)
SHOWN = (*OUTCOMES, DEFER)  # what stats and /metrics show per outcome
# The counters of task states: a delayed task is waiting, ready (per priority), parked or throttled
# (held back by its topic's limit); the other states are the statuses themselves
# (delayd.model.task.STATUSES).
STATES = ("waiting", "ready:3", "ready:2", "ready:1", "parked", "throttled", *STATUSES[1:])
# Beside them, `host|<origin>`: a URL host's tasks still to be delivered (lua/_counts.lua, count_host).
HOST = "host"


def _pairs(flat: list[Any]) -> Iterable[tuple[str, str, int]]:
    """(name, topic, value) from a flat HGETALL of `<name>|<topic>` fields.

    A value that is not an integer (a corrupt counter; the next script call that
    changes it starts it again) is left out, a negative one (written by someone else:
    the scripts stop counts at 0) counts as 0; a topic that is not UTF-8 is shown escaped."""
    for i in range(0, len(flat), 2):
        name, _, topic = flat[i].partition("|")
        try:
            value = int(flat[i + 1])
        except ValueError:
            continue
        yield name, printable(topic), max(0, value)


def host_counts(replies: Iterable[dict[str, Any]]) -> dict[str, int]:
    """The URL tasks still to be delivered per origin, summed over counts hashes (HGETALL replies)."""
    waiting: dict[str, int] = {}
    for reply in replies:
        flat = [item for field, value in reply.items() if field.startswith(HOST + "|") for item in (field, value)]
        for _, origin, value in _pairs(flat):
            if value:
                waiting[origin] = waiting.get(origin, 0) + value
    return waiting


def status_of(state: str) -> str:
    """The task status a state counter counts: waiting, ready and parked tasks are delayed."""
    return state if state in STATUSES else "delayed"


def task_count(counters: dict[str, Any], status: str | None = None) -> int:
    """How many tasks (with a status) the fields `<state>|<topic>` of a counts hash hold."""
    flat = [item for field, value in counters.items() if value is not None for item in (field, value)]
    return sum(value for state, _, value in _pairs(flat) if state in STATES and status in (None, status_of(state)))


def _due_at(score: str | None) -> float | None:
    """The head of `delayed` (a score in ms) as seconds; None when empty or not a finite time
    (an entry at +inf, written by someone else, is never due)."""
    seconds = float(score) / 1000 if score else None
    return seconds if seconds is not None and math.isfinite(seconds) else None


def _new_counts() -> dict[str, int]:
    return dict.fromkeys(STATES, 0)


def new_events() -> dict[str, int]:
    return {**dict.fromkeys(SHOWN, 0), "started": 0, "lapsed": 0, "lateness_ms": 0, "limited": 0, "limited_ms": 0,
            **{f"le:{b}": 0 for b in (*LATENESS_MS, "inf")}}


def add_event(events: dict[str, int], name: str, value: int) -> None:
    """Fold one stored counter into `events`. Runs started are the sum of the lateness buckets (one `le:`
    per start, claim.lua); a field no script writes (`started` among them) is skipped."""
    if name == "started" or name not in events:
        return
    if name.startswith("le:"):
        events["started"] += value
    events[name] += value


def histogram(events: dict[str, int]) -> list[tuple[float, int]]:
    """Cumulative (upper bound in seconds, count) pairs, ending with (inf, total)."""
    out, total = [], 0
    for b in (*LATENESS_MS, "inf"):
        total += events[f"le:{b}"]
        out.append((float("inf") if b == "inf" else b / 1000, total))
    return out


def quantile(events: dict[str, int], q: float) -> float | None:
    """The q-quantile of lateness in seconds, interpolated inside its histogram bucket
    (as Prometheus's histogram_quantile); None without runs."""
    buckets = histogram(events)
    total = buckets[-1][1]
    if not total:
        return None
    rank = q * total
    lower, below = 0.0, 0
    for upper, cumulative in buckets:
        if cumulative >= rank:
            if upper == float("inf"):
                return lower  # beyond the last bound: report that bound
            inside = cumulative - below
            return round(lower + (upper - lower) * ((rank - below) / inside if inside else 1.0), 6)
        lower, below = upper, cumulative
    return lower


def _summary(counts: dict[str, int], recent: dict[str, int], span_s: float, oldest_due: float | None,
             now: float) -> dict[str, Any]:
    ready = {str(p): counts[f"ready:{p}"] for p in PRIORITIES}
    finished = sum(recent[o] for o in OUTCOMES)
    return {
        "counts": {"delayed": counts["waiting"] + sum(ready.values()) + counts["parked"] + counts["throttled"],
                   **{status: counts[status] for status in STATUSES[1:]}},
        "waiting": counts["waiting"],
        "ready": ready,
        "parked": counts["parked"],
        "throttled": counts["throttled"],
        "oldest_due_at": oldest_due,
        "oldest_due_lag": round(max(0.0, now - oldest_due), 3) if oldest_due is not None else 0.0,
        "runs_last_minute": {**{o: recent[o] for o in SHOWN}, "started": recent["started"],
                             "lapsed": recent["lapsed"], "limited": recent["limited"]},
        "tasks_per_s": round(finished / span_s, 3),
        # (a topic without runs, most of a large store's, costs no histogram: None either way)
        "lateness": {"p50": quantile(recent, 0.5) if recent["started"] else None,
                     "p99": quantile(recent, 0.99) if recent["started"] else None, "runs": recent["started"]},
    }


def bucket_call(store: Store, b: int, heads: list[Any]) -> ScriptCall:
    """Bucket b's stats.lua call, with the records of the members found at the heads of its ready
    lists (`heads`: one LRANGE reply per list, an error in place of one that is not a list)."""
    keys = store.keys[b]
    lists = [head for head in heads if isinstance(head, list)]
    members = dict.fromkeys(member for head in lists for member in head)
    return ScriptCall(SCRIPTS["stats"],
                      [keys.delayed, keys.quarantine, *recent_windows(keys, store.clock, WINDOWS),
                       *map(keys.task, members)],
                      [keys.task_prefix, WINDOWS, SCAN_LIMIT, int(any(len(head) == SCAN_LIMIT for head in lists))])


def scanned_steps(names: list[str], match: str | None = None) -> Steps[list[Any]]:
    """Every field (or those matching the pattern `match`) of each hash of `names`, as a dict, read a page
    (HSCAN, about SCAN_PAGE fields) per hash per round trip, so that no call blocks Redis longer than a
    page takes, however many topics the hashes hold (issue 41: one HGETALL of 100,000 topics' counts
    took 27 ms). A field HSCAN returns twice (it may, during a rehash) is kept once; a key of another
    type gives its error in place of its dict. The pages are read at different moments: counts that
    change meanwhile may be off by what changed, as any read of many keys would be."""
    found: list[Any] = [{} for _ in names]
    cursors: dict[int, Any] = dict.fromkeys(range(len(names)), 0)
    matching = ("MATCH", match) if match else ()
    while cursors:
        pending = list(cursors)
        replies = yield Batch([command("HSCAN", names[i], cursors[i], *matching, "COUNT", SCAN_PAGE)
                               for i in pending])
        for i, reply in zip(pending, replies):
            if isinstance(reply, Exception):
                found[i] = reply
                del cursors[i]
                continue
            cursor, page = reply
            found[i].update(page if isinstance(page, dict) else zip(page[::2], page[1::2]))
            if int(cursor) == 0:
                del cursors[i]
            else:
                cursors[i] = cursor
    return found


def collect_steps(store: Store) -> Steps[dict[str, Any]]:
    """Counts, lag, throughput and lateness, overall, per topic and per bucket: the heads of the
    ready lists (one round trip), then one stats.lua call per bucket with their records, all in one
    round trip; then the limits set (delayd.store.limits) and the disabled URL hosts with how many
    times hosts were disabled and enabled (delayd hosts disable|enable). A store that has not seen
    Redis's clock yet asks it with the peek (TIME), to name the windows to read."""
    clockless = store.clock.offset_ms is None
    lists = [(*keys.ready, *keys.ready_url) for keys in store.keys]
    heads = iter((yield Batch([*([command("TIME")] if clockless else []),
                               *(command("LRANGE", ready, 0, SCAN_LIMIT - 1) for names in lists for ready in names)])))
    if clockless:
        seconds, micros = next(heads)
        store.clock.observe(int(seconds) * 1000 + int(micros) / 1000)
    answers = yield Stream([bucket_call(store, b, [next(heads) for _ in names]) for b, names in enumerate(lists)],
                           window=None)
    replies = [BucketStats.from_reply(reply) for reply in answers.replies]
    if replies:
        store.clock.observe(max(reply.now for reply in replies))
    hashes = [[keys.counts, keys.totals, keys.paused, *(keys.window(reply.first_window + w) for w in range(WINDOWS))]
              for keys, reply in zip(store.keys, replies)]
    pages = iter([page if isinstance(page, dict) else {}  # (a key of another type reads as empty)
                  for page in (yield from scanned_steps([name for names in hashes for name in names]))])
    stats = summary([(reply, [next(pages) for _ in names]) for reply, names in zip(replies, hashes)])
    stats["limits"] = {limit.topic: {"rate": limit.rate, "concurrency": limit.concurrency, "held": limit.held,
                                     "running": limit.running} for limit in (yield from limits_mod.read_steps(store))}
    off, events = yield Batch([command("HKEYS", hosts_off_key(store.prefix)),
                               command("HGETALL", host_events_key(store.prefix))])
    events = events if isinstance(events, dict) else {}
    stats["hosts"] = {"disabled": sorted(off) if isinstance(off, list) else [],
                      "events": {event: int(events.get(event) or 0) for event in ("disabled", "enabled")}}
    return stats


def collect(redis_client: Any, store: Store) -> dict[str, Any]:
    """collect_steps on a redis-py client."""
    return Transport(redis_client).run(collect_steps(store))


def _flat(fields: dict[Any, Any]) -> list[Any]:
    return [item for pair in fields.items() for item in pair]


def summary(answers: list[tuple[BucketStats, list[dict[Any, Any]]]]) -> dict[str, Any]:
    """collect's answer from, per bucket, its stats.lua answer and its hashes read whole (counts,
    totals, paused, then the windows the answer named)."""
    now_ms = max(a.now for a, _ in answers) if answers else 0
    now = now_ms / 1000
    current = now_ms // WINDOW_MS
    span_s = (WINDOWS - 1) * WINDOW_MS / 1000 + (now_ms - current * WINDOW_MS) / 1000

    counts: dict[str, dict[str, int]] = {}
    totals: dict[str, dict[str, int]] = {}
    recent: dict[str, dict[str, int]] = {}
    earliest: dict[str, float] = {}
    per_bucket, quarantined, truncated, paused = [], 0, False, set()
    for b, (reply, (bucket_counts, bucket_totals, flags, *windows)) in enumerate(answers):
        paused.update(printable(topic) for topic in flags)
        mine = _new_counts()
        for state, topic, value in _pairs(_flat(bucket_counts)):
            if state in mine:
                counts.setdefault(topic, _new_counts())[state] += value
                mine[state] += value
        for name, topic, value in _pairs(_flat(bucket_totals)):
            add_event(totals.setdefault(topic, new_events()), name, value)
        for w, flat in enumerate(windows):
            if reply.first_window + w < current - WINDOWS + 1:
                continue  # this bucket's clock read came before a window boundary: not in the span
            for name, topic, value in _pairs(_flat(flat)):
                add_event(recent.setdefault(topic, new_events()), name, value)
        for i in range(0, len(reply.lag), 2):
            due, topic = int(reply.lag[i + 1]) / 1000, printable(reply.lag[i])
            earliest[topic] = min(due, earliest.get(topic, due))
        quarantined += reply.quarantined
        truncated = truncated or bool(reply.truncated)
        per_bucket.append({
            "bucket": b, "waiting": mine["waiting"], "ready": {str(p): mine[f"ready:{p}"] for p in PRIORITIES},
            "parked": mine["parked"], "running": mine["running"], "ok": mine["ok"], "failed": mine["failed"],
            "deleted": mine["deleted"],
            "quarantined": reply.quarantined, "next_due_at": _due_at(reply.head_due),
        })

    topics = {}
    for topic in sorted(set(counts) | set(recent) | set(earliest) | paused):
        row = _summary(counts.get(topic, _new_counts()), recent.get(topic, new_events()), span_s,
                       earliest.get(topic), now)
        row["paused"] = topic in paused
        if any(row["counts"].values()) or any(row["runs_last_minute"].values()) or row["paused"]:
            topics[topic] = row
    overall_counts, overall_recent = _new_counts(), new_events()
    for c in counts.values():
        for k, v in c.items():
            overall_counts[k] += v
    for e in recent.values():
        for k, v in e.items():
            overall_recent[k] += v
    next_due = min((b["next_due_at"] for b in per_bucket if b["next_due_at"] is not None), default=None)
    return {
        "time": now,
        "buckets": len(answers),
        **_summary(overall_counts, overall_recent, span_s, min(earliest.values(), default=None), now),
        "quarantined": quarantined,
        "paused": sorted(paused),
        "next_due_at": next_due,
        "window_s": round(span_s, 3),
        "oldest_due_exact": not truncated,
        "topics": topics,
        "totals": {topic: events for topic, events in sorted(totals.items())},
        "per_bucket": per_bucket,
    }
