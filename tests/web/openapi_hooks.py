"""The one rule of docs/openapi.json that JSON Schema cannot state, for schemathesis: a task's `max_wait` is at
least its `debounce` (a comparison of two values of the request, which no schema keyword makes; TaskInput's
description says it). The positive cases that break it are not generated, so a schema-valid request is
never one the server rightly refuses; a negative case that breaks it is still sent, and refused.

Loaded by tests/web/test_openapi_fuzz.py, and by the CLI with `SCHEMATHESIS_HOOKS=openapi_hooks` and
tests/web on PYTHONPATH (docs/development.md, "Tests")."""
from __future__ import annotations

from typing import Any

import schemathesis
from schemathesis.generation import GenerationMode


def _breaks_max_wait(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    debounce, max_wait = item.get("debounce"), item.get("max_wait")
    numbers = all(isinstance(value, (int, float)) and not isinstance(value, bool) for value in (debounce, max_wait))
    return numbers and max_wait < debounce


@schemathesis.hook
def filter_case(context: Any, case: Any) -> bool:
    if case.meta is None or case.meta.generation.mode is not GenerationMode.POSITIVE:
        return True
    items = case.body if isinstance(case.body, list) else [case.body]
    return not any(_breaks_max_wait(item) for item in items)
