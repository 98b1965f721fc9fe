"""One conformance table (tests/producers/conformance/cases.json) pushed through every producer.

A case is an add (the keyword arguments of Client.add, `nx` apart) or a delete, maybe after some
tasks added first (`before`; `claim`: the deleted one then claimed, as a daemon claims a due task), and its
expected outcome: `added` (true/false) or `deleted` (true, false, or "claimed": what every producer answers
for a task deleted after a run of it was claimed, each in its own way), the
task as `delayd get --json` prints it afterwards (minus the times, which vary), or the kind of
error (`invalid`: the producer's validation error, writing nothing; `message`: words it must hold).
A number JSON's own values cannot carry to every producer (NaN, Infinity, 1e400, 400 digits) is
`{"$number": text}`: each producer gets its language's reading of it. A producer is a small
adapter (add, delete); one for another language plugs in beside these, and every case is then
checked through it with the same expectations.
"""
from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import pytest
from daemon_helper import delayd
from node_helper import NodeError, NodeProducer
from packages_helper import php_app
from php_helper import require_php
from store_helper import claim_due
from web_helper import Web

from delayd import CLAIMED, AsyncClient, Client, DelaydError
from delayd.model.fields import SHOWN
from delayd.model.record import spec_json
from delayd.model.task import Task, TaskError, is_utf8
from delayd.store.keys import bucket_of, meta_key, topic_of

CASES = json.loads((Path(__file__).parent / "conformance" / "cases.json").read_text())
VARYING = ("created_at", "due_at", "last_run_at", "last_due_at")
# A case's task names the fields it expects; any other field get shows holds its default (the table of fields).
DEFAULTS = {f.name: f.default for f in SHOWN if f.spec is not None and f.shown == f.name}


class Invalid(Exception):
    """A producer refused the task as invalid (its message is the producer's one line)."""


class Refused(Exception):
    """A producer refused the store (StoreError: its meta hash is another version's)."""


class JsonNumber:
    """A number as JSON text spells it (`{"$number": text}` in the table: NaN, Infinity, 1e400, 400 digits),
    which JSON's own values cannot carry to every producer: each adapter gives its language's reading of it."""

    def __init__(self, text: str):
        self.text = text

    def value(self) -> Any:
        """Python's reading (json.loads: nan, inf, or an int of any size)."""
        return json.loads(self.text)


def expand(value: Any) -> Any:
    """A case's value with `{"$repeat": [text, n]}` (a long string, kept short in the table) spelled out, and
    `{"$number": text}` as a JsonNumber."""
    if isinstance(value, dict):
        if set(value) == {"$repeat"}:
            text, times = value["$repeat"]
            return text * times
        if set(value) == {"$number"}:
            return JsonNumber(expand(value["$number"]))
        return {k: expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v) for v in value]
    return value


def native(value: Any) -> Any:
    """A case's value for a Python producer: a JsonNumber as Python reads it."""
    if isinstance(value, JsonNumber):
        return value.value()
    if isinstance(value, dict):
        return {k: native(v) for k, v in value.items()}
    if isinstance(value, list):
        return [native(v) for v in value]
    return value


def json_text(value: Any) -> str:
    """`value` as JSON text, a JsonNumber spelled as it is (what the HTTP body and `--params` carry)."""
    numbers: list[str] = []

    def placeholder(number: Any) -> str:
        numbers.append(number.text)
        return f"\0{len(numbers) - 1}\0"

    text = json.dumps(value, default=placeholder)
    for n, number in enumerate(numbers):
        text = text.replace(json.dumps(f"\0{n}\0"), number)
    return text


def answer_of(deleted: Any) -> bool | str:
    """A Python delete's answer as the table writes it: True, False or "claimed" (delayd.CLAIMED)."""
    if deleted is CLAIMED:
        return "claimed"
    assert isinstance(deleted, bool), deleted
    return deleted


class PythonClient:
    name = "Client"

    def __init__(self, url: str):
        self.client = Client.from_url(url)

    def add(self, task: dict, nx: bool) -> bool:
        try:
            return self.client.add(nx=nx, **native(task))
        except TaskError as exc:
            raise Invalid(str(exc)) from None
        except DelaydError as exc:
            raise Refused(str(exc)) from None

    def delete(self, topic: str, id: Any, hard: bool) -> bool | str:
        return answer_of(self.client.delete(topic, id, hard=hard))


