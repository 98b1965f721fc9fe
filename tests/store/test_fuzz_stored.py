"""A fuzzer for what Redis holds (SPEC promise 5, issue 13): whatever anyone writes into the
store, a running daemon restarts no child, every good task runs exactly as it would have,
each damaged record ends quarantined or is read as docs/redis-layout.md says, and the
command line and the dashboard answer with a result or one clear error, never a traceback.

One daemon (2 buckets, 2 queue processes, lease 2 s) and one `delayd web` serve the whole
hypothesis run; each example has topics of its own (g<n> for good tasks, b<n>v<i> for the
damaged ones), so its assertions are its own. tests/fuzz_damage.py says what is written.
FUZZ_EXAMPLES sets the number of examples (default 6: about 20-30 s); FUZZ_SHRINK=1 lets
hypothesis shrink a failing example (slow: every replay runs against the daemon).
"""
from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
from typing import Any, Callable

import pytest
from daemon_helper import Daemon, delayd
from fuzz_damage import (
    BUCKETS,
    Noise,
    Plan,
    Victim,
    apply_noise,
    damage_record,
    plans,
)
from hypothesis import HealthCheck, Phase, given, settings
from redis_server import now_ms, wait_for
from web_helper import Web

from delayd import Client, cli
from delayd.model.task import STATUSES
from delayd.store import connection, registry
from delayd.store.keys import meta_key, wire

pytestmark = pytest.mark.system

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "6"))
PHASES = (Phase.explicit, Phase.generate) + ((Phase.shrink,) if os.environ.get("FUZZ_SHRINK") else ())
SETTLE_S = 30       # generous: a fenced run waits for its lease (2 s) to lapse, on a busy 2-core host
RUNS_KEY = "fuzz:runs:{n}"
EXPECTED = {"success": (["1"], "ok"), "fail": (["1"], "failed"), "retry": (["1", "2"], "ok")}
FINISHED = ("ok", "failed", "deleted")
EXAMPLE_NUMBERS = itertools.count()


class Fuzz:
    """What the whole run shares: the daemon, the dashboard, connections, and every example's
    good tasks (member -> expected runs), checked again once the daemon has stopped."""

    def __init__(self, url: str, daemon: Daemon, web: Web):
        self.url, self.daemon, self.web = url, daemon, web
        self.r = connection.connect(url)
        self.client = Client.from_url(url)
        self.store = self.client.store
        self.pids = {p.pid for p in daemon.children()}
        self.goods: dict[str, tuple[str, list[str]]] = {}  # member -> (runs key, expected run numbers)
        self.victims: dict[str, str] = {}                  # member -> runs key


@pytest.fixture(scope="module")
def fuzz(redis_server, tmp_path_factory):
    url = redis_server.url
    flush = redis_server.client()
    flush.flushall()
    flush.close()
    state = tmp_path_factory.mktemp("fuzz")
    daemon = Daemon(url, state, buckets=BUCKETS, queues=2, DELAYD_TASK_TIMEOUT="1", DELAYD_LEASE="2",
                    DELAYD_ALLOWED_MODULES="delayd.examples,fuzz_handlers").start()
    web = Web(url).start()
    ctx = Fuzz(url, daemon, web)
    yield ctx
    web.stop()
    daemon.stop()
    ctx.client.close()
    ctx.r.close()


def eventually(problem: Callable[[], str | None], timeout: float = SETTLE_S) -> None:
    """Wait until problem() says None; fail with its last answer after `timeout` seconds."""
    last: list[str | None] = [None]

    def fine() -> bool:
        last[0] = problem()
        return last[0] is None
    try:
        wait_for(fine, timeout, interval=0.05)
    except AssertionError:
        raise AssertionError(f"after {timeout} s: {last[0]}") from None


