"""The dashboard over HTTP: a real `delayd web` process on the suite's Redis (and a real
daemon where tasks must run): every page and action, the auth refusals, read-only mode,
escaping, and the refused non-loopback start."""
from __future__ import annotations

import json
import re
import signal
import zlib
from pathlib import Path

import psutil
import pytest
from daemon_helper import Daemon, delayd
from redis_server import free_port, lose_scripts, wait_for
from store_helper import claim_due
from web_helper import TOKEN, Web, answers, logged_in

pytestmark = pytest.mark.system

XSS = "<script>alert(1)</script>"


def test_non_loopback_bind_without_a_token_refuses_to_start(redis_url):
    result = delayd("web", "--bind", "0.0.0.0", "--port", str(free_port()), timeout=30, check=1)
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "without a token" in result.stderr and "DELAYD_WEB_TOKEN" in result.stderr


def test_non_loopback_bind_with_a_token_serves(redis_url):
    with Web(redis_url, "--bind", "0.0.0.0", DELAYD_WEB_TOKEN=TOKEN) as server:
        assert server.client().get("/api/stats").status_code == 401
    assert server.proc.returncode == 0, "SIGTERM is a graceful stop: exit 0"


def test_api_refuses_without_or_with_a_wrong_token(web):
    http = web.client()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        answer = http.get("/api/stats", headers=headers)
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
        assert "error" in answer.json()
    assert http.post("/api/topics/t/retry-failed", headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_pages_send_to_the_login_form_and_a_wrong_token_is_refused(web):
    http = web.client()
    answer = http.get("/tasks?status=failed")
    assert answer.status_code == 303 and answer.headers["location"] == "/login?next=%2Ftasks%3Fstatus%3Dfailed"
    wrong = http.post("/login", data={"token": "nope", "next": "/"})
    assert wrong.status_code == 401 and "not right" in wrong.text and "delayd_session" not in wrong.headers.get(
        "set-cookie", "")


def test_login_cookie_is_httponly_and_samesite_strict(web):
    http = web.client()
    answer = http.post("/login", data={"token": TOKEN, "next": "//evil.example/"})
    assert answer.status_code == 303 and answer.headers["location"] == "/", "no redirect off the site"
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert TOKEN not in cookie
    assert http.get("/").status_code == 200
    assert http.get("/api/session").json()["auth"] == "cookie"
    http.post("/logout")
    assert http.get("/api/stats").status_code == 401


def test_cookie_post_needs_the_csrf_token_and_bearer_does_not(web, api, client):
    client.add("t", 1, call="delayd.examples:echo", delay=600)
    http, csrf = logged_in(web)
    assert http.post("/api/tasks/t/1/delete").status_code == 403
    assert http.post("/api/tasks/t/1/delete", headers={"X-CSRF-Token": "0" * 64}).status_code == 403
    assert client.get("t", 1).status == "delayed", "a refused POST changes nothing"
    assert http.post("/api/tasks/t/1/delete", headers={"X-CSRF-Token": csrf}).json()["result"] == "deleted"
    client.add("t", 2, call="delayd.examples:echo", delay=600)
    assert api.post("/api/tasks/t/2/delete").json()["result"] == "deleted"
    assert client.get("t", 2).status == "deleted"


def test_form_post_redirects_back_with_the_outcome(web, client):
    client.add("t", 1, call="delayd.examples:echo", delay=600)
    http, csrf = logged_in(web)
    answer = http.post("/api/tasks/t/1/delete", data={"csrf": csrf, "next": "/tasks/t/1"})
    assert answer.status_code == 303 and answer.headers["location"].startswith("/tasks/t/1?msg=")
    page = http.get(answer.headers["location"])
    assert "deleted: it never runs again" in page.text


def test_the_dashboards_delete_of_a_claimed_task_says_too_late(web, api, client):
    client.add("t", 1, call="delayd.examples:echo")
    claim_due(client.store, "t:1")
    answer = api.post("/api/tasks/t/1/delete").json()
    assert answer["result"] == "deleted" and answer["claimed"] is True
    assert answer["message"] == ("t:1 deleted: it never runs again, but too late for the run already claimed, "
                                 "which may be starting or running")
    client.add("t", 2, call="delayd.examples:echo", delay=600)
    assert api.post("/api/tasks/t/2/delete").json()["claimed"] is False


def test_every_page_renders(api, client):
    client.add("order:cancel", 42, call="delayd.examples:echo", delay=600, params={"order": 42})
    for path in ("/", "/tasks", "/tasks?status=delayed&topic=order:cancel&q=4", "/tasks/order:cancel/42"):
        answer = api.get(path)
        assert answer.status_code == 200, path
        assert answer.headers["content-security-policy"].startswith("default-src 'none'")
    assert 'href="/tasks/order:cancel/42"' in api.get("/tasks?topic=order:cancel").text
    assert api.get("/tasks/order:cancel/43").status_code == 404
    assert api.get("/tasks?status=nope").status_code == 400


def test_api_stats_has_counts_daemons_and_the_last_hour(api, client):
    client.add("t", 1, call="delayd.examples:echo", delay=600)
    stats = api.get("/api/stats").json()
    assert stats["counts"]["delayed"] == 1 and stats["topics"]["t"]["counts"]["delayed"] == 1
    assert stats["daemons"] == [] and len(stats["last_hour"]) == 60
    assert stats["paused"] == []


def test_api_task_has_every_field_and_the_record(api, client):
    client.add("t", "a/b?c#d", url="https://user:hunter2@example.com/x", delay=600)
    answer = api.get("/api/tasks/t/a%2Fb%3Fc%23d")
    assert answer.status_code == 200
    data = answer.json()
    assert data["task"]["id"] == "a/b?c#d" and data["task"]["status"] == "delayed"
    assert "hunter2" not in answer.text, "a password in a task's URL is masked"
    assert api.get("/api/tasks/t/missing").status_code == 404


def test_search_by_id_prefix_and_status_with_a_cursor(api, client):
    client.add_many([{"topic": "a", "id": f"id{i:03d}", "call": "delayd.examples:echo", "delay": 600 + i}
                     for i in range(120)])
    client.add_many([{"topic": "b", "id": f"id{i:03d}", "call": "delayd.examples:echo", "delay": 600}
                     for i in range(30)])
    found = api.get("/api/tasks", params={"topic": "a", "status": "delayed", "q": "id01"}).json()
    assert sorted(t["id"] for t in found["tasks"]) == [f"id{i:03d}" for i in range(10, 20)]
    assert found["cursor"] is None and found["complete"]
    assert found["exact"] is None
    assert api.get("/api/tasks", params={"topic": "a", "q": "id007"}).json()["exact"]["key"] == "a:id007"
    seen, cursor = [], None
    while True:
        page = api.get("/api/tasks", params={"topic": "a", "status": "delayed", "limit": 25,
                                             **({"cursor": cursor} if cursor else {})}).json()
        seen += [t["id"] for t in page["tasks"]]
        cursor = page["cursor"]
        if not cursor:
            break
    assert seen == [f"id{i:03d}" for i in range(120)], "every task once, the next due first"
    assert api.get("/api/tasks", params={"status": "failed"}).json()["tasks"] == []


def test_actions_on_a_running_daemon(redis_url, tmp_path, api, client):
    with Daemon(redis_url, tmp_path / "d"):
        client.add_many([{"topic": "f", "id": i, "call": "delayd.examples:fail"} for i in range(5)])
        wait_for(lambda: client.stats()["counts"]["failed"] == 5, 30, message="5 failed")
        assert api.post("/api/tasks/f/0/retry").json()["result"] == "retrying"
        wait_for(lambda: client.get("f", 0).runs == 2 and client.get("f", 0).status == "failed", 30,
                 message="the retried task ran again")
        assert api.post("/api/tasks/f/missing/retry").status_code == 404
        client.add("d", 1, call="delayd.examples:echo", delay=600)
        assert api.post("/api/tasks/d/1/retry").status_code == 409, "only a failed task can be retried"
        assert api.post("/api/tasks/d/1/delete?hard=1").json() == {
            "result": "removed", "hard": True, "claimed": False, "message": "d:1 removed with every trace"}
        assert client.get("d", 1) is None
        answer = api.post("/api/topics/f/retry-failed")
        assert answer.json()["retried"] == 5
        wait_for(lambda: client.stats()["counts"]["failed"] == 5 and
                 all(client.get("f", i).runs >= 2 for i in range(5)), 30, message="all ran again")


def test_retry_all_failed_streams_ids_from_the_index_in_batches(redis_url, tmp_path, api, client, r):
    """300 failed tasks: two requests of "retry all failed" (200, then 100) put every one back, read no
    task record (ids come from the failed index) and say how many failed are left."""
    with Daemon(redis_url, tmp_path / "d"):
        client.add_many([{"topic": "f", "id": i, "call": "delayd.examples:fail"} for i in range(300)])
        client.add_many([{"topic": "g", "id": i, "call": "delayd.examples:fail"} for i in range(3)])
        wait_for(lambda: client.stats()["counts"]["failed"] == 303, 60, message="303 failed")
    hgetall = r.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0)
    first = api.post("/api/topics/f/retry-failed").json()
    assert (first["retried"], first["failed_left"]) == (200, 100) and first["cursor"]
    assert first["message"] == "200 failed tasks of f will run again now; 100 failed left"
    second = api.post("/api/topics/f/retry-failed", params={"cursor": first["cursor"]}).json()
    assert (second["retried"], second["failed_left"], second["cursor"]) == (100, 0, None)
    assert r.info("commandstats").get("cmdstat_hgetall", {}).get("calls", 0) == hgetall, "a record was read"
    assert {client.get("f", i).status for i in range(300)} == {"delayed"}
    assert client.stats()["topics"]["g"]["counts"]["failed"] == 3, "another topic's failures stay"


