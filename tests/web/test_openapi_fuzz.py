"""schemathesis against a real `delayd web` on a real Redis: requests generated from
docs/openapi.json (valid and invalid ones, and methods it does not list) for every operation and each
token, and every answer checked against the document with every check schemathesis has (its CLI's `-c all`):
no 500; a documented status, content type, headers and body; a request the document allows is accepted and
one it forbids refused; a method it does not list answers 405 with the methods it does list in `Allow`. The
one rule JSON Schema cannot state is openapi_hooks.py's. The number of requests sent is printed at the end
(tests/web/conftest.py; docs/development.md, "Tests")."""
from __future__ import annotations

import contextlib

import openapi_hooks  # noqa: F401  (registers its hook)
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from redis_server import RedisServer
from schemathesis.checks import CHECKS, load_all_checks
from test_openapi import DOCUMENT, PRODUCER
from test_web import damage
from web_helper import REQUESTS_SENT, TOKEN, Web

from delayd import Client
from delayd.store import connection

pytestmark = pytest.mark.system

EXAMPLES = 25  # generated cases per operation, token and phase: bounds the run to fit CI (docs/development.md, "Tests")
SCENARIOS = 15  # of the stateful run, each of at most STEPS calls: bounded likewise
STEPS = 5
load_all_checks()
EVERY_CHECK = CHECKS.get_all()
TOKENS = {"web_token": TOKEN, "producer_token": PRODUCER}

schema = schemathesis.openapi.from_path(DOCUMENT)


def seed(url: str) -> None:
    """Tasks of every kind, a deleted one, a paused topic and a limit, so that reads find something; and
    damaged records, indexes and counters (test_web.damage), whose answers must fit the document too."""
    client = Client.from_url(url)
    try:
        for member in ("c:due", "c:runs", "c:spec", "c:far", "c:status", "c:list"):
            client.add(*member.split(":"), call="delayd.examples:echo", delay=600)
        damage(connection.connect(url), client.store)
        client.add("order:cancel", 42, call="delayd.examples:echo", delay=600, params={"order": 42})
        client.add("order:notify", 5, url="http://merchant.example:8080/notify", method="POST",
                   params={"order": 5}, intervals=[0, 30, 60], persistent=False)
        client.add("report:daily", "eu", push="reports", cron="0 6 * * *", tz="Europe/Paris")
        client.add("ping", 1, call="delayd.examples:echo", every=60)
        client.add("order:cancel", 43, call="delayd.examples:echo", delay=600)
        client.delete("order:cancel", 43)
        client.pause("ping")
        client.set_limit("order:notify", rate="10/s", concurrency=2)
    finally:
        client.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`delayd web` on a Redis of its own that confirms `durable` adds (appendfsync always): so that a
    5xx is always a defect, never this Redis refusing durable=True (503)."""
    redis = RedisServer(str(tmp_path_factory.mktemp("fuzz-redis")), aof=True, extra=["--appendfsync", "always"])
    with contextlib.ExitStack() as stack:
        stack.callback(redis.stop)
        seed(redis.start().url)
        web = stack.enter_context(Web(redis.url, DELAYD_WEB_TOKEN=TOKEN, DELAYD_PRODUCER_TOKEN=PRODUCER))
        yield web
    assert "Traceback" not in web.errors(), web.errors()


@pytest.fixture(scope="module")
def http():
    with requests.Session() as keep_alive:
        yield keep_alive


@pytest.fixture
def sent(record_property):
    """The statuses of one operation's requests, counted into the report (REQUESTS_SENT) at the end."""
    statuses: list[int] = []
    yield statuses
    record_property(REQUESTS_SENT, len(statuses))


@schema.parametrize()
@pytest.mark.parametrize("token", TOKENS)  # (also what gives each item its own id under pytest 9.2: see below)
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_every_answer_conforms(case, token, server, http, sent):
    headers = {"Authorization": f"Bearer {TOKENS[token]}"}
    response = case.call(base_url=server.base, session=http, headers=headers)
    sent.append(response.status_code)
    case.validate_response(response, checks=EVERY_CHECK, headers=headers)


def test_every_check_is_run():
    """The checks the CLI's `-c all` runs, the conformance of valid and invalid requests and of 405's Allow
    among them (a schemathesis that renamed one would otherwise drop it here unnoticed)."""
    names = {check.__name__ for check in EVERY_CHECK}
    assert {"positive_data_acceptance", "negative_data_rejection", "unsupported_method", "allow_header_conformance",
            "not_a_server_error", "response_schema_conformance"} <= names, names


def test_each_operation_and_token_is_an_item_of_its_own(request):
    """pytest 9.2 builds an item's id from its callspec, and schemathesis 4.32's items of one operation
    have none: without the token's parametrize every operation had the same id, and xdist (which
    schedules by id) ran one of the 13. Each (operation, token) must be an item with its own id."""
    ids = [item.nodeid for item in request.session.items if item.originalname.startswith("test_every_answer")]
    if len(ids) < 2:
        pytest.skip("fewer than two of the fuzz runs are selected")
    assert len(set(ids)) == len(ids), ids



def test_calls_along_the_links_conform(server, http, sent):
    """schemathesis' stateful phase, with the web token: calls chained along the links it infers between
    operations (a value of one answer sent to another operation: a host listed, then disabled or replayed;
    a task read, then acted on), with every check again, those that look at the calls before among them."""
    headers = {"Authorization": f"Bearer {TOKEN}"}

    class Links(schema.as_state_machine()):
        def get_call_kwargs(self, case):
            return {"base_url": server.base, "session": http, "headers": headers}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            sent.append(response.status_code)
            case.validate_response(response, checks=EVERY_CHECK, headers=headers, recorder=self.recorder)

    Links.run(settings=settings(max_examples=SCENARIOS, stateful_step_count=STEPS, deadline=None, database=None,
                                suppress_health_check=list(HealthCheck)))
