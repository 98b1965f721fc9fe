"""The dashboard's disable/enable of a URL host and replay (issue 29): buttons and a form on /hosts, and
POST /api/hosts/<host>/{disable,enable,replay}, under its auth, CSRF and read-only rules."""
from __future__ import annotations

from urllib.parse import quote

import pytest
from daemon_helper import delayd
from redis_server import now_ms
from store_helper import claim, promote_all
from test_web import TOKEN, logged_in
from web_helper import Web

pytestmark = pytest.mark.system
SHOP = "https://shop.example:443"


@pytest.fixture
def web(redis_url):
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN) as server:
        yield server


def disabled(client) -> list[str]:
    return [h.host for h in client.hosts() if h.disabled_at]


def test_the_api_disables_and_enables_a_host(web, client):
    with web.client(headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        answer = api.post(f"/api/hosts/{quote(SHOP, safe='')}/disable")
        assert answer.json()["changed"] == [SHOP], answer.text
        assert disabled(client) == [SHOP]
        page = api.get("/hosts").text
        assert "disabled" in page and f'action="/api/hosts/{quote(SHOP, safe="")}/enable"' in page
        assert api.post("/api/hosts/ftp%3A%2F%2Fx/disable").status_code == 400
        assert api.post(f"/api/hosts/{quote(SHOP, safe='')}/explode").status_code == 404
        assert api.post("/api/hosts/shop.example/enable").json()["result"] == "enabled"
        assert disabled(client) == []


def test_a_host_never_delivered_to_is_not_shown_ok(web, client, redis_url):
    """A host disabled before any delivery read "ok" under FAILING SINCE, in `delayd hosts` and on /hosts."""
    client.disable_host(SHOP)
    line = delayd("hosts", DELAYD_REDIS_URL=redis_url).stdout.splitlines()[1]
    assert line.startswith(SHOP) and line.endswith("; no delivery in the last day"), line
    with web.client(headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        cells = api.get("/hosts").text.split("<tbody>")[1].split("</tbody>")[0]
        assert "no delivery in the last day" in cells and ">ok<" not in cells


def test_the_button_needs_the_csrf_token(web, client):
    client.disable_host(SHOP)
    http, csrf = logged_in(web)
    url = f"/api/hosts/{quote(SHOP, safe='')}/enable"
    assert http.post(url).status_code == 403 and disabled(client) == [SHOP]
    answer = http.post(url, data={"csrf": csrf, "next": "/hosts"})
    assert answer.status_code == 303 and disabled(client) == []
    assert "enabled: 0 tasks set aside will run" in http.get(answer.headers["location"]).text


def test_a_readonly_dashboard_shows_a_disabled_host_and_refuses_to_enable_it(redis_url, client):
    client.disable_host(SHOP)
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN, DELAYD_WEB_READONLY="1") as server, \
            server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        assert http.post(f"/api/hosts/{quote(SHOP, safe='')}/enable").status_code == 403
        page = http.get("/hosts").text
        assert "disabled" in page and "Enable" not in page and 'id="replay"' not in page
    assert disabled(client) == [SHOP]


def failed_urls(client, r, count: int) -> float:
    """`count` URL tasks of https://shop.example run and failed; a replay's `since` before them."""
    since = now_ms(r) / 1000 - 1
    client.add_many([{"topic": "shop", "id": i, "url": "https://shop.example/n"} for i in range(count)])
    for b in range(client.store.buckets):
        promote_all(client.store, b)
        runs = claim(client.store, b, url=True)
        client.store.finish(b, [(run["member"], run["claim"], "failed") for run in runs], 86_400_000)
    return since


def test_replay_from_the_api_and_the_form(web, client, r):
    since = failed_urls(client, r, 3)
    with web.client(headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        answer = api.post("/api/hosts/shop.example/replay", data={"since": str(since), "dry_run": "1"})
        assert answer.json()["matched"] == 3 and client.count("shop", "failed") == 3, answer.text
        assert api.post("/api/hosts/shop.example/replay", data={"since": "soon"}).status_code == 400
        assert 'id="replay"' in api.get("/hosts").text
    http, csrf = logged_in(web)
    answer = http.post("/api/hosts//replay", data={"host": "https://shop.example", "since": str(since),
                                                   "status": "all", "csrf": csrf, "next": "/hosts"})
    assert answer.status_code == 303 and client.count("shop", "failed") == 0
    assert "re-queued 3 finished URL tasks of https://shop.example" in http.get(answer.headers["location"]).text


def test_a_stored_url_with_an_impossible_port_breaks_no_json_read(web, client, r):
    """SPEC 9: a task written past the add gate with `http://x:99999/`: replay and the dashboard's JSON answer."""
    since = failed_urls(client, r, 2)
    r.hset(client.store.keys_for("shop:0").task("shop:0"), "spec", '{"url":"http://x:99999/"}')
    with web.client(headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        answer = api.post("/api/hosts/shop.example/replay", data={"since": str(since), "dry_run": "1"})
        assert answer.status_code == 200 and answer.json()["matched"] == 1, answer.text
        for path in ("/api/tasks/shop/0", "/api/tasks?topic=shop", "/api/tasks?status=failed", "/api/hosts"):
            assert api.get(path).status_code == 200, path


def test_a_replay_walks_past_an_index_of_the_wrong_type(web, client, r):
    """A bucket's `done:ok` that is no sorted set (damaged by hand) answered 503 to a replay of every status, found
    by schemathesis' stateful run (tests/web/test_openapi_fuzz.py): it holds nothing to replay, the rest does."""
    since = failed_urls(client, r, 2)
    for keys in client.store.keys:
        r.set(keys.done("ok"), "not a sorted set")
    with web.client(headers={"Authorization": f"Bearer {TOKEN}"}) as api:
        answer = api.post("/api/hosts/shop.example/replay", data={"since": str(since), "status": "all"})
        assert answer.status_code == 200 and answer.json()["requeued"] == 2, answer.text
    assert "Traceback" not in web.errors()