def test_pause_resume_and_run_now(api, client):
    client.add("t", 1, call="delayd.examples:echo", delay=600)
    assert api.post("/api/topics/t/pause").json()["result"] == "paused"
    assert client.paused() == ["t"] and api.get("/api/stats").json()["paused"] == ["t"]
    assert "Resume" in api.get("/").text
    assert api.post("/api/topics/t/resume").json()["result"] == "resumed"
    assert client.paused() == []
    due = client.get("t", 1).due_at
    assert api.post("/api/tasks/t/1/run").json()["result"] == "due_now"
    assert client.get("t", 1).due_at < due
    assert api.post("/api/tasks/t/missing/run").status_code == 404
    client.delete("t", 1)
    answer = api.post("/api/tasks/t/1/run")
    assert answer.status_code == 409 and "error" in answer.json(), "only a delayed task can run now"


def test_readonly_refuses_every_action_and_hides_buttons(redis_url, client):
    client.add("f", 1, call="delayd.examples:echo", delay=600)
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN, DELAYD_WEB_READONLY="1") as server, \
            server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        for path in ("/api/tasks/f/1/delete", "/api/tasks/f/1/retry", "/api/tasks/f/1/run",
                     "/api/topics/f/pause", "/api/topics/f/retry-failed"):
            assert http.post(path).status_code == 403, path
        assert client.get("f", 1).status == "delayed"
        page = http.get("/tasks/f/1").text
        assert "read-only" in page and "<form method=\"post\"" not in page


