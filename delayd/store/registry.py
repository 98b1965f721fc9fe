"""The registry of live daemons sharing one store, read by `delayd status --cluster`.

Every master refreshes its entry every BEAT seconds (delayd.daemon.registrar);
an entry not refreshed within TTL belongs to a daemon that died without a stop
(SIGKILL, a lost host) and no longer counts, and the next refresh of any daemon
drops it. A graceful stop removes the entry at once. Both keys share the hash
tag `{daemons}`, so register.lua touches one slot of a Redis Cluster.

An entry says what the daemon owns. Bucket processes of every daemon scan every
bucket (promotion is one script per batch, so a due task moves once however many
daemons look at it) and queue processes of every daemon claim from every bucket:
a daemon owns its processes and the runs they hold, not a share of the buckets.
"""
from __future__ import annotations

import json
import math
import socket
from typing import Any

from delayd.config import Config
from delayd.model.task import printable
from delayd.store.keys import wire
from delayd.store.scripts import SCRIPTS
from delayd.store.steps import ScriptCall, Steps, command
from delayd.store.transport import Transport

BEAT = 5.0          # seconds between refreshes
TTL = 3 * BEAT      # an entry not refreshed this long is a dead daemon


def keys(prefix: str) -> tuple[str, str]:
    return f"{prefix}{{daemons}}:info", f"{prefix}{{daemons}}:expires"


def _script_keys(prefix: str) -> list[str]:
    """register.lua's KEYS: the two keys, and the slot's set-aside hash (as BucketKeys.corrupt)."""
    return [*keys(prefix), f"{prefix}{{daemons}}:corrupt"]


def daemon_id(config: Config, pid: int) -> str:
    """host:pid, plus the config name when set: unique among the live daemons of a store."""
    return f"{socket.gethostname()}:{pid}" + (f":{config.name}" if config.name else "")


def register(client: Any, prefix: str, ident: str, entry: dict[str, Any], ttl: float = TTL) -> int:
    """Write or refresh one daemon's entry; returns Redis's time in ms."""
    body = json.dumps({**entry, "id": ident, "ttl": ttl}, separators=(",", ":"))
    call = ScriptCall(SCRIPTS["register"], _script_keys(prefix), [ident, body, int(ttl * 1000)])
    return int(Transport(client).call(call))


def unregister(client: Any, prefix: str, ident: str) -> None:
    Transport(client).call(ScriptCall(SCRIPTS["register"], _script_keys(prefix), [ident, "", 0]))


def live(client: Any, prefix: str) -> list[dict[str, Any]]:
    """The entries of every live daemon, oldest start first, each with `seen_ago` (s) added."""
    return Transport(client).run(live_steps(prefix))


def live_steps(prefix: str) -> Steps[list[dict[str, Any]]]:
    """live() as steps (see delayd.store.steps)."""
    info, expires = keys(prefix)
    seconds, micros = yield command("TIME")
    now_ms = seconds * 1000 + micros // 1000
    rows = yield command("ZRANGEBYSCORE", expires, now_ms, "+inf", "WITHSCORES", withscores=True)
    if not rows:
        return []
    entries = []
    for (ident, expiry), body in zip(rows, (yield command("HMGET", info, *[wire(ident) for ident, _ in rows]))):
        entry = readable(ident, body)
        if entry is None:
            continue  # removed between the two reads, or not written by delayd
        entry["seen_ago"] = max(0.0, (now_ms - (expiry - entry["ttl"] * 1000)) / 1000)
        entries.append(entry)
    return sorted(entries, key=lambda e: (e["started"], e["id"]))


# Fields of an entry that readers rely on, with the value that stands in for a
# missing or mistyped one (an entry is data in Redis, which anyone could have written).
ENTRY_FIELDS: dict[str, Any] = {"host": "?", "pid": 0, "version": "?", "started": 0.0, "state": "?", "ttl": TTL,
                                "buckets": 0, "queues": 0, "concurrency": 0, "children": []}
CHILD_FIELDS: dict[str, Any] = {"name": "?", "pid": None, "restarts": 0, "crash_looping": False}


def _typed(data: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """`data` with every field of `defaults` present and of its type (else the default)."""
    def fits(value: Any, default: Any) -> bool:
        if default is None:  # a pid: a number or null
            return value is None or (isinstance(value, int) and not isinstance(value, bool))
        if isinstance(default, (int, float)) and not isinstance(default, bool):
            return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return isinstance(value, type(default))
    return {**data, **{k: d for k, d in defaults.items() if not fits(data.get(k), d)}}


def readable(ident: str, body: Any) -> dict[str, Any] | None:
    """The entry `body` (JSON) of daemon `ident`, with every field readers use; None if it is no entry."""
    try:
        entry = json.loads(body)
    except (TypeError, ValueError, RecursionError):
        return None
    if not isinstance(entry, dict):
        return None
    entry = _typed(entry, ENTRY_FIELDS)
    entry["id"] = printable(ident)
    entry["children"] = [_typed(c, CHILD_FIELDS) for c in entry["children"] if isinstance(c, dict)]
    return entry
