"""The patterns of docs/openapi.json against the checks the server runs, without a server (what
tests/web/test_openapi_fuzz.py finds slowly, found here in seconds): every text a pattern matches is taken by
the server's own check, and, where the pattern says all the server takes, random text it does not match is
refused. The patterns are read as schemathesis reads them: ECMA 262's `$` is the end of the text."""
from __future__ import annotations

import re
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_openapi import document

from delayd.client import schedules
from delayd.client.base import to_ms
from delayd.model.checks import check_key_name, check_target, parse_intervals
from delayd.model.limit import parse_rate
from delayd.model.schedule import check_cron, zone_names
from delayd.model.task import Task
from delayd.web import cursors, params

SCHEMAS = document()["components"]["schemas"]
TASK = SCHEMAS["TaskInput"]["properties"]
FORMS = {path: item["post"]["requestBody"]["content"]["application/x-www-form-urlencoded"]["schema"]["properties"]
         for path, item in document()["paths"].items()
         if "application/x-www-form-urlencoded" in item.get("post", {}).get("requestBody", {}).get("content", {})}


def taken(check: Callable[[str], Any]) -> Callable[[str], bool]:
    def takes(text: str) -> bool:
        try:
            check(text)
        except ValueError:  # (TaskError, BadParam and BadCursor are ValueErrors)
            return False
        return True
    return takes


# (the schema's pattern, the server's check, whether the pattern is all the server takes)
PATTERNS = {
    "topic": (SCHEMAS["NameText"], taken(lambda text: Task.new(text, 1, call="a:b")), True),
    "id": (SCHEMAS["IdText"], taken(lambda text: Task.new("t", text, call="a:b")), True),
    "push": (SCHEMAS["NameText"], taken(lambda text: Task.new("t", 1, push=text)), True),
    "call": (SCHEMAS["Target"], taken(lambda text: check_target("call", text)), True),
    "url": (SCHEMAS["Url"], taken(lambda text: Task.new("t", 1, url=text)), False),
    "method": (TASK["method"], taken(lambda text: Task.new("t", 1, url="http://a", method=text)), False),
    "intervals": (SCHEMAS["Intervals"]["oneOf"][2], taken(parse_intervals), False),
    "intervals item": (SCHEMAS["Gap"]["oneOf"][1], taken(lambda text: parse_intervals([text])), False),
    "cron": (SCHEMAS["Cron"], taken(check_cron), False),
    "at": (SCHEMAS["Time"], taken(to_ms), False),
    "signing_key": (TASK["signing_key"], taken(check_key_name), True),
    "traceparent": (TASK["traceparent"], taken(lambda text: Task.new("t", 1, call="a:b", traceparent=text)), True),
    "group": (TASK["group"], taken(lambda text: Task.new("t", 1, call="a:b", group=text)), True),
    "host": (SCHEMAS["Origin"], taken(lambda text: params.host("host", text)), True),
    "rate": (FORMS["/api/limits/{topic}"]["rate"], taken(lambda text: params.rate("rate", text)), True),
    "task cursor": (SCHEMAS["TaskCursor"], taken(lambda text: text and cursors.place(text)), True),
    "failed cursor": (SCHEMAS["FailedCursor"], taken(lambda text: params.failed_cursor("cursor", text)), True),
    "schedule cursor": (SCHEMAS["ScheduleCursor"], taken(schedules.decode_cursor), True),
}


def compiled(schema: dict) -> re.Pattern:
    pattern = schema["pattern"]
    return re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern)


@pytest.mark.parametrize("name", PATTERNS)
def test_the_server_takes_what_a_pattern_matches(name):
    schema, takes, _ = PATTERNS[name]

    @settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.from_regex(compiled(schema)))
    def matched(text):
        if schema.get("minLength", 0) <= len(text) <= schema.get("maxLength", len(text)):
            assert takes(text), (name, text)
    matched()


@pytest.mark.parametrize("name", [name for name, (_, _, exact) in PATTERNS.items() if exact])
def test_the_server_refuses_what_an_exact_pattern_does_not_match(name):
    schema, takes, _ = PATTERNS[name]
    pattern = compiled(schema)

    @settings(max_examples=100, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.text())
    def unmatched(text):
        if not pattern.search(text):
            assert not takes(text), (name, text)
    unmatched()


def test_the_zones_are_the_servers():
    assert SCHEMAS["Zone"]["enum"] == sorted(zone_names())


def test_a_rate_of_zero_is_refused_as_the_pattern_says():
    assert not compiled(FORMS["/api/limits/{topic}"]["rate"]).search("0/s")
    with pytest.raises(ValueError):
        parse_rate("0/s")