class Example:
    """One hypothesis example: adds its good tasks and victims, applies the plan, checks."""

    def __init__(self, fuzz: Fuzz, n: int):
        self.fuzz, self.n, self.r, self.client = fuzz, n, fuzz.r, fuzz.client
        self.runs_key = RUNS_KEY.format(n=n)
        self.goods: dict[str, str] = {}                  # member -> outcome
        self.victims: dict[str, Victim] = {}

    def params(self, outcome: str, sleep: float = 0) -> dict[str, Any]:
        return {"redis": self.fuzz.url, "list": self.runs_key, "outcome": outcome, "sleep": sleep}

    def add_good(self, good: tuple[str, int, float]) -> None:
        outcome, priority, delay = good
        topic, id = f"g{self.n}", str(len(self.goods))
        self.client.add(topic, id, call="fuzz_handlers:outcome", params=self.params(outcome), intervals=[0, 0.1],
                        priority=priority, delay=delay)
        self.goods[f"{topic}:{id}"] = outcome
        self.fuzz.goods[f"{topic}:{id}"] = (self.runs_key, EXPECTED[outcome][0])

    def runs(self, member: str) -> list[str]:
        return [e.rpartition(":")[2] for e in self.r.lrange(self.runs_key, 0, -1) if e.rpartition(":")[0] == member]

    def status(self, member: str) -> str | None:
        keys = self.fuzz.store.keys_for(member)
        with contextlib.suppress(Exception):  # a key of another type: no status
            return self.r.hget(keys.task(member), "status")
        return None

    # -- victims ---------------------------------------------------------------------
    def victim(self, step: Victim) -> None:
        topic = f"b{self.n}v{len(self.victims)}"
        member = f"{topic}:1"
        keys = self.fuzz.store.keys_for(member)
        if step.phase == "parked":
            self.client.pause(topic)
        self.client.add(topic, "1", call="fuzz_handlers:outcome", intervals=[0, 0.1],
                        params=self.params(step.outcome, 0.4 if step.phase == "running" else 0),
                        delay=3600 if step.phase == "waiting" else 0)
        self.victims[member] = step
        self.fuzz.victims[member] = self.runs_key
        if step.phase == "running":
            wait_for(lambda: self.status(member) == "running", SETTLE_S, message=f"{member} running")
        elif step.phase == "parked":
            wait_for(lambda: self.r.zscore(keys.parked(topic), member) is not None, SETTLE_S,
                     message=f"{member} parked")
        elif step.phase == "finished":
            wait_for(lambda: self.status(member) in EXPECTED[step.outcome][1:], SETTLE_S,
                     message=f"{member} finished")
        damage_record(self.r, keys.task(member), step.damage)
        if step.phase == "waiting":
            self.r.zadd(keys.delayed, {member: now_ms(self.r)})
            self.r.publish(keys.wake_channel, 0)
        elif step.phase == "parked":
            self.client.resume(topic)

    def in_flight(self, member: str) -> bool:
        """Leased, ready, or due in `delayed`: something will still happen to it."""
        keys, name = self.fuzz.store.keys_for(member), wire(member)
        try:
            due = self.r.zscore(keys.delayed, name)
            if self.r.zscore(keys.leases, name) is not None or (due is not None and due <= now_ms(self.r) + 100):
                return True
            return self.r.type(keys.task(member)) == "hash" and self.r.hget(keys.task(member), "queued") == "1"
        except Exception:  # noqa: BLE001 - an index of another type, until a script sets it aside
            return True

    def victim_problem(self, member: str) -> str | None:
        """None if the damaged task ended quarantined, finished, or waits for a future due time."""
        step = self.victims[member]
        runs = self.runs(member)
        if len(runs) > 3:  # a run, one re-run after a fenced-off run, and a retry
            return f"{member} ran {len(runs)} times after {step}"
        if self.in_flight(member):
            return f"{member} still in flight after {step}: {self.describe(member)}"
        if step.phase == "finished":
            return None  # only read from now on (get, ls, the dashboard), which the other checks do
        keys = self.fuzz.store.keys_for(member)
        kind = self.r.type(keys.task(member))
        if kind != "hash":
            return f"{member} is a {kind} after {step}"
        record = self.r.hgetall(keys.task(member))
        status = record.get("status")
        if status in FINISHED:
            return None  # quarantined (failed with its reason), ran to its outcome, or finished by the damage
        due = self.r.zscore(keys.delayed, wire(member))
        if status == "delayed" and due is not None and due > now_ms(self.r):
            return None  # waits for a due time the damage moved (e.g. a due read back as far in the future)
        return f"{member} is neither finished nor waiting after {step}: {self.describe(member)}"

    def describe(self, member: str) -> str:
        keys = self.fuzz.store.keys_for(member)
        with contextlib.suppress(Exception):
            record = {k: v[:80] for k, v in self.r.hgetall(keys.task(member)).items()}
            return f"record {record}, runs {self.runs(member)}"
        return f"a {self.r.type(keys.task(member))}"

    # -- checks ----------------------------------------------------------------------
    def goods_problem(self) -> str | None:
        for member, outcome in self.goods.items():
            runs, status = EXPECTED[outcome]
            if self.runs(member) != runs or self.status(member) != status:
                return f"good task {member} ({outcome}) ran {self.runs(member)}, status {self.status(member)}"
        return None

    def check_tasks(self) -> None:
        eventually(self.goods_problem)
        eventually(lambda: next((p for m in self.victims if (p := self.victim_problem(m))), None))

    def check_children(self) -> None:
        daemon = self.fuzz.daemon
        assert {p.pid for p in daemon.children()} == self.fuzz.pids, "a child was restarted"
        log = daemon.log()
        assert "child_crashed" not in log and "Traceback" not in log, log[-3000:]

    def check_cli(self) -> None:
        victim = next(iter(self.victims)).split(":")
        every = ("--limit", "100000")
        for args, codes in (((*victim,), (0, 1)), ((*victim, "--json"), (0, 1)), ((f"g{self.n}", "0", "--json"), (0,))):
            run_cli(self.fuzz.url, ("get", *args), codes)
        for args in (("ls", *every), ("ls", "--json", *every), ("ls", "--status", "failed", *every), ("stats",),
                     ("stats", "--json")):
            run_cli(self.fuzz.url, args, (0, 1))
        for args in (("status", "--cluster"), ("status", "--cluster", "--json")):
            run_cli(self.fuzz.url, args, (0, 1, 3))  # 3: no live daemon (the registry was overwritten)

    def check_meta(self, value: bytes) -> None:
        """A damaged bucket count: every reader says so in one line (and the store is fine again after)."""
        key = meta_key(self.fuzz.store.prefix)
        self.r.hset(key, "buckets", value)
        try:
            for args in (("stats",), ("ls",), ("get", f"g{self.n}", "0")):
                run_cli(self.fuzz.url, args, (0, 1))
        finally:
            self.r.hset(key, "buckets", BUCKETS)

    def check_web(self) -> None:
        """The dashboard's API and pages: an answer or a clear error, never a 500."""
        victim = next(iter(self.victims)).replace(":", "/")
        web = self.fuzz.web
        with web.client() as http:
            for path in ("/api/stats", f"/api/tasks/{victim}", "/", "/tasks", f"/tasks/{victim}"):
                check_answer(http.get(path, headers={"accept": "text/html" if path[:5] != "/api/" else "*/*"}), web)
            for status in ("", *STATUSES):
                cursor = ""
                for _ in range(50):  # every page of the listing (bounded)
                    answer = http.get("/api/tasks", params={"status": status, "limit": 200, "cursor": cursor})
                    check_answer(answer, web)
                    cursor = answer.json().get("cursor") if answer.status_code == 200 else None
                    if not cursor:
                        break


