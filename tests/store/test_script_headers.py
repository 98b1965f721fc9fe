"""Each script names what it touches (issue 47): its header numbers every KEYS and ARGV (`-- KEYS[3]  name
pattern  ...`, a tail as `-- KEYS[1 + n]  name  pattern`) and says its reply (`-- Reply: {a, b, tail...}`).
Checked here: the numbers run from 1 without a gap; the binding lines under the header bind each numbered
name to its own KEYS[i] or ARGV[i], and nothing past them indexes KEYS or ARGV; the reply's names are the
fields of the named tuple of delayd.store.replies that reads it; and the keys the Python side passes match the
patterns of the header, position by position."""
from __future__ import annotations

import re
from importlib import resources
from types import SimpleNamespace
from typing import Any

import pytest
from store_helper import DAY_MS, QUOTAS

from delayd.model.task import Task
from delayd.store import limits, registry, stats
from delayd.store.replies import (
    BrowseReply,
    BucketStats,
    Claimed,
    ClaimedTask,
    Finish,
    Parking,
    Promoted,
    Resumed,
    RunNow,
)
from delayd.store.scripts import SCRIPTS
from delayd.store.steps import ScriptCall, Stream
from delayd.store.transitions import Store
from delayd.store.transport import Transport

LUA = resources.files("delayd.store").joinpath("lua")
NAMED = sorted(SCRIPTS)
ENTRY = re.compile(r"^-- (KEYS|ARGV)\[([^\]]+)\]\s+(\w+)(?:\s+(\S+))?(.*)$")
INDEXED = re.compile(r"\b(KEYS|ARGV)\[")
# The tuple of delayd.store.replies that reads each script's reply, and the names its header gives it.
REPLIES = {"promote": Promoted, "claim": Claimed, "resume": Resumed, "run_now": RunNow, "park": Parking,
           "browse": BrowseReply, "stats": BucketStats}


class Header(SimpleNamespace):
    entries: list[tuple[str, str, str, str, str]]  # (KEYS or ARGV, index, name, pattern or first word, rest)
    reply: str
    bindings: list[str]  # the binding lines under the header
    body: list[str]      # the code lines after them


def header(name: str) -> Header:
    lines = LUA.joinpath(f"{name}.lua").read_text().splitlines()
    top = next(i for i, line in enumerate(lines) if not line.startswith("--"))
    comments = lines[:top]
    bind = top
    while bind < len(lines) and re.match(r"local .*\b(KEYS|ARGV)\b", lines[bind]):
        bind += 1
    reply = next((line for line in comments if line.startswith("-- Reply:")), "")
    return Header(entries=[m.groups() for m in map(ENTRY.match, comments) if m], reply=reply,
                  bindings=lines[top:bind], body=[line for line in lines[bind:] if not line.lstrip().startswith("--")])


def split_top(text: str) -> list[str]:
    """`text` split at its commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return [*parts, text[start:].strip()]


def bound(bindings: list[str]) -> dict[tuple[str, int], str]:
    """(KEYS or ARGV, index) -> the local bound to it, from lines `local a, b = KEYS[1], tonumber(ARGV[2])`."""
    found = {}
    for line in bindings:
        names, _, values = line.split("--")[0].removeprefix("local ").partition("=")
        for name, value in zip(split_top(names), split_top(values)):
            for kind, index in re.findall(r"\b(KEYS|ARGV)\[(\d+)\]", value):
                found[kind, int(index)] = name
    return found


@pytest.mark.parametrize("name", NAMED)
def test_the_header_numbers_every_key_and_argument_and_the_body_reads_them_by_name(name):
    head = header(name)
    assert head.reply, f"{name}.lua: no '-- Reply:' line in its header"
    numbered = {(kind, int(index)): entry for kind, index, *entry in head.entries if index.isdigit()}
    for kind in ("KEYS", "ARGV"):
        indexes = sorted(i for k, i in numbered if k == kind)
        assert indexes == list(range(1, len(indexes) + 1)), f"{name}.lua: {kind} numbered {indexes}"
    binding = bound(head.bindings)
    for (kind, index), local in binding.items():
        assert (kind, index) in numbered, f"{name}.lua binds {local} to {kind}[{index}], which its header lacks"
        assert numbered[kind, index][0] == local, f"{name}.lua: {kind}[{index}] is {numbered[kind, index][0]} " \
                                                  f"in its header, bound to {local}"
    for (kind, index), (entry, _, rest) in numbered.items():
        declared_only = "(declared only" in rest or "(declared only" in (numbered[kind, index][1] or "")
        assert declared_only or (kind, index) in binding, f"{name}.lua does not bind {kind}[{index}] ({entry})"
    past = [line for line in head.body if INDEXED.search(line)]
    assert not past, f"{name}.lua indexes KEYS or ARGV past its header: {past}"


def reply_names(text: str) -> list[str]:
    """The names of a header's `{a, b, tail...}` (the tail's `...` dropped)."""
    return [part.removesuffix("...") for part in split_top(re.search(r"\{(.*?)\}", text).group(1))]


@pytest.mark.parametrize("name", sorted(REPLIES))
def test_a_reply_is_read_by_the_names_its_header_gives(name):
    assert reply_names(header(name).reply) == list(REPLIES[name]._fields)


def test_a_claimed_task_is_read_by_the_names_claims_header_gives():
    text = " ".join(line for line in LUA.joinpath("claim.lua").read_text().splitlines() if line.startswith("--"))
    assert reply_names(text[text.index("per task started"):]) == list(ClaimedTask._fields)


def pattern(text: str, prefix: str) -> re.Pattern:
    """A header's key pattern (`P{N}:t:<member>`, `P{limits}:*`, alternatives split by `|`) as a regex."""
    alternatives = []
    for one in text.split("|"):
        regex = re.escape(one)
        regex = re.sub(r"^P", re.escape(prefix), regex)
        regex = regex.replace(r"\{N\}", r"\{\d+\}").replace(r"\*", ".*")
        alternatives.append(re.sub(r"<[^>]*>", ".+", regex))
    return re.compile("|".join(f"(?:{a})" for a in alternatives) + r"\Z")


