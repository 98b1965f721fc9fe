"""The JSON API does what docs/openapi.json says, case by case: what schemathesis found with every check on
(issue 47), each as a plain request to a real `delayd web`."""
from __future__ import annotations

from urllib.parse import quote

import pytest
from web_helper import logged_in

pytestmark = pytest.mark.system


def test_a_method_another_shape_takes_answers_405_with_this_shapes_methods(api):
    """/api/tasks/TOPIC/ID takes GET and DELETE, /api/tasks/TOPIC/ID/ACTION takes POST: each 405 says its own."""
    for method, path, allowed in (("OPTIONS", "/api/tasks/t/1", {"GET", "HEAD", "DELETE"}),
                                  ("POST", "/api/tasks/t/1", {"GET", "HEAD", "DELETE"}),
                                  ("OPTIONS", "/api/tasks/t/1/run", {"POST"}),
                                  ("GET", "/api/tasks/a%2Fb/1/run", {"POST"}),
                                  ("PUT", "/api/tasks/a%2Fb/c%2Fd", {"GET", "HEAD", "DELETE"})):
        answer = api.request(method, path)
        assert answer.status_code == 405, (method, path, answer.text)
        assert set(answer.headers["allow"].split(", ")) == allowed, (method, path)
        assert answer.headers["content-type"] == "application/json"
    assert api.get("/api/tasks/t/1/run/x").status_code == 404


def test_list_parameters_out_of_their_range_answer_400(api):
    for path in ("/api/tasks", "/api/schedules"):
        assert api.get(path, params={"limit": 200}).status_code == 200
        for params in ({"limit": 201}, {"limit": 0}, {"limit": ""}, {"topic": "t" * 513}, {"q": "1" * 513}):
            answer = api.get(path, params=params)
            assert answer.status_code == 400 and answer.json()["error"], (path, params)


def test_a_request_head_of_tens_of_kib_is_the_apis_to_answer(api):
    """A list's topic, id prefix and cursor of their longest in 4-byte characters, percent-encoded (37 KiB): the
    API's JSON answer, not the HTTP server's text/plain 400 (its head limit was 16 KiB)."""
    answer = api.get("/api/tasks", params={"topic": "\U0001f600" * 512, "q": "\U0001f600" * 512,
                                           "cursor": "delayed~1~" + "\U0001f600" * 1024})
    assert answer.status_code == 200 and answer.json()["tasks"] == []


def test_a_flag_is_true_false_1_or_0(api, client):
    """hard=yes deleted softly, silently; dry_run=yes replayed for real: each a word the server did not know."""
    client.add("t", 1, call="delayd.examples:echo", delay=600)
    for answer in (api.post("/api/tasks/t/1/delete", params={"hard": "yes"}),
                   api.post("/api/tasks/t/1/delete", data={"hard": "yes"}),
                   api.delete("/api/tasks/t/1", params={"hard": "yes"}),
                   api.post("/api/hosts/shop.example/replay", data={"since": "0", "dry_run": "yes"})):
        assert answer.status_code == 400 and "must be" in answer.json()["error"], answer.text
    assert client.get("t", 1).status == "delayed"
    assert api.post("/api/tasks/t/1/delete", data={"hard": "true"}).json()["result"] == "removed"
    assert client.get("t", 1) is None


def test_host_actions_read_their_form(api):
    """The form body, which the document describes; the query string is not read."""
    assert api.post("/api/hosts/shop.example/replay", params={"since": "0"}).status_code == 400, "since needed"
    answer = api.post("/api/hosts/shop.example/replay", data={"since": "0", "dry_run": "1", "status": "all"})
    assert answer.json()["result"] == "counted", answer.text
    assert api.post("/api/hosts/shop.example/replay", data={"since": "0", "status": "some"}).status_code == 400
    assert api.post("/api/hosts/shop.example/disable", params={"status": "AAA"}).json()["result"] == "disabled"
    assert api.post("/api/hosts/shop.example/enable", data={"host": "ftp://x"}).status_code == 400, \
        "a form's host is checked, though the path names the host"
    assert api.post("/api/hosts/shop%25example/disable").status_code == 400, "a host name holds no %"


def test_a_limit_is_read_from_the_form(api, client):
    assert api.post("/api/limits/t?clear=1").status_code == 400, "the query string is not read"
    assert api.post("/api/limits/t", data={"rate": "", "concurrency": "2"}).json()["result"] == "set"
    assert [(x.rate, x.concurrency) for x in client.limits()] == [(None, 2)]
    for form in ({"rate": "", "concurrency": ""}, {"clear": "0"}, {"clear": "yes"}, {"rate": "0/s"}):
        assert api.post("/api/limits/t", data=form).status_code == 400, form
    assert api.post("/api/limits/t", data={"clear": "true"}).json()["result"] == "cleared"
    assert client.limits() == []


def test_the_overviews_clear_button_posts_its_form(web, client):
    client.set_limit("t", concurrency=1)
    http, csrf = logged_in(web)
    page = http.get("/").text
    assert 'action="/api/limits/t"' in page and '<input type="hidden" name="clear" value="1">' in page
    assert http.post("/api/limits/t", data={"csrf": csrf, "next": "/", "clear": "1"}).status_code == 303
    assert client.limits() == []


def test_retry_failed_checks_its_cursor_whatever_the_action(api):
    assert api.post("/api/topics/t/pause", params={"cursor": "not a cursor"}).status_code == 400
    assert api.post("/api/topics/t/pause", data={"cursor": "failed~1~t:1"}).json()["result"] == "paused"


def test_an_integer_field_takes_a_whole_number_written_with_a_fraction(api, client):
    """JSON has one kind of number: 2.0 is the integer 2, as the document's `integer` reads it."""
    answer = api.post("/api/tasks", json={"topic": 7.0, "id": 1.0, "push": 3.0, "priority": 3.0, "retries": 2.0})
    assert answer.status_code == 201, answer.text
    task = client.get("7", "1")
    assert (task.push, task.priority, task.retries) == ("3", 3, 2)
    for field in ("priority", "retries", "id"):
        answer = api.post("/api/tasks", json={"topic": "t", "id": 2, "call": "a:b", field: 1.5})
        assert answer.status_code == 400, (field, answer.text)


def test_a_path_segment_holds_a_slash_percent_encoded(api, client):
    client.add("reports/eu", "2026/12", call="delayd.examples:echo", delay=600)
    path = f"/api/tasks/{quote('reports/eu', safe='')}/{quote('2026/12', safe='')}"
    assert api.get(path).json()["task"]["key"] == "reports/eu:2026/12"
    assert api.post(path + "/run").json()["result"] == "due_now"