def test_readonly_failed_list_has_no_row_or_bulk_actions(redis_url, tmp_path, client):
    with Daemon(redis_url, tmp_path / "d"):
        client.add("f", 1, call="delayd.examples:fail")
        wait_for(lambda: client.stats()["counts"]["failed"] == 1, 30, message="1 failed")
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN, DELAYD_WEB_READONLY="1") as server, \
            server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        page = http.get("/tasks?topic=f&status=failed").text
        assert 'href="/tasks/f/1"' in page
        assert "<form method=\"post\"" not in page and "data-bulk" not in page and 'class="pick"' not in page


def test_stored_html_renders_inert(api, client):
    client.add(f"x{XSS}", "<img/src=x/onerror=alert(2)>", call="delayd.examples:echo", delay=600,
               params={"p": XSS})
    for path in ("/", f"/tasks?topic=x{XSS}", "/tasks/x%3Cscript%3Ealert(1)%3C%2Fscript%3E/%3Cimg%2Fsrc%3Dx%2F"
                                               "onerror%3Dalert(2)%3E"):
        answer = api.get(path, headers={"Accept": "text/html"})
        text = answer.text
        assert answer.status_code == 200, path
        assert "<script>alert" not in text and "<img/src" not in text, path
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text, path


def test_no_secret_on_any_page(redis_url, client):
    client.add("t", 1, url="https://u:hunter2@example.com/", delay=600)
    with Web(redis_url.replace("redis://", "redis://default:@"), DELAYD_WEB_TOKEN=TOKEN) as server, \
            server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        for path in ("/", "/tasks", "/tasks/t/1", "/api/stats", "/api/tasks", "/api/tasks/t/1", "/api/session"):
            text = http.get(path).text
            assert TOKEN not in text and "hunter2" not in text, path


