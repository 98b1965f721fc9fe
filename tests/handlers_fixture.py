"""Handlers for tests/targets/test_handlers.py (tests/ is on sys.path, see conftest.py)."""
import asyncio
import os  # noqa: F401  (a target must not reach through it: handlers_fixture:os.remove)
import time
from pathlib import Path

NOT_CALLABLE = 42


def touch(task):
    """Append "<key>:<runs>" to the file params['path']: the proof that a run happened."""
    with open(task.params["path"], "a") as fh:
        fh.write(f"{task.key}:{task.runs}\n")
    return "success"


def slow_touch(task):
    """Sleep params['seconds'], then touch: a run that proves itself without Redis."""
    time.sleep(float(task.params.get("seconds", 1.0)))
    return touch(task)


def returns(task):
    """Return params['value'] as it is."""
    return task.params.get("value")


def returns_set(task):
    return {1, 2}


def level1(task):
    level2(task)


def level2(task):
    level3(task)


def level3(task):
    level4(task)


def level4(task):
    level5(task)


def level5(task):
    raise ValueError(f"bad order {task.id}")


def explode(task):
    level1(task)


def huge_error(task):
    raise ValueError("x" * 100_000 + "\n\nsecond paragraph")


def exits(task):
    raise SystemExit(3)


async def coroutine(task):
    return "success"


async def sleeps_async(task):
    """Sleeps params.seconds on the loop; writes params.path if it is cancelled."""
    try:
        await asyncio.sleep(task.params["seconds"])
    except asyncio.CancelledError:
        Path(task.params["path"]).write_text("cancelled")
        raise
    return "success"


async def touch_async(task):
    with open(task.params["path"], "a") as fh:
        fh.write(f"{task.key}:{task.runs} async\n")


class _Handler:
    def __call__(self, task):
        return "SUCCESS"


HANDLER = _Handler()


def otel_modules(task):
    """Write the names of the opentelemetry modules this process has loaded to params['path'] (a JSON list)."""
    import json
    import sys
    Path(task.params["path"]).write_text(json.dumps(sorted(m for m in sys.modules if m.startswith("opentelemetry"))))
    return "success"


def _span(name: str):
    from opentelemetry import trace  # (imported by the handler: the tracing-off tests load none of it)
    return trace.get_tracer("handlers_fixture").start_as_current_span(name)


def traced(task):
    """Start a span of its own, `handler <key>` (tests/daemon/test_traces.py: its parent is the run's)."""
    with _span(f"handler {task.key}"):
        return "success"


async def traced_async(task):
    with _span(f"handler {task.key}"):
        await asyncio.sleep(0)
        return "success"


def traced_callback(task):
    with _span(f"callback {task.key}"):
        return None
