"""delayd-client driven from the tests: a real node process running tests/node_driver.mjs in an
application that installed the package from its `npm pack` tarball (tests/packages_helper.py),
one JSON request and answer per line, against the test's Redis.

Node, and the package's node_modules (`npm ci` in clients/node: ./scripts/test runs it; its
ioredis is installed from npm's cache), are needed: without them the tests skip and say why, and
fail under CI=true.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import weakref
from typing import Any

import pytest
from packages_helper import NODE_DIR, node_app


class NodeError(Exception):
    """What the Node client rejected with: `name` (TaskError, StoreError, ...) and its one-line message."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name


def need_node() -> str:
    """The node executable; skips the test (fails it under CI=true) when node or the package's
    dependencies are missing."""
    node = shutil.which("node")
    missing = ("node is not installed" if node is None else
               f"{NODE_DIR}/node_modules is missing (run npm ci there)" if not (NODE_DIR / "node_modules").is_dir()
               else None)
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing}: the Node client cannot be tested")
        pytest.skip(missing)
    return node


def _stop(proc: subprocess.Popen) -> None:
    """End a driver: EOF on its stdin ends it."""
    proc.stdin.close()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stdout.close()


class NodeProducer:
    """A delayd-client Client on `redis_url` with `prefix` (and Client `options`), in its own node process
    (ended by close(), or when the object is collected)."""

    def __init__(self, redis_url: str, prefix: str = "delayd:", **options: Any):
        self.proc = subprocess.Popen([need_node(), str(node_app() / "driver.mjs"), redis_url, prefix,
                                      json.dumps(options)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8")
        self.close = weakref.finalize(self, _stop, self.proc)

    def ask(self, op: str, *args: Any) -> Any:
        """The Client method `op`'s answer; NodeError for a rejection."""
        self.proc.stdin.write(json.dumps({"op": op, "args": list(args)}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the node driver died (exit {self.proc.poll()})"
        answer = json.loads(line)
        if "error" in answer:
            raise NodeError(answer["error"]["name"], answer["error"]["message"])
        return answer["ok"]

    def add(self, task: dict[str, Any], nx: bool = False) -> bool:
        return self.ask("add", task, {"nx": nx})

    def add_many(self, tasks: list[dict[str, Any]], nx: bool = False) -> int:
        return self.ask("addMany", tasks, {"nx": nx})

    def delete(self, topic: str, id: Any, hard: bool = False) -> bool:
        return self.ask("delete", topic, id, hard)

    def get(self, topic: str, id: Any) -> dict[str, Any] | None:
        return self.ask("get", topic, id)


@pytest.fixture
def node(redis_url):
    producer = NodeProducer(redis_url)
    yield producer
    producer.close()