def test_without_a_token_only_loopback_host_names_are_answered(redis_url, client):
    with Web(redis_url) as server, server.client() as http:
        assert http.get("/api/stats").status_code == 200
        assert http.get("/api/stats", headers={"Host": "evil.example"}).status_code == 403
        assert http.get("/api/stats", headers={"Host": f"localhost:{server.port}"}).status_code == 200
        client.add("t", 1, call="delayd.examples:echo", delay=600)
        assert http.post("/api/tasks/t/1/delete").status_code == 403, "CSRF is needed even without a token"
        csrf = http.get("/api/session").json()["csrf"]
        assert http.post("/api/tasks/t/1/delete", headers={"X-CSRF-Token": csrf}).status_code == 200


def test_master_supervises_a_web_child(redis_url, tmp_path):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    daemon = Daemon(redis_url, tmp_path / "d", DELAYD_WEB_PORT=str(port), DELAYD_WEB_TOKEN=TOKEN).start(wait=False)
    try:
        wait_for(lambda: daemon.ready() and daemon.children("web"), 30, message="delayd: web")
        child = daemon.child("delayd: web")
        wait_for(lambda: answers(base), 30, message="the dashboard answering")
        child.kill()
        wait_for(lambda: [c for c in daemon.children("web") if c.pid != child.pid], 30, message="a new delayd: web")
        wait_for(lambda: answers(base), 30, message="the dashboard answering again")
    finally:
        daemon.stop()
    assert not answers(base), "stopped with the master"
    # A graceful stop, not a kill (uvicorn re-raised the SIGTERM it stopped on: "killed by SIGTERM").
    stopped = [line for line in daemon.log().splitlines() if "event=child_stopped child=web " in line]
    assert len(stopped) == 1 and 'how="exited with status 0"' in stopped[0], stopped


