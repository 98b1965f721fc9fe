"""The transitions of the task store: one method (or steps) per Lua script, building its KEYS
and ARGV and decoding its reply."""
from __future__ import annotations

from functools import cached_property
from typing import Any, Iterable, Sequence

from delayd.model.deletion import Deleted, deleted
from delayd.model.record import spec_json
from delayd.model.task import Task
from delayd.store.keys import (
    BucketKeys,
    bucket_of,
    host_events_key,
    host_key,
    hosts_corrupt_key,
    hosts_off_key,
    hosts_seen_key,
    limits_prefix,
    ready_channel,
    topic_of,
    wire,
)
from delayd.store.replies import (
    FINISH_FIELDS,
    Browsed,
    Claimed,
    Finish,
    Parking,
    Paused,
    Promoted,
    Resumed,
    RunNow,
    Score,
    browsed,
)
from delayd.store.scripts import SCRIPTS
from delayd.store.steps import ScriptCall, Steps, Stream
from delayd.store.transport import Transport, is_cluster
from delayd.store.windows import RedisClock, run_windows

# Parked tasks moved back per resume.lua call (a few ms of Redis time each, whatever the backlog).
RESUME_BATCH = 1000
# Ready-list entries park.lua looks at per call (a pause walks every ready list this many at a time).
PARK_CHUNK = 1000