def script_calls(r, steps) -> list[ScriptCall]:
    """The script calls `steps` (a Store operation) sends when run on `r`."""
    calls, reply, transport = [], None, Transport(r)
    while True:
        try:
            request = steps.send(reply)
        except StopIteration:
            return calls
        if isinstance(request, Stream):
            request = request._replace(calls=list(request.calls))
            calls += request.calls
        elif isinstance(request, ScriptCall):
            calls.append(request)
        reply = transport.send(request)


def sample_calls(r, store: Store) -> list[ScriptCall]:
    """A call of every script, with tails: tasks, runs, hosts, limits (a single Redis: their keys passed)."""
    r.hset("delayd:{limits}:conf", "t", "1 1000 1")
    keys = store.keys[0]
    task = Task.new("t", 1, url="https://shop.example/1")
    tally = SimpleNamespace(deliveries=1, failures=0, last_ok=True, error="", open_ms=0)
    calls = [store.add_call(keys, [(task, "delay", 0), (Task.new("t", 2, call="a:b"), "delay", 0)], False),
             store.promote_call(0, 10, DAY_MS, ["t:1"]), store.claim_call(0, QUOTAS, 10, 60_000, DAY_MS),
             store.claim_call(0, QUOTAS, 10, 60_000, DAY_MS, url=True),
             store.finish_call(0, [Finish("t:1", 1, "ok"), Finish("t:2", 1, "ok")], DAY_MS),
             store.renew_call(0, [("t:1", 1)], 60_000), store.hosts_call({"https://shop.example:443": tally}),
             store.retry_call("t:1"), stats.bucket_call(store, 0, [["t:1"], [], [], [], [], []]),
             ScriptCall(SCRIPTS["register"], registry._script_keys("delayd:"), ["id", "", 0])]
    for steps in (store.run_now_steps("t:1"), store.pause_steps("t"), store.resume_steps("t"),
                  store.browse_steps([keys.delayed], "asc", None, "", "", 10, 10),
                  store.switch_hosts_steps("disable", ["https://shop.example:443"]),
                  store.switch_hosts_steps("enable", ["https://shop.example:443"]), store.enable_steps(),
                  limits.write_steps(store, "t", "1 1000 1"), store.delete_steps("t:1", False, DAY_MS)):
        calls += script_calls(r, steps)
    return calls


def test_the_keys_python_passes_are_those_the_headers_name(r):
    """Every script's call from the Python side, each key at its position matching the header's pattern (a
    key past the numbered ones: one of the header's tails)."""
    store = Store(r, "delayd:", 2)
    store.add(store.keys[0], [(Task.new("t", 1, url="https://shop.example/1"), "delay", 0)], False)
    calls = sample_calls(r, store)
    assert {call.script.name for call in calls} == set(SCRIPTS)
    for call in calls:
        entries = [entry for entry in header(call.script.name).entries if entry[0] == "KEYS"]
        numbered = {int(index): pattern(p, "delayd:") for _, index, _, p, _ in entries if index.isdigit()}
        tails = [pattern(p, "delayd:") for _, index, _, p, _ in entries if not index.isdigit()]
        for position, key in enumerate(call.keys, 1):
            text = key.decode() if isinstance(key, bytes) else key
            candidates: Any = [numbered[position]] if position in numbered else tails
            assert any(c.match(text) for c in candidates), f"{call.script.name}.lua KEYS[{position}] = {text}"