class PythonAsyncClient:
    name = "AsyncClient"

    def __init__(self, url: str):
        self.url = url

    def run(self, operation: str, *args: Any, **kwargs: Any) -> Any:
        async def call() -> Any:
            async with AsyncClient.from_url(self.url) as client:
                return await getattr(client, operation)(*args, **kwargs)
        return asyncio.run(call())

    def add(self, task: dict, nx: bool) -> bool:
        try:
            return self.run("add", nx=nx, **native(task))
        except TaskError as exc:
            raise Invalid(str(exc)) from None

    def delete(self, topic: str, id: Any, hard: bool) -> bool | str:
        return answer_of(self.run("delete", topic, id, hard=hard))


class Cli:
    """`delayd add TOPIC ID --flag ...` and `delayd del`: exit 1 and one line on stderr for an invalid task,
    or exit 2 and the usage for what the command line's own syntax refuses (two targets, a priority of 4)."""
    name = "delayd add"

    def __init__(self, url: str):
        self.url = url

    def add(self, task: dict, nx: bool) -> bool:
        task = dict(task)
        args = ["add", str(task.pop("topic")), str(task.pop("id")), "--json", *(["--nx"] if nx else [])]
        for name, value in task.items():
            if value is None:  # (no option given: as a Python producer's None)
                continue
            if name == "persistent":
                args += [] if value else ["--once"]
            elif name == "params":
                args += ["--params", json_text(value)]
            elif name == "intervals" and isinstance(value, list):
                args += ["--intervals", ",".join(str(v) for v in value)]
            else:
                args += [f"--{name.replace('_', '-')}", value.text if isinstance(value, JsonNumber) else str(value)]
        proc = delayd(*args, check=(0, 1, 2), DELAYD_REDIS_URL=self.url)
        if proc.returncode:
            lines = proc.stderr.strip().splitlines()
            assert (len(lines) == 1 or proc.returncode == 2) and "Traceback" not in proc.stderr, proc.stderr
            raise Invalid(lines[-1])
        return json.loads(proc.stdout)["result"] == "added"

    def delete(self, topic: str, id: Any, hard: bool) -> bool | str:
        """Exit 0 deleted (True), 1 not found (False), 3 deleted too late ("claimed", as --json says)."""
        proc = delayd("del", topic, str(id), "--json", *(["--hard"] if hard else []), check=(0, 1, 3),
                      DELAYD_REDIS_URL=self.url)
        if proc.returncode == 1:
            return False
        assert json.loads(proc.stdout)["claimed"] == (proc.returncode == 3), proc.stdout
        return "claimed" if proc.returncode == 3 else True


def wrapped(value: Any, text: bool = True) -> Any:
    """A value for another language's adapter: a JsonNumber travels as {"$number": text}, and (if `text`) a
    str holding bytes that are not UTF-8 (lone surrogates) as {"$bytes": base64}, which JSON can carry."""
    if isinstance(value, dict):
        return {k: wrapped(v, text) for k, v in value.items()}
    if isinstance(value, list):
        return [wrapped(v, text) for v in value]
    if isinstance(value, JsonNumber):
        return {"$number": value.text}
    if text and isinstance(value, str) and not is_utf8(value):
        return {"$bytes": base64.b64encode(value.encode("utf-8", "surrogateescape")).decode()}
    return value