def check_answer(answer: Any, web: Web) -> None:
    assert answer.status_code in (200, 404, 503), \
        f"{answer.request.url}: {answer.status_code}\n{web.errors()[-6000:]}"
    if answer.status_code != 200 and answer.request.url.path.startswith("/api/"):
        assert list(answer.json()) == ["error"], answer.text


def run_cli(url: str, args: tuple[str, ...], codes: tuple[int, ...]) -> str:
    """`delayd ARGS` in this process (a traceback fails the test), with stdout and stderr
    encoding strictly to UTF-8 as a terminal's do: exit code in `codes`, at most one line on
    stderr, and JSON output that parses. Returns stdout."""
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict") for _ in range(2))
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([*args, "--redis", url])
        except SystemExit as exc:
            code = exc.code
        out.flush()
        err.flush()
    stdout, stderr = (s.buffer.getvalue().decode() for s in (out, err))
    assert code in codes and len(stderr.strip().splitlines()) <= 1, (args, code, stderr, stdout[-2000:])
    if code == 0 and "--json" in args:
        for line in stdout.splitlines() if args[0] == "ls" else [stdout]:
            json.loads(line)
    return stdout



@pytest.mark.timeout(90 + 20 * EXAMPLES)  # one test for pytest, however many examples
@settings(max_examples=EXAMPLES, deadline=None, database=None, phases=PHASES, print_blob=True,
          suppress_health_check=list(HealthCheck))
