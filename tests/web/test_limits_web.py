"""The dashboard's limits (SPEC 8, "Limits"): shown on the overview with what they hold, set and cleared
by its form and POST /api/limits/<topic>, under its auth, CSRF and read-only rules."""
from __future__ import annotations

import pytest
from web_helper import TOKEN, Web, logged_in

pytestmark = pytest.mark.system


@pytest.fixture
def web(redis_url):
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN) as server:
        yield server


def test_the_api_sets_and_clears_a_limit(web, client):
    with web.client(headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        answer = api.post("/api/limits/payment:refund", data={"rate": "50/s", "concurrency": "4"})
        assert answer.json()["result"] == "set", answer.text
        assert [(x.rate, x.concurrency) for x in client.limits()] == [("50/s", 4)]
        assert api.get("/api/stats").json()["limits"]["payment:refund"]["rate"] == "50/s"
        page = api.get("/").text
        assert "payment:refund" in page and "50/s" in page and "Set limit" in page
        for bad in ({"rate": "5/d"}, {"concurrency": "x"}, {}):
            assert api.post("/api/limits/payment:refund", data=bad).status_code == 400, bad
        assert api.post("/api/limits/payment:refund", data={"clear": "1"}).json()["result"] == "cleared"
        assert client.limits() == []
        client.set_limit("x", concurrency=1)
        assert api.post("/api/limits/x", data={"clear": "1"}).json()["result"] == "cleared"


def test_the_overview_form_needs_the_csrf_token(web, client):
    http, csrf = logged_in(web)
    assert http.post("/api/limits/", data={"topic": "merchant:sync", "concurrency": "1"}).status_code == 403
    assert client.limits() == []
    answer = http.post("/api/limits/", data={"topic": "merchant:sync", "concurrency": "1", "csrf": csrf, "next": "/"})
    assert answer.status_code == 303
    assert [(x.topic, x.concurrency) for x in client.limits()] == [("merchant:sync", 1)]
    assert "limited to concurrency 1" in http.get(answer.headers["location"]).text


def test_a_readonly_dashboard_shows_limits_and_refuses_to_change_them(redis_url, client):
    client.set_limit("t", rate="2/m")
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN, DELAYD_WEB_READONLY="1") as server, \
            server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        assert http.post("/api/limits/t", data={"clear": "1"}).status_code == 403
        page = http.get("/").text
        assert "2/m" in page and "Set limit" not in page
    assert [x.rate for x in client.limits()] == ["2/m"]


NOT_ASCII_DIGITS = ["²", "٣", "１", "1_0", "+3"]  # int() takes all but the first; only 0-9 make a number here


@pytest.mark.parametrize("text", NOT_ASCII_DIGITS)
def test_number_fields_take_ascii_digits_only(web, client, text):
    client.add("t", 1, call="delayd.examples:echo", delay=600)
    with web.client(headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        for path, data in (("/api/limits/t", {"concurrency": text}), ("/api/limits/t", {"rate": f"{text}/s"}),
                           ("/api/hosts/http%3A%2F%2Fa.example/replay", {"since": text, "dry_run": "1"})):
            answer = api.post(path, data=data)
            assert answer.status_code == 400 and "\n" not in answer.json()["error"], (path, data, answer.text)
        for path in ("/api/tasks", "/api/schedules"):
            answer = api.get(path, params={"limit": text})
            assert answer.status_code == 400 and "limit" in answer.json()["error"], (path, answer.text)
        for given, says in (({"at": text}, "at must be"), ({"intervals": f"0,{text}"}, "not a number of seconds")):
            answer = api.post("/api/tasks", json={"topic": "t", "id": 2, "call": "a:b", **given})
            assert answer.status_code == 400 and says in answer.json()["error"], answer.text
    assert client.limits() == [] and client.count("t") == 1