def test_the_web_child_reopens_its_log_on_sigusr1(redis_url, tmp_path):
    """logrotate's SIGUSR1 through the master: the `delayd: web` child (never signalled, so it kept
    the rotated file open) writes to the new log as every other process does, and is not killed."""
    port = free_port()
    daemon = Daemon(redis_url, tmp_path / "d", DELAYD_WEB_PORT=str(port), DELAYD_WEB_TOKEN=TOKEN).start(wait=False)
    log = Path(daemon.env["DELAYD_LOG_FILE"])
    try:
        wait_for(lambda: daemon.ready() and len(daemon.children()) == 4, 30, message="2 buckets, a queue, a web")
        wait_for(lambda: "proc=web " in log.read_text(), 30, message="the web child's first line (web_started)")
        processes = [daemon.master, *daemon.children()]
        rotated = log.rename(log.with_suffix(".log.1"))
        daemon.signal(signal.SIGUSR1)
        wait_for(lambda: log.exists() and "event=log_reopened" in log.read_text(), 10, message="log reopened")

        def open_logs() -> dict[str, set[str]]:
            return {" ".join(p.cmdline()).strip(): {f.path for f in p.open_files()} & {str(log), str(rotated)}
                    for p in processes}
        try:
            wait_for(lambda: all(paths == {str(log)} for paths in open_logs().values()), 10,
                     message="every process writing to the new log")
        except AssertionError:
            raise AssertionError(f"log files open: {open_logs()}") from None
        assert {c.pid for c in daemon.children()} == {p.pid for p in processes[1:]}, "no child restarted"
    finally:
        daemon.stop()
    assert "SIGUSR1" not in log.read_text() + rotated.read_text(), "a child was killed by the log-reopen signal"


def test_master_refuses_a_non_loopback_web_bind_without_a_token(redis_url, tmp_path):
    daemon = Daemon(redis_url, tmp_path / "d", DELAYD_WEB_PORT=str(free_port()), DELAYD_WEB_BIND="0.0.0.0")
    daemon.start(wait=False)
    assert daemon.wait(30) == 1
    assert re.search(r"without a token", daemon.proc.stdout.read() + daemon.log())
    daemon.stop()


