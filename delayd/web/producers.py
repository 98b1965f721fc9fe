"""The HTTP producer API (SPEC section 8): add tasks with POST /api/tasks, delete one with DELETE
/api/tasks/TOPIC/ID, for applications in any language.

A body is one JSON object (the keyword arguments of add(), `nx` and `durable` included) or an
array of at most MAX_BATCH of them. Every item is validated before anything is written, so bad
input writes nothing and answers 400 with one line and, in an array, the item's index. Items are
written in the array's order, each run of consecutive items with the same nx/durable as one
AsyncClient.add_built (one streamed round trip per run). A body is read only up to MAX_BODY
(app.read_body: 413 from Content-Length, or while a chunked body passes it), and a big one is
parsed and validated in a worker thread, off the event loop that serves every other request.

Single adds (without nx or durable) that arrive while others are being written are written
together (GroupCommit): with many producers at once, one Redis round trip carries many adds, and
the system calls of a round trip, not the add itself, are most of a single add's cost.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import sys
from typing import Any, Mapping

from starlette.concurrency import run_in_threadpool

from delayd.client.async_client import AsyncClient
from delayd.client.base import NEXT_CRON, Built, ItemError
from delayd.client.errors import AddInterrupted
from delayd.model.checks import TRACEPARENT_RE
from delayd.model.deletion import CLAIMED
from delayd.model.task import TaskError
from delayd.web import views

MAX_BODY = 1024 * 1024      # bytes of a POST /api/tasks body; more answers 413
MAX_BATCH = 1000            # items of one array
PARSE_ON_LOOP = 32 * 1024   # a bigger body is parsed and validated in a worker thread
WRITERS = 2                 # GroupCommit's writes in flight
JSON_TYPE = "application/json"
INTEGER_FIELDS = ("topic", "id", "push", "priority", "retries")  # fields that take an integer (among others)

Options = tuple[bool, bool]  # (nx, durable) of one item


class BadInput(Exception):
    """Input refused before anything is written: HTTP `status`, a one-line message, and the
    index of the array item it is about (None for a single object or the body as a whole)."""

    def __init__(self, message: str, index: int | None = None, status: int = 400):
        super().__init__(message)
        self.index, self.status = index, status

    def answer(self) -> dict[str, Any]:
        return {"error": str(self), **({"index": self.index} if self.index is not None else {})}


def is_json(content_type: str) -> bool:
    return content_type.partition(";")[0].strip().lower() == JSON_TYPE


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse(body: bytes) -> Any:
    """The body's JSON value; BadInput if it is not UTF-8 JSON."""
    try:
        return json.loads(body, parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise BadInput("the body is not UTF-8 text: send JSON (Content-Type: application/json)") from None
    except (ValueError, RecursionError) as exc:
        if str(exc).startswith("Exceeds the limit"):  # (Python's own words name sys.set_int_max_str_digits)
            exc = ValueError(f"a number has more than {sys.get_int_max_str_digits()} digits")
        raise BadInput(f"the body is not valid JSON: {exc}") from None


def _whole_numbers(item: dict[str, Any]) -> None:
    """JSON has one kind of number: `2.0` is the integer 2 (as docs/openapi.json and JSON Schema read it), so
    a field that takes an integer takes it written either way, where add() in Python takes only an int."""
    for name in INTEGER_FIELDS:
        value = item.get(name)
        if type(value) is float and value.is_integer():
            item[name] = int(value)


def _options(item: dict[str, Any], index: int | None) -> Options:
    """Take nx and durable out of an item (strict booleans: they are not task fields), and read its whole
    numbers as integers (_whole_numbers)."""
    _whole_numbers(item)
    nx, durable = item.pop("nx", False), item.pop("durable", False)
    if (nx is True or nx is False) and (durable is True or durable is False):
        return nx, durable
    name, value = ("nx", nx) if nx is not True and nx is not False else ("durable", durable)
    prefix = "" if index is None else f"item {index}: "
    raise BadInput(f"{prefix}{name} must be true or false, got {json.dumps(value)}", index)


def incoming_trace(headers: Mapping[str, str]) -> tuple[str, str] | None:
    """A request's own W3C trace context (its `traceparent` and `tracestate` headers), for the tasks that
    give none; a malformed traceparent header is ignored, as W3C asks of a receiver."""
    traceparent = headers.get("traceparent", "").strip()
    return (traceparent, headers.get("tracestate", "")) if TRACEPARENT_RE.fullmatch(traceparent) else None


def validated(client: AsyncClient, body: bytes, trace: tuple[str, str] | None = None
              ) -> tuple[bool, list[Built], list[Options]]:
    """(single, the built tasks, their options) of a body; BadInput for anything refused. `trace`: the
    request's trace context (incoming_trace), for items without a traceparent."""
    value = parse(body)
    if trace is not None:
        for item in [value] if isinstance(value, dict) else value if isinstance(value, list) else ():
            if isinstance(item, dict) and item.get("traceparent") is None:
                item["traceparent"], item["tracestate"] = trace
    if isinstance(value, dict):
        options = _options(value, None)
        try:
            return True, [client.build(**value)], [options]
        except TaskError as exc:
            raise BadInput(str(exc)) from None
    if not isinstance(value, list):
        raise BadInput("the body must be a JSON object (one task) or an array of them")
    if len(value) > MAX_BATCH:
        raise BadInput(f"an array holds at most {MAX_BATCH} tasks, got {len(value)}: send several requests")
    options = []
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise BadInput(f"item {index}: expected a JSON object of add() arguments", index)
        options.append(_options(item, index))
    try:
        return False, client.build_many(value), options
    except ItemError as exc:
        raise BadInput(str(exc), exc.index) from None


class GroupCommit:
    """Single adds written together: each waits in `waiting` until one of WRITERS writes it with
    the others waiting then (one AsyncClient.add_built: an add.lua call per bucket), so a write
    never waits for a timer, and under load each carries every add that arrived meanwhile."""

    def __init__(self, client: AsyncClient):
        self.client = client
        self.waiting: list[tuple[Built, asyncio.Future]] = []
        self.writers: set[asyncio.Task] = set()

    async def add(self, built: Built) -> None:
        """Write `built` (with nx and durable off); the client's errors as a lone add would raise them."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.waiting.append((built, future))
        if len(self.writers) < WRITERS:
            self.writers.add(loop.create_task(self._write()))
        await future

    @staticmethod
    def _answer(group: list[tuple[Built, asyncio.Future]], outcome: BaseException | None) -> None:
        """Resolve the futures of `group` (None: written)."""
        for _, future in group:
            if future.done():  # (a request given up meanwhile)
                continue
            if outcome is None:
                future.set_result(None)
            else:
                future.set_exception(outcome)

    async def _write(self) -> None:
        try:
            while self.waiting:
                group = self.waiting[:MAX_BATCH]
                del self.waiting[:MAX_BATCH]
                outcome: BaseException | None = None
                try:
                    await self.client.add_built([built for built, _ in group])
                except AddInterrupted as exc:  # (which of the group were written is unknown: adding again is safe)
                    outcome = AddInterrupted(exc.reason, 0, 1, exact=False)
                except Exception as exc:
                    outcome = exc
                except asyncio.CancelledError:  # (the server stopping): no add it holds or that waits hangs
                    group += self.waiting
                    self.waiting.clear()
                    self._answer(group, AddInterrupted("the write was interrupted", 0, 1, exact=False))
                    raise
                self._answer(group, outcome)
        finally:
            # Out of `writers` at once, not by a done callback (run an iteration later): an add arriving in
            # between would count this finished writer as busy and, every writer so, wait for ever.
            self.writers.discard(asyncio.current_task())


async def add(client: AsyncClient, body: bytes, commit: GroupCommit | None = None,
              trace: tuple[str, str] | None = None) -> tuple[dict[str, Any], int]:
    """POST /api/tasks: (answer, HTTP status). BadInput (nothing written) for refused input;
    DelaydError (503) if Redis fails, AddInterrupted saying how many of the request's were written.
    A single add without nx or durable goes through `commit` when given (but a cron task without
    delay or at: its first due time, from Redis's clock, could fail the others' write)."""
    check = validated(client, body, trace) if len(body) <= PARSE_ON_LOOP else await run_in_threadpool(
        validated, client, body, trace)
    single, built, options = check
    if single and commit is not None and options[0] == (False, False) and built[0][1] != NEXT_CRON:
        await commit.add(built[0])
        return {"added": True}, 201
    try:
        if len(set(options)) > 1:  # cron tasks' first due times, before a first run is written (add_built
            _, built = await client.prepare(built)  # finds them itself, before it writes, for a single run)
        if any(durable for _, durable in options):
            await client.durability()  # DurabilityError (503) now if this Redis cannot confirm: nothing written
        written = 0
        for (nx, durable), run in itertools.groupby(zip(built, options), key=lambda pair: pair[1]):
            entries = [entry for entry, _ in run]
            try:
                written += await client.add_built(entries, nx, durable)
            except AddInterrupted as exc:
                raise exc.after(written, len(built)) from None
    except TaskError as exc:  # (a cron expression without a next time: found before any write)
        raise BadInput(str(exc)) from None
    if single:
        return ({"added": True}, 201) if written else ({"added": False}, 200)
    return {"added": written}, 200


async def delete(client: AsyncClient, topic: str, id: str, hard: bool) -> tuple[dict[str, Any], int]:
    """DELETE /api/tasks/TOPIC/ID: ({"deleted": true, "claimed": false}, 200), "claimed": true when a run of
    it had already been claimed (too late: its handler may be starting or running), or 404."""
    answer = await client.delete(topic, id, hard=hard)
    if answer is False:
        return {"error": f"not found: {topic}:{id}"}, 404
    return {"deleted": True, "claimed": answer is CLAIMED}, 200


async def get(client: AsyncClient, topic: str, id: str) -> tuple[dict[str, Any], int]:
    """GET /api/tasks/TOPIC/ID with the producer token: the task as `delayd get --json` prints it (a
    password in its URL masked, as everywhere on this server), 404, or 409 for a corrupt record."""
    try:
        task = await client.get(topic, id)
    except TaskError as exc:
        return {"error": str(exc)}, 409
    return (views.task_dict(client, task), 200) if task else ({"error": f"not found: {topic}:{id}"}, 404)