@given(plan=plans())
def test_nothing_stored_breaks_the_daemon(fuzz, plan: Plan):
    example = Example(fuzz, next(EXAMPLE_NUMBERS))
    goods = iter(plan.goods)
    for step in plan.steps:
        example.add_good(next(goods))
        if isinstance(step, Noise):
            apply_noise(fuzz.r, fuzz.store, registry.keys(fuzz.store.prefix), meta_key(fuzz.store.prefix), step)
        else:
            example.victim(step)
    for good in goods:
        example.add_good(good)
    example.check_tasks()
    example.check_children()
    example.check_cli()
    example.check_web()
    if plan.meta is not None:
        example.check_meta(plan.meta)


def test_after_the_fuzz_every_good_task_ran_once_and_no_child_restarted(fuzz):
    """Once the daemon has stopped (no run can still come), every good task of every example
    ran as expected; the master counted no restart; and the real command line reads it all."""
    env = fuzz.daemon.env
    state = json.loads(delayd("status", "--json", env=env, check=None).stdout)
    assert all(p["restarts"] == 0 for p in state["processes"]), state
    for args in (("ls", "--json", "--limit", "100000"), ("stats", "--json")):
        proc = delayd(*args, env=env, check=(0, 1))
        assert "Traceback" not in proc.stderr, (args, proc.stderr)

    def registry_problem() -> str | None:
        """The last noise may have overwritten the registry: the master's next beat (every
        registry.BEAT s) must bring its entry back, whatever the noise left there."""
        proc = delayd("status", "--cluster", "--json", env=env, check=None)
        assert "Traceback" not in proc.stderr, proc.stderr
        if proc.returncode != 0:
            return f"status --cluster exited {proc.returncode}: {proc.stdout} {proc.stderr}"
        pids = [d["pid"] for d in json.loads(proc.stdout)["daemons"]]
        return None if fuzz.daemon.proc.pid in pids else f"daemon not listed: {pids}"
    eventually(registry_problem, timeout=3 * registry.BEAT)
    fuzz.daemon.stop()
    for member, (runs_key, expected) in fuzz.goods.items():
        runs = [e.rpartition(":")[2] for e in fuzz.r.lrange(runs_key, 0, -1) if e.rpartition(":")[0] == member]
        assert runs == expected, (member, runs)
    for member, runs_key in fuzz.victims.items():
        runs = [e for e in fuzz.r.lrange(runs_key, 0, -1) if e.rpartition(":")[0] == member]
        assert len(runs) <= 3, (member, runs)