@pytest.mark.parametrize("status", ["delayed", "failed"])
def test_browse_pages_are_exact_with_a_small_budget(client, r, status):
    """Pages that stop on the budget still list every match once, in order, across buckets
    (equal scores included: add_many gives a batch one due time)."""
    client.add_many([{"topic": "t" if i % 7 else "other", "id": f"k{i:03d}", "call": "delayd.examples:echo",
                      "delay": 600 + i // 10} for i in range(200)])
    if status == "failed":  # move them to done:failed with scores that tie in tens
        for keys in client.store.keys:
            for member, score in r.zrange(keys.delayed, 0, -1, withscores=True):
                r.zadd(keys.done("failed"), {member: score})
                r.hset(keys.task(member), "status", "failed")
            r.delete(keys.delayed)
    wanted = sorted(((int(r.zscore(client.store.keys_for(f"t:k{i:03d}").done("failed") if status == "failed" else
                                   client.store.keys_for(f"t:k{i:03d}").delayed, f"t:k{i:03d}")), f"t:k{i:03d}")
                     for i in range(200) if i % 7), reverse=status == "failed")
    seen, cursor, pages = [], None, 0
    lose_scripts(r)  # the buckets' pipelined browse calls load the script again (NOSCRIPT)
    while True:
        page = client.browse(status, "t", "k", cursor, limit=9, budget=12)
        seen += [(row.score, row.member) for row in page.rows]
        pages += 1
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == wanted and pages > len(wanted) // 9


# -- damaged data: every page answers, showing the bad entry and why, never a 500 ---------------
def damage(r, store) -> None:
    """Wrong-typed keys, unreadable fields and scores, names that are not UTF-8, in every place a page reads."""
    from delayd.store import registry
    keys = store.keys
    for member, field, value in (("c:due", "due", "soon"), ("c:runs", "runs", "many"), ("c:spec", "spec", b"\xff{"),
                                 ("c:far", "due", "9" * 30), ("c:status", "status", "zzz"),
                                 ("c:deep", "spec", '{"call":"a:b","params":' + '{"a":' * 500 + "1" + "}" * 501)):
        r.hset(store.keys_for(member).task(member), field, value)
    r.delete(store.keys_for("c:list").task("c:list"))
    r.rpush(store.keys_for("c:list").task("c:list"), "not", "a", "hash")
    odd = keys[zlib.crc32(b"c:\xff") % store.buckets]  # a name that is not UTF-8
    r.hset(odd.task_prefix.encode() + b"c:\xff", mapping={"spec": '{"call":"a:b"}', "status": "delayed",
                                                          "created": 1, "due": 1})
    r.zadd(odd.delayed, {b"c:\xff": 1})
    for member, score in (("c:inf", "inf"), ("c:-inf", "-inf")):  # scores Redis allows
        r.zadd(store.keys_for(member).done("failed"), {member: score})
        r.hset(store.keys_for(member).task(member), mapping={"spec": '{"call":"a:b"}', "status": "failed",
                                                             "created": 1, "due": 1})
    r.set(keys[1 % store.buckets].done("ok"), "not a sorted set")      # an index of the wrong type
    r.hset(keys[0].counts, mapping={"waiting|c": "many", b"ok|\xff": "1"})
    r.hset(f"{keys[0].window_prefix}m:{int(r.time()[0]) // 60}", mapping={"ok|c": "x", b"started|\xfe": "2"})
    registry.register(r, store.prefix, "bytes", {})
    r.hset(registry.keys(store.prefix)[0], "bytes", b'{"host": "\xff", "started": 1e999, "children": []}')


def test_every_page_shows_damaged_data_and_never_fails(api, client, r):
    from delayd.store import connection
    for member in ("c:good", "c:due", "c:runs", "c:spec", "c:far", "c:status", "c:list", "c:deep"):
        client.add(*member.split(":"), call="delayd.examples:echo", delay=600)
    raw = connection.connect(client.url)
    damage(raw, client.store)
    paths = ["/", "/api/stats", "/tasks", "/tasks?topic=c", "/tasks?status=failed", "/tasks?status=ok",
             "/api/tasks", "/api/tasks?status=failed", "/api/tasks?status=ok", "/api/tasks?topic=c&status=delayed",
             "/tasks/c/good", "/tasks/c/due", "/tasks/c/list", "/tasks/c/far", "/tasks/c/%FF", "/api/tasks/c/list",
             "/api/tasks/c/%FF", "/tasks/c/inf", "/tasks/c/deep", "/api/tasks/c/deep"]
    for path in paths:
        for accept in ("text/html", "application/json"):
            answer = api.get(path, headers={"Accept": accept})
            assert answer.status_code == 200, (path, answer.status_code, answer.text[-300:])
    listed = api.get("/api/tasks", params={"topic": "c"}).json()
    corrupt = {row["key"]: row["corrupt"] for row in listed["tasks"] if row["corrupt"]}
    assert {"c:due", "c:runs", "c:spec", "c:status", "c:list", "c:\\xff", "c:deep"} <= corrupt.keys(), corrupt
    assert "nested more than 65 levels deep" in corrupt["c:deep"]
    assert "not a hash" in corrupt["c:list"] and "does not parse" in corrupt["c:due"]
    ok = api.get("/api/tasks", params={"status": "ok"}).json()
    assert any("not a sorted set" in problem for problem in ok["problems"]), ok
    assert "not a sorted set" in api.get("/tasks?status=ok").text
    page = api.get("/tasks?topic=c", headers={"Accept": "text/html"}).text
    assert 'href="/tasks/c/%FF"' in page and ">\\xff<" in page
    assert "not a hash" in api.get("/api/tasks/c/list").json()["corrupt"]
    missing = api.get("/tasks/c/missing", headers={"Accept": "text/html"})
    assert missing.status_code == 404 and "not found: c:missing" in missing.text, "the HTML error page renders"
    raw.close()


# -- what the pages say (issue 25: times with their zone, honest labels, one tab, the icon) ------------
CRON_DUE = (r'<span class="when">\d{4}-\d\d-\d\d 03:00:00\.000 CES?T</span> '  # 03:00 in Berlin: 02:00 or 01:00 UTC
            r'<span class="when local">\(0[12]:00:00 UTC\)</span>')


def when(text: str) -> str:
    """A time on a page that has no other zone beside it."""
    return f'<span class="when">{text}</span>'


def test_every_time_on_the_pages_says_its_zone(redis_url, client):
    """A cron task's times in its own zone with the server's (UTC) beside them; other times in the
    server's zone, named."""
    client.add("report", "daily", call="delayd.examples:echo", cron="0 3 * * mon-fri", tz="Europe/Berlin")
    client.add("t", 1, call="delayd.examples:echo", at=2_000_000_000)
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN, TZ="UTC") as server, \
            server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        page = http.get("/tasks/report/daily").text
        assert len(re.findall(r"<td>" + CRON_DUE + "</td>", page)) == 2, "due and next run"
        # (The server's time beside it carries its date too when that differs: 23:00-24:00 UTC.)
        assert re.search(r'created</th><td><span class="when">\S+ \S+ CES?T</span> '
                         r'<span class="when local">\((\S+ )?\S+ UTC\)</span></td>', page)
        assert re.search(r"<td>" + CRON_DUE + "</td>", http.get("/tasks?topic=report").text)
        assert re.search(r"<td>" + CRON_DUE + "</td>", http.get("/schedules").text)
        assert f"<td>{when('2033-05-18 03:33:20.000 UTC')}</td>" in http.get("/tasks/t/1").text
        assert f"<td>{when('2033-05-18 03:33:20.000 UTC')}</td>" in http.get("/tasks?topic=t").text
        overview = http.get("/").text
        assert re.search(r'next due <span class="when">\d{4}-\S+ \S+ UTC</span>', overview)
        assert overview.count("last hour (UTC)") == 3


def test_list_labels_say_the_real_order_and_how_far_it_looked(api, client):
    client.add_many([{"topic": "a", "id": f"id{i:03d}", "call": "delayd.examples:echo", "delay": 600 + i}
                     for i in range(90)])
    data = api.get("/api/tasks", params={"status": "delayed"}).json()
    assert data["cursor"] and data["examined"] == data["indexed"] == 90, "every entry seen, and a next page"
    page = api.get("/tasks?status=delayed").text
    assert "Soonest due first." in page and "Newest first" not in page and "<th>due</th>" in page
    assert "more may match" not in page and "More on the next page." in page
    last = api.get(f"/tasks?status=delayed&cursor={data['cursor']}").text
    assert "This is the end of the list" in last and "more may match" not in last
    for status, says in (("failed", "Most recently failed first."), ("ok", "Most recently finished first."),
                         ("deleted", "Most recently deleted first."), ("running", "Most recently claimed first")):
        assert says in api.get(f"/tasks?status={status}").text, status
    assert "Running first (latest lease first), then delayed (soonest due first)" in api.get("/tasks").text


def test_the_failed_page_highlights_one_tab(api):
    for path, tab in (("/tasks?status=failed", "Failed"), ("/tasks?status=ok", "Tasks"), ("/tasks", "Tasks"),
                      ("/", "Overview"), ("/schedules", "Schedules")):
        assert re.findall(r'class="on">(\w+)</a>', api.get(path).text) == [tab], path


def test_persistent_says_when_it_stops(api, client):
    client.add("t", 1, call="delayd.examples:echo", intervals=[0, 2], delay=600)
    assert "yes: until it succeeds; retried every 2 s after the last interval" in api.get("/tasks/t/1").text


def test_an_ok_run_shows_its_answer_not_an_error(redis_url, tmp_path, api, client, http):
    with Daemon(redis_url, tmp_path / "d"):
        client.add("t", 1, url=http.base + "/success")
        client.add("t", 2, url=http.base + "/error", intervals=[0, 600])
        wait_for(lambda: client.get("t", 1).status == "ok" and client.get("t", 2).runs >= 1, 30, message="runs")
    assert '<td class="mono clip answer">success</td>' in api.get("/tasks/t/1").text
    assert '<td class="mono clip err">' in api.get("/tasks/t/2").text, "an error stays an error"
    assert "<th>answer or error</th>" in api.get("/tasks/t/1").text


def test_failed_rows_have_retry_and_delete_buttons_and_bulk_actions(redis_url, tmp_path, web, client):
    """Each failed row: Retry and Delete forms carrying the CSRF token (Delete asks first), posting to
    the JSON API's actions, and back to this very list; the bulk bar is there for scripts to show."""
    with Daemon(redis_url, tmp_path / "d"):
        client.add_many([{"topic": "f", "id": i, "call": "delayd.examples:fail"} for i in range(2)])
        wait_for(lambda: client.stats()["counts"]["failed"] == 2, 30, message="2 failed")
    http, csrf = logged_in(web)
    here = "/tasks?topic=f&status=failed&q="
    page = http.get(here).text
    for i in range(2):
        retry = re.search(rf'<form method="post" action="/api/tasks/f/{i}/retry" class="inline">\s*'
                          rf'<input type="hidden" name="csrf" value="(\w+)">\s*'
                          rf'<input type="hidden" name="next" value="([^"]+)">', page)
        assert retry and retry[1] == csrf and retry[2].replace("&amp;", "&") == here
        assert re.search(rf'action="/api/tasks/f/{i}/delete" class="inline" data-confirm="Delete f:{i}\? ', page)
        assert re.search(rf'class="pick"\s+data-api="/api/tasks/f/{i}" data-key="f:{i}"', page)
    assert '<div class="bulk" hidden>' in page and 'data-bulk="retry"' in page and 'data-bulk="delete"' in page
    answer = http.post("/api/tasks/f/1/retry", data={"csrf": csrf, "next": here})
    assert answer.status_code == 303 and answer.headers["location"].startswith(here + "&msg=")
    assert client.get("f", 1).status == "delayed"
    answer = http.post("/api/tasks/f/0/delete", data={"csrf": csrf, "next": here})
    assert answer.status_code == 303 and client.get("f", 0).status == "deleted"


def test_the_icon_is_served_to_anyone(web):
    answer = web.client().get("/favicon.ico")
    assert answer.status_code == 200 and answer.headers["content-type"] == "image/x-icon"
    assert answer.content[:4] == b"\x00\x00\x01\x00", "an ICO file"
    assert '<link rel="icon" href="/favicon.ico">' in web.client().get("/login").text


def test_delayd_web_run_by_hand_is_titled(web):
    assert " ".join(psutil.Process(web.proc.pid).cmdline()).strip() == "delayd: web"


def test_children_up_counts_what_status_lists_with_the_embedded_redis(tmp_path):
    """`delayd status` lists the embedded Redis among the children: the overview and `status --cluster`
    count it too (2 buckets, a queue and the Redis: 4)."""
    with Daemon(None, tmp_path / "d") as daemon:
        listed = json.loads(delayd("status", "--json", env=daemon.env).stdout)["processes"]
        children = [p for p in listed if p["title"] != "delayd: master"]
        assert len(children) == 4 and any(p["title"].startswith("delayd: redis") for p in children), listed
        cluster = delayd("status", "--cluster", env=daemon.env).stdout
        assert " 4/4 up " in cluster, cluster
        with Web(f"unix://{tmp_path / 'd' / 'redis.sock'}", DELAYD_WEB_TOKEN=TOKEN) as web, \
                web.client(headers={"Authorization": f"Bearer {TOKEN}"}) as api:
            page = api.get("/", headers={"Accept": "text/html"}).text
            assert '<td class="num">4/4</td>' in page, re.findall(r"\d+/\d+", page)