class Store:
    """The transitions of the task store, for one key prefix and bucket count. Steps run on
    any transport; the plain methods run on `redis_client` (sync: the daemon's processes)."""

    def __init__(self, redis_client: Any, prefix: str, buckets: int):
        self.redis = redis_client
        self.prefix = prefix
        self.buckets = buckets
        self.keys = [BucketKeys(prefix, b) for b in range(buckets)]
        self.clock = RedisClock()  # to name the run-event windows a call declares (delayd.store.windows)
        self.learned: dict[int, list[str | bytes]] = {}  # per bucket, the keys promote's last reply named
        self._add_starts: dict[tuple[int, bool], tuple[list[str], list[Any], Any]] = {}
        # The daemon's scripts read limits on a single Redis only ('': Redis Cluster, none; see
        # docs/redis-layout.md, "Limits").
        self.limits = "" if is_cluster(redis_client) else limits_prefix(prefix)
        # Likewise the disabled hosts, which claim.lua reads ('': Redis Cluster, none can be disabled).
        self.hosts_off = "" if is_cluster(redis_client) else hosts_off_key(prefix)

    def limit_keys(self, topics: Iterable[str], wakes: bool) -> list[Any]:
        """The limits' keys a script may touch for `topics` (declared in its KEYS; none on Redis Cluster,
        where limits are not read): `conf`, each topic's `tat:`, `run:` and `where:`, and if the script
        may wake the buckets holding a topic's tasks (a freed slot, a changed limit), every `limited`."""
        if not self.limits:
            return []
        named = [self.limits + "conf"]
        for topic in dict.fromkeys(topics):
            named += [wire(f"{self.limits}{kind}:{topic}") for kind in ("tat", "run", "where")]
        named.append(self.limits + "corrupt")  # (their set-aside hash, as BucketKeys.corrupt)
        return named + ([keys.limited for keys in self.keys] if wakes else [])

    @cached_property
    def transport(self) -> Transport:
        return Transport(self.redis)

    def keys_for(self, member: str) -> BucketKeys:
        return self.keys[bucket_of(member, self.buckets)]

    # -- producers -------------------------------------------------------------------
    def add_args(self, keys: BucketKeys, tasks: Iterable[tuple[Task, str, Any]]) -> tuple[list[Any], list[Any]]:
        """add.lua's per-task KEYS (the record: its short form, docs/protocol.md section 3) and ARGV (spec,
        priority, mode, value) of (task, mode, value) triples (value: ms, or a debounce's 'WAIT:MOST'); a
        recurring task's mode gets a '*': it goes in the `recurring` index too."""
        task_keys: list[Any] = []
        args: list[Any] = []
        for task, mode, value in tasks:
            task_keys.append(keys.task(task.key))
            args += [spec_json(task), task.priority, mode + "*" if task.recurring else mode, value]
        return task_keys, args

    def add_call(self, keys: BucketKeys, tasks: list[tuple[Task, str, Any]], nx: bool) -> ScriptCall:
        """One add.lua call writing `tasks` of one bucket, checked here (delayd.model.task): flagged 'c',
        so the script does not decode their specs again (docs/protocol.md; its reply: how many it wrote).
        Its leading keys and args are the same for every call of a bucket: packed once (Script.head)."""
        start = self._add_starts.get((keys.bucket, nx))
        if start is None:
            lead_keys, lead_args = [keys.delayed], [f"{int(nx)}c", keys.wake_channel]
            head = SCRIPTS["add"].head(lead_keys, lead_args)
            start = self._add_starts[keys.bucket, nx] = (lead_keys, lead_args, head)
        lead_keys, lead_args, head = start
        task_keys, args = self.add_args(keys, tasks)
        return ScriptCall(SCRIPTS["add"], lead_keys + task_keys, lead_args + args, head)

    def add(self, keys: BucketKeys, tasks: list[tuple[Task, str, Any]], nx: bool) -> int:
        """Write tasks of one bucket in one script call; returns how many were written."""
        return self.transport.call(self.add_call(keys, tasks, nx))

    def delete_steps(self, member: str, hard: bool, retention_ms: int) -> Steps[Deleted]:
        """delete.lua for `member`: True (deleted, no run of it starts), False (none) or CLAIMED (deleted,
        a run already claimed)."""
        keys = self.keys_for(member)
        return deleted((yield ScriptCall(
            SCRIPTS["delete"],
            [keys.task(member), keys.delayed, keys.leases, keys.done("ok"), keys.done("failed"), keys.done("deleted"),
             keys.quarantine, keys.counts, keys.recurring, keys.parked(topic_of(member)), keys.corrupt],
            [wire(member), int(hard), retention_ms],
        )))

    def retry_call(self, member: str, status: str = "failed", span: tuple[int, int] | None = None) -> ScriptCall:
        """retry.lua for `member`: a `status` task (and, for a replay, one that finished in `span`, ms)."""
        keys = self.keys_for(member)
        return ScriptCall(SCRIPTS["retry"],
                          [keys.task(member), keys.delayed, keys.done(status), keys.counts, keys.quarantine,
                           keys.corrupt, keys.recurring],
                          [wire(member), keys.wake_channel, status, *(span or ())])

    def retry_steps(self, member: str) -> Steps[int]:
        """1: the failed task runs again now; 0: no such task; -1: it is not failed."""
        return int((yield self.retry_call(member)))

    def retry_many_steps(self, members: Sequence[str]) -> Steps[list[int]]:
        """retry_steps' answer for each member, in one round trip."""
        answers = yield Stream([self.retry_call(m) for m in members], window=None)
        return [int(code) for code in answers.replies]

    def run_now_steps(self, member: str) -> Steps[RunNow]:
        keys = self.keys_for(member)
        return RunNow.from_reply((yield ScriptCall(
            SCRIPTS["run_now"], [keys.task(member), keys.delayed, keys.paused, keys.counts,
                                 keys.parked(topic_of(member)), keys.corrupt],
            [wire(member), keys.wake_channel])))

    def pause_steps(self, topic: str) -> Steps[Paused]:
        """Pause `topic`: flag it in every bucket (one generation for all, taken on the first),
        then park the topic's tasks already in the ready lists, PARK_CHUNK entries per call.
        The first bucket's walk also checks that the pause still holds there: if a resume that
        began after it has resumed the topic, that resume may have passed buckets before they
        were flagged, so the pause finishes it (for its own generation and older only)."""
        generation = ""
        for keys in self.keys:
            generation = int((yield ScriptCall(SCRIPTS["pause"], [keys.paused, keys.corrupt], [topic, generation])))
        parked = 0
        for keys in self.keys:
            for ready in (*keys.ready, *keys.ready_url):
                position, members = 0, []
                while position >= 0 or members:  # the members a call looked at are parked by the next
                    step = Parking.from_reply((yield ScriptCall(
                        SCRIPTS["park"], [keys.paused, ready, keys.counts, keys.parked(topic), keys.corrupt,
                                          *map(keys.task, members)],
                        [keys.task_prefix, topic, generation, position, PARK_CHUNK])))
                    parked, position, members = parked + step.parked, step.position, step.members
                if position == -2:  # resumed here by a later resume
                    if keys is self.keys[0]:
                        yield from self.resume_steps(topic, generation + 1)
                        return Paused(parked, generation, True)
                    break
        return Paused(parked, generation, False)

    def resume_batch_steps(self, bucket: int, topic: str, batch: int = RESUME_BATCH,
                           generation: int | None = None) -> Steps[Resumed]:
        """Move the earliest `batch` parked tasks of `topic` back to wait for their turn, unless a
        pause of `generation` or later holds the bucket (None: a new resume, its generation taken here)."""
        keys = self.keys[bucket]
        return Resumed.from_reply((yield ScriptCall(
            SCRIPTS["resume"], [keys.paused, keys.delayed, keys.counts, keys.parked(topic), keys.corrupt],
            [topic, keys.wake_channel, batch, "" if generation is None else generation])))

    def resume_steps(self, topic: str, generation: int | None = None) -> Steps[Resumed]:
        """Resume `topic` in every bucket, a batch per call: the pauses before `generation`
        (None: a new resume, which takes its generation on the first bucket). Stops at a bucket
        that a later pause holds (`overtaken`: the pause wins); `moved` counts the parked tasks
        that went back."""
        moved = 0
        for bucket in range(self.buckets):
            while True:
                step = yield from self.resume_batch_steps(bucket, topic, generation=generation)
                moved, generation = moved + step.moved, step.generation
                if step.overtaken:
                    return Resumed(moved, step.left, generation, True)
                if not step.left:
                    break
        return Resumed(moved, 0, generation or 0, False)

    def switch_hosts_steps(self, action: str, origins: Sequence[str]) -> Steps[int]:
        """'disable' or 'enable' URL hosts (host_switch.lua); how many changed."""
        health = [wire(host_key(self.prefix, origin)) for origin in origins] if action == "enable" else []
        return int((yield ScriptCall(SCRIPTS["host_switch"],
                                     [hosts_off_key(self.prefix), host_events_key(self.prefix),
                                      hosts_corrupt_key(self.prefix), *health],
                                     [action, *origins])))

    def enable_steps(self) -> Steps[int]:
        """Move back the URL tasks set aside for disabled hosts (claim.lua), in every bucket, a batch per
        call, to run in due order: each topic holding some is resumed as resume_steps would, except
        where the topic is paused (its own resume brings them back). Tasks of hosts still disabled are
        set aside again when claimed. Returns how many went back."""
        moved = 0
        for keys in self.keys:
            topics = yield ScriptCall(SCRIPTS["aside"], [keys.aside, keys.corrupt], [])
            for topic in topics:
                while True:  # generation 0: older than any pause, so a paused topic is left as it is
                    step = yield from self.resume_batch_steps(keys.bucket, topic, generation=0)
                    moved += step.moved
                    if step.overtaken or not step.left:
                        break
            if topics:  # forgets the topics emptied
                yield ScriptCall(SCRIPTS["aside"], [keys.aside, keys.corrupt, *map(keys.parked, topics)],
                                 list(map(wire, topics)))
        return moved

    # -- bucket process --------------------------------------------------------------
    def promote_call(self, bucket: int, limit: int, retention_ms: int, members: Iterable[str] = ()) -> ScriptCall:
        """promote.lua: the bucket's own keys, then those the previous call's reply named (records of members
        due soon, parked sets, ...: docs/redis-layout.md, "Declared keys"), and the records of `members`
        (tasks a wake-up named: just added, due now)."""
        keys = self.keys[bucket]
        return ScriptCall(
            SCRIPTS["promote"],
            [keys.delayed, keys.leases, *keys.ready, keys.done("ok"), keys.done("failed"),
             keys.done("deleted"), keys.quarantine, keys.counts, keys.totals, keys.paused, *keys.ready_url,
             keys.limited, *run_windows(keys, self.clock), keys.corrupt,
             *self.learned.get(bucket, ()), *map(keys.task, members)],
            [keys.task_prefix, limit, retention_ms, ready_channel(self.prefix), bucket, self.limits],
        )

    def promote(self, bucket: int, limit: int, retention_ms: int, members: Iterable[str] = ()) -> Promoted:
        """One promote.lua call (promote_call). It touches only the keys it is given. `full`: a batch hit
        `limit`, or the call needed keys it was not given: call again at once."""
        promoted = Promoted.from_reply(self.transport.call(self.promote_call(bucket, limit, retention_ms, members)))
        self.learned[bucket] = [wire(key) for key in promoted.learned]
        self.clock.observe(promoted.clock_us / 1000)
        return promoted

    # -- queue process ---------------------------------------------------------------
    # (Each transition as a ScriptCall, for the queue's one round trip per turn, and its reply decoded.)
    def claim_call(self, bucket: int, quotas: tuple[int, int, int], n: int, lease_ms: int, retention_ms: int,
                   url: bool = False) -> ScriptCall:
        """claim.lua: pop up to n ready members of a bucket (URL tasks if `url`, else call and push tasks),
        `quotas` of priority 3, 2, 1 first, and start them. It declares the bucket's keys it always touches
        and builds the names of the popped tasks' keys itself, under the same hash tag
        (docs/redis-layout.md, "Declared keys")."""
        keys = self.keys[bucket]
        return ScriptCall(SCRIPTS["claim"],
                          [keys.leases, keys.counts, keys.totals, keys.done("failed"), keys.quarantine, keys.limited,
                           keys.paused, keys.aside, *run_windows(keys, self.clock), keys.corrupt,
                           *(keys.ready_url if url else keys.ready), *self.claim_limits(url)],
                          [lease_ms, keys.wake_channel, retention_ms, self.limits, bucket, keys.task_prefix,
                           *quotas, n])

    def claim_limits(self, url: bool) -> list[str]:
        """The keys of other hash tags a claim declares on a single Redis (none on Redis Cluster): the limits'
        conf (the topics' `tat:`, `run:` and `where:` share its tag `{limits}`), and for URL tasks the
        disabled hosts."""
        if not self.limits:
            return []
        return [self.limits + "conf", *([self.hosts_off] if url else [])]

    def claimed(self, reply: list[Any]) -> Claimed:
        """claim.lua's reply: how many members it popped, and the tasks it started."""
        claimed = Claimed.from_reply(reply)
        self.clock.observe(claimed.now)
        return claimed

    def claim(self, bucket: int, quotas: tuple[int, int, int], n: int, lease_ms: int, retention_ms: int,
              url: bool = False) -> Claimed:
        """Lease up to n ready tasks of a bucket: URL tasks if `url`, else call and push tasks
        (corrupt entries are quarantined by the script). One call."""
        return self.claimed(self.transport.call(self.claim_call(bucket, quotas, n, lease_ms, retention_ms, url)))

    def finish_call(self, bucket: int, results: list[Finish], retention_ms: int, attempts_kept: int = 10) -> ScriptCall:
        keys = self.keys[bucket]
        task_keys: list[Any] = []
        args: list[Any] = [retention_ms, keys.wake_channel, attempts_kept, self.limits]
        for entry in results:
            member, claim, outcome, gap_ms, error, next_due, wait_ms, attempt = (
                entry if len(entry) == FINISH_FIELDS else Finish(*entry))
            task_keys.append(keys.task(member))
            args += (wire(member), claim, outcome, gap_ms, wire(error), next_due, wait_ms, wire(attempt))
        topics = (topic_of(entry[0]) for entry in results)
        return ScriptCall(SCRIPTS["finish"], [keys.delayed, keys.leases, keys.done("ok"), keys.done("failed"),
                                              keys.quarantine, keys.counts, keys.totals, keys.recurring,
                                              *run_windows(keys, self.clock), keys.corrupt, *task_keys,
                                              *self.limit_keys(topics, wakes=True)], args)

    @staticmethod
    def flags(reply: list[Any]) -> list[bool]:
        """finish's and renew's reply: per run, False where it was fenced off."""
        return [bool(flag) for flag in reply]

    def finish(self, bucket: int, results: list[Finish], retention_ms: int, attempts_kept: int = 10) -> list[bool]:
        """Record outcomes, one Finish (or a tuple of its first fields) per run; a next due time
        (recurring tasks) reschedules the task whatever the outcome but failed, and SCHEDULE_ENDS
        in its place marks a recurring task's last run. False where the run was fenced off."""
        return self.flags(self.transport.call(self.finish_call(bucket, results, retention_ms, attempts_kept)))

    def renew_call(self, bucket: int, runs: list[tuple[str, int]], lease_ms: int) -> ScriptCall:
        keys = self.keys[bucket]
        args: list[Any] = [lease_ms, self.limits]
        for member, claim in runs:
            args += [wire(member), claim]
        return ScriptCall(SCRIPTS["renew"], [keys.leases, keys.corrupt, *(keys.task(member) for member, _ in runs),
                                             *self.limit_keys((topic_of(member) for member, _ in runs), wakes=False)],
                          args)

    def renew(self, bucket: int, runs: list[tuple[str, int]], lease_ms: int) -> list[bool]:
        """Extend the leases of (member, claim token) runs; False where the run was fenced off."""
        return self.flags(self.transport.call(self.renew_call(bucket, runs, lease_ms)))

    def hosts_call(self, tallies: dict[str, Any], disable_after_ms: int = 0) -> ScriptCall:
        """hosts.lua: fold one process's per-host delivery tallies (delayd.targets.url.health.Tally,
        by origin) into the hosts' health in Redis (`delayd hosts`), disabling a host failing for
        `disable_after_ms` (0: never; url_disable_after)."""
        keys: list[Any] = [hosts_seen_key(self.prefix), hosts_off_key(self.prefix), host_events_key(self.prefix),
                           hosts_corrupt_key(self.prefix)]
        args: list[Any] = []
        for origin, t in tallies.items():
            keys.append(wire(host_key(self.prefix, origin)))
            args += [t.deliveries, t.failures, "ok" if t.last_ok else "fail", wire(t.error), t.open_ms]
        return ScriptCall(SCRIPTS["hosts"], keys, [*args, disable_after_ms])

    # -- the dashboard (reads only) ------------------------------------------------------
    def browse_steps(self, indexes: Sequence[str], order: str, start: tuple[Score, str] | None, topic: str,
                     prefix: str, limit: int, budget: int) -> Steps[list[Browsed]]:
        """Walk each of `indexes` (`delayed`, `leases` or `done:<status>` of a bucket) from after `start`
        in `order` ('asc'/'desc'), keeping members of `topic` whose id starts with `prefix`; each walk
        stops after `limit` matches or `budget` entries examined (see lua/browse.lua). All in one
        round trip."""
        cursor = (start[0], wire(start[1])) if start else ("", "")  # redis-py sends inf as 'inf'
        args = [order, *cursor, wire(topic), wire(prefix), limit, budget]
        answers = yield Stream([ScriptCall(SCRIPTS["browse"], [index], args) for index in indexes], window=None)
        return [browsed(index, reply) for index, reply in zip(indexes, answers.replies)]