class Php:
    """delayd/client as Composer installed it (tests/packages_helper.py), through
    tests/producers/conformance/php_producer.php, one `php` process per operation."""
    name = "PHP"
    script = Path(__file__).parent / "conformance" / "php_producer.php"

    def __init__(self, url: str):
        self.url = url

    def run(self, operation: dict) -> Any:
        proc = subprocess.run(["php", str(self.script), self.url, str(php_app() / "vendor" / "autoload.php")],
                              input=json.dumps(wrapped(operation)), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and not proc.stderr, (proc.returncode, proc.stdout, proc.stderr)
        answer = json.loads(proc.stdout)
        if "error" in answer:
            raise (Refused if answer["error"] == "store" else Invalid)(answer["message"])
        return answer["result"]

    def add(self, task: dict, nx: bool) -> bool:
        return self.run({"op": "add", "task": {**task, **({"nx": True} if nx else {})}})

    def delete(self, topic: str, id: Any, hard: bool) -> bool | str:
        return self.run({"op": "delete", "topic": topic, "id": str(id), "hard": hard})  # true, false, 'claimed'

    def get(self, topic: str, id: Any) -> dict | None:
        task = self.run({"op": "get", "topic": topic, "id": str(id)})
        return None if task is None else {k: v for k, v in task.items() if k not in VARYING}


class Node:
    """delayd-client installed from its tarball, in one node process per case (tests/node_helper.py)."""
    name = "Node"

    def __init__(self, url: str):
        self.producer = NodeProducer(url)

    def add(self, task: dict, nx: bool) -> bool:
        try:
            return self.producer.add(wrapped(task, text=False), nx)  # (a lone surrogate: JSON's escape)
        except NodeError as exc:
            if exc.name not in ("TaskError", "StoreError"):
                raise
            raise (Invalid if exc.name == "TaskError" else Refused)(str(exc)) from None

    def delete(self, topic: str, id: Any, hard: bool) -> bool | str:
        return self.producer.delete(topic, id, hard)  # true, false, 'claimed'

    def get(self, topic: str, id: Any) -> dict | None:
        task = self.producer.get(topic, id)
        return None if task is None else {k: v for k, v in task.items() if k not in VARYING}


class Http:
    """The HTTP producer API of one `delayd web` (the module's: http_producer) with the producer token:
    POST /api/tasks, DELETE and GET /api/tasks/TOPIC/ID."""
    name = "HTTP"
    token = "conformance-producer-token"

    def __init__(self, http: httpx.Client):
        self.http = http

    @staticmethod
    def path(topic: str, id: Any) -> str:
        return f"/api/tasks/{urllib.parse.quote(topic, safe='')}/{urllib.parse.quote(str(id), safe='')}"

    def add(self, task: dict, nx: bool) -> bool:
        body = json_text({**task, **({"nx": True} if nx else {})})  # (\udcff escapes for lone surrogates)
        answer = self.http.post("/api/tasks", content=body, headers={"Content-Type": "application/json"})
        if answer.status_code == 400:
            raise Invalid(answer.json()["error"])
        assert answer.status_code in (200, 201), answer.text
        return answer.json()["added"]

    def delete(self, topic: str, id: Any, hard: bool) -> bool | str:
        answer = self.http.delete(self.path(topic, id) + ("?hard=true" if hard else ""))
        assert answer.status_code in (200, 404), answer.text
        return answer.status_code == 200 and ("claimed" if answer.json()["claimed"] else True)

    def get(self, topic: str, id: Any) -> dict | None:
        answer = self.http.get(self.path(topic, id))
        assert answer.status_code in (200, 404), answer.text
        return None if answer.status_code == 404 else {k: v for k, v in answer.json().items() if k not in VARYING}


# The producers that run a process per operation (the `delayd` command past its parser, php, node)
# are in the system tier, as the house's rule for commands has it, and so is HTTP (a `delayd web`
# for the module); the Python clients stay fast.
PRODUCERS = [PythonClient, PythonAsyncClient, *(pytest.param(p, marks=pytest.mark.system, id=p.name)
                                               for p in (Cli, Php, Node, Http))]


@pytest.fixture(scope="module")
def http_producer(redis_server):
    """A client of the module's `delayd web`, sending the producer token."""
    with Web(redis_server.url, DELAYD_PRODUCER_TOKEN=Http.token) as web, \
            web.client(headers={"Authorization": f"Bearer {Http.token}"}) as http:
        yield http


def stored(url: str, topic: str, id: Any) -> dict | None:
    """The task as `delayd get --json` prints it (Task.to_dict), minus the times that vary."""
    task = Client.from_url(url).get(topic, id)
    return None if task is None else {k: v for k, v in task.to_dict().items() if k not in VARYING}


def check_case(producer: Any, url: str, r: Any, case: dict) -> None:
    """Run one case through `producer` on an empty store; assert its expected outcome."""
    if case["expect"].get("task"):  # (null: gone)
        case = {**case, "expect": {**case["expect"], "task": {**DEFAULTS, **case["expect"]["task"]}}}
    setup = Client.from_url(url)
    for topic in case.get("pause", []):
        setup.pause(topic)
    for task in case.get("before", []):
        setup.add(**task)
    if case.get("pause"):  # the due tasks of a paused topic parked, as a bucket process parks them
        for bucket in range(setup.store.buckets):  # (again while it asks for keys it was not given)
            assert any(not setup.store.promote(bucket, 100, setup.config.retention_ms).full for _ in range(5))
    expect = case["expect"]
    if "delete" in case:
        target = case["delete"]
        if case.get("claim"):
            claim_due(setup.store, f"{target['topic']}:{target['id']}")
        assert producer.delete(target["topic"], target["id"], target.get("hard", False)) == expect["deleted"]
        if "parked" in expect:  # the `before` tasks a paused topic still holds back
            members = [f"{task['topic']}:{task['id']}" for task in case["before"]]
            assert [m for m in members if r.zscore(setup.store.keys_for(m).parked(topic_of(m)), m) is not None] \
                == expect["parked"]
        if "task" in expect:
            assert stored(url, target["topic"], target["id"]) == expect["task"]
            if hasattr(producer, "get"):
                assert producer.get(target["topic"], target["id"]) == expect["task"]
        return
    task = expand(case["add"])
    before = sorted(r.keys("*"))
    if "error" in expect:
        with pytest.raises(Invalid) as refused:
            producer.add(task, case.get("nx", False))
        assert "\n" not in str(refused.value) and expect.get("message", "") in str(refused.value)
        assert sorted(r.keys("*")) == before, "an invalid task wrote something"
        return
    assert producer.add(task, case.get("nx", False)) == expect["added"]
    assert stored(url, task["topic"], task["id"]) == expect["task"]
    if expect["added"]:  # the same record: the spec text Python writes, the same priority, URL flag and since
        fields = {k: v for k, v in task.items() if k not in ("delay", "at", "debounce", "max_wait")}  # (add options)
        reference = Task.new(**fields)
        key = f"delayd:{{{bucket_of(reference.key, setup.store.buckets)}}}:t:{reference.key}"
        assert r.hmget(key, "spec", "priority", "url") == [
            spec_json(reference), None if reference.priority == 2 else str(reference.priority),
            "1" if reference.url else None]
        since = r.hget(key, "since")  # a debounced add's: when its pending run was first added
        assert (since is not None) == ("debounce" in task)
    if hasattr(producer, "get"):  # the producer's own reading gives the same
        assert producer.get(task["topic"], task["id"]) == expect["task"]


def test_the_table_holds_happy_and_unhappy_cases():
    names = [case["name"] for case in CASES]
    assert len(names) == len(set(names))
    assert any("error" in case["expect"] for case in CASES) and any("added" in case["expect"] for case in CASES)


@pytest.mark.parametrize("producer", PRODUCERS, ids=lambda p: getattr(p, "name", None))
@pytest.mark.parametrize("case", CASES, ids=lambda case: case["name"])
def test_conformance(producer, case, redis_url, r, request):
    if producer is Php:
        require_php()
    made = Http(request.getfixturevalue("http_producer")) if producer is Http else producer(redis_url)
    check_case(made, redis_url, r, case)


@pytest.mark.parametrize("producer", [PythonClient, *(pytest.param(p, marks=pytest.mark.system, id=p.name)
                                                      for p in (Php, Node))], ids=lambda p: getattr(p, "name", None))
@pytest.mark.parametrize("meta", [{"protocol": "2"}, {"layout": "2"}, {"buckets": "4", "layout": "2"}])
def test_a_store_of_another_protocol_is_refused_and_nothing_written(producer, meta, redis_url, r):
    """Every producer filled in the meta hash's missing fields (layout, buckets) before it saw the other
    protocol (SPEC 9: "writes nothing, not even to the meta hash")."""
    if producer is Php:
        require_php()
    r.hset(meta_key("delayd:"), mapping=meta)
    with pytest.raises(Refused, match="says (protocol|layout) = '2'"):
        producer(redis_url).add({"topic": "t", "id": 1, "push": "q"}, False)
    assert r.keys("*") == [meta_key("delayd:")] and r.hgetall(meta_key("delayd:")) == meta
