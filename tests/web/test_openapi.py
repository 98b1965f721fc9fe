"""The HTTP API's OpenAPI document (docs/openapi.json, shipped as delayd/web/openapi.json): a valid
OpenAPI 3.1 document, describing exactly the /api/ routes the server has, and served at
GET /api/openapi.json to both tokens. tests/system/test_packaging.py checks that the package installs
it; tests/web/test_openapi_fuzz.py checks the server against it."""
from __future__ import annotations

import json

import pytest
from daemon_helper import ROOT
from openapi_spec_validator import validate
from starlette.routing import Match
from web_helper import TOKEN, Web

from delayd.config import Config
from delayd.web.app import OPENAPI_PATH, Dashboard

DOCUMENT = ROOT / "docs" / "openapi.json"
PACKAGED = ROOT / "delayd" / "web" / "openapi.json"
PRODUCER = "pr0ducer-token-for-tests"
METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")


def document() -> dict:
    return json.loads(DOCUMENT.read_text())


def test_the_document_is_valid_openapi_3_1():
    spec = document()
    assert spec["openapi"].startswith("3.1.")
    validate(spec)


def test_docs_shows_the_document_the_package_ships():
    assert DOCUMENT.resolve() == PACKAGED.resolve(), "docs/openapi.json is a link to delayd/web/openapi.json"


def api_routes(app) -> list:
    return [route for route in app.routes if getattr(route, "path", "").startswith("/api/")]


def test_every_api_route_is_described_and_every_description_is_routed():
    """Each documented path and method, its parameters filled in, reaches a route of that method
    (the first that matches, as Starlette's router picks); and each /api/ route's every method is
    reached by some documented operation."""
    app = Dashboard(Config(web_token=TOKEN)).app
    routes = api_routes(app)
    assert routes, "the app has /api/ routes"
    reached, unrouted = set(), []
    for path, item in document()["paths"].items():
        concrete = path.replace("{", "").replace("}", "")  # /api/tasks/{topic}/{id} -> /api/tasks/topic/id
        for method in (name.upper() for name in item if name in METHODS):
            scope = {"type": "http", "path": concrete, "method": method, "root_path": "", "path_params": {}}
            route = next((route for route in app.routes if route.matches(scope)[0] == Match.FULL), None)
            if route is None or not route.path.startswith("/api/"):
                unrouted.append(f"{method} {path}")
            else:
                reached.add((route.path, method))
    served = {(route.path, method) for route in routes for method in route.methods if method != "HEAD"}
    assert not unrouted, f"documented but not served: {unrouted}"
    assert not served - reached, f"served but not documented: {sorted(served - reached)}"


@pytest.mark.system
def test_served_to_either_token_and_to_no_one_else(redis_url):
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN, DELAYD_PRODUCER_TOKEN=PRODUCER) as web, web.client() as http:
        for token in (TOKEN, PRODUCER):
            answer = http.get(OPENAPI_PATH, headers={"Authorization": f"Bearer {token}"})
            assert answer.status_code == 200 and answer.headers["content-type"] == "application/json"
            assert answer.content == DOCUMENT.read_bytes()
        assert http.get(OPENAPI_PATH).status_code == 401
        assert http.get("/api/stats", headers={"Authorization": f"Bearer {PRODUCER}"}).status_code == 403


@pytest.mark.system
def test_answers_the_fuzzer_found_are_in_the_documents_shape(api):
    """A path no route takes (a newline in an id) answers the API's JSON error, not Starlette's text;
    a topic no task could have (a control character) is refused with 400, not a 500."""
    answer = api.delete("/api/tasks/order/a%0Ab")
    assert (answer.status_code, answer.headers["content-type"]) == (404, "application/json")
    assert "Not Found" in answer.json()["error"]
    answer = api.post("/api/topics/a%01b/pause")
    assert answer.status_code == 400 and "control characters" in answer.json()["error"]
