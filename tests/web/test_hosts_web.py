"""The dashboard's disable/enable of a URL host (issue 29): buttons on /hosts and POST
/api/hosts/<host>/{disable,enable}, under its auth, CSRF and read-only rules."""
from __future__ import annotations

from urllib.parse import quote

import pytest
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
        assert "disabled" in page and "Enable" not in page
    assert disabled(client) == [SHOP]
