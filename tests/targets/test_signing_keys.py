"""Named signing keys for many merchants (SPEC 8, issue 29): each merchant (a real local HTTP server)
verifies with the standardwebhooks package only its own key's signatures; a key in rotation signs with
every secret, so either verifies; a task naming a key that is not configured is not sent; keys reload
with `delayd reload`; no secret shows in the log, ps, status, get, stats, /metrics or the dashboard."""
from __future__ import annotations

import json

import httpx
import pytest
from daemon_helper import Daemon, delayd
from redis_server import free_port, wait_for
from standardwebhooks import Webhook, WebhookVerificationError
from url_helper import _Handler, _serving
from web_helper import Web

from delayd import Client, Task
from delayd import config as config_mod
from delayd.model.task import TaskError

ACME_NEW, ACME_OLD = "whsec_QWNtZU5ld1NlY3JldEZvclNpZ25pbmcxMjM0NTY=", "whsec_QWNtZU9sZFNlY3JldEZvclNpZ25pbmc5ODc2NTQ="
GLOBEX = "whsec_R2xvYmV4U2VjcmV0Rm9yU2lnbmluZ0FCQ0RFRkc="
DEFAULT = "whsec_RGVmYXVsdFNlY3JldEZvclNpZ25pbmdYWVpYWVo="
ALL_SECRETS = (ACME_NEW, ACME_OLD, GLOBEX, DEFAULT)


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch):
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


def verifies(secret: str, req: dict) -> bool:
    try:
        Webhook(secret).verify(req["body"], req["headers"], json_parse=False)
    except WebhookVerificationError:
        return False
    return True


def url_task(url: str, key: str | None, id: int = 1) -> Task:
    task = Task.new("notify", id, url=url, method="POST", body="json", params={"order": id}, signing_key=key)
    task.runs = 1
    return task


def test_two_merchants_each_verify_only_their_own_key_and_a_rotation_verifies_with_either(http, make_engine):
    deliver = make_engine(url_signing_secret=DEFAULT, url_signing_keys=config_mod.signing_keys(
        {"acme": [ACME_NEW, ACME_OLD], "globex": GLOBEX}))
    with _serving(_Handler) as globex:
        assert deliver(url_task(f"{http.base}/echo", "acme")).kind == "ok"
        assert deliver(url_task(f"{globex.base}/echo", "globex")).kind == "ok"
        assert deliver(url_task(f"{globex.base}/echo", None, id=2)).kind == "ok"
        (acme_req,), (globex_req, default_req) = http.requests, globex.requests
    # acme's request: one v1 signature per secret of its key, newest first; each verifies alone
    assert acme_req["headers"]["webhook-signature"].count("v1,") == 2
    assert verifies(ACME_NEW, acme_req) and verifies(ACME_OLD, acme_req)
    assert not verifies(GLOBEX, acme_req) and not verifies(DEFAULT, acme_req)
    assert verifies(GLOBEX, globex_req) and not any(verifies(s, globex_req) for s in (ACME_NEW, ACME_OLD, DEFAULT))
    assert globex_req["headers"]["webhook-signature"].count("v1,") == 1
    # a task without signing_key: the default key, as before
    assert verifies(DEFAULT, default_req) and not any(verifies(s, default_req) for s in (ACME_NEW, GLOBEX))


def test_a_task_naming_a_key_that_is_not_configured_is_not_sent(http, make_engine):
    deliver = make_engine(url_signing_secret=DEFAULT, url_signing_keys=config_mod.signing_keys({"acme": ACME_NEW}))
    outcome = deliver(url_task(f"{http.base}/echo", "gone"))
    assert outcome.kind == "retry"
    assert outcome.error == "signing key 'gone' is not in url_signing_keys: not sent (add it to the config and reload)"
    assert http.requests == []  # not even unsigned, nor with the default key


def test_signing_key_is_a_name_for_url_tasks_only():
    assert Task.new("t", 1, url="http://h/x", signing_key="shop.eu:2_a-b").signing_key == "shop.eu:2_a-b"
    for bad in ("", "a b", "é", "x" * 129, 5, "a=b", "a,b"):
        with pytest.raises(TaskError, match="signing_key must be 1-128 letters"):
            Task.new("t", 1, url="http://h/x", signing_key=bad)
    with pytest.raises(TaskError, match="signing_key is for a url task"):
        Task.new("t", 1, call="a.b:c", signing_key="acme")


def test_a_client_that_knows_the_keys_refuses_an_unknown_name_and_writes_nothing(redis_url, r):
    env = {"DELAYD_URL_SIGNING_KEYS": f"acme={ACME_NEW}"}
    known = Client.from_url(redis_url, config=config_mod.load(None, env=env))
    with pytest.raises(TaskError, match=r"signing_key 'globex' is not one of url_signing_keys \(acme\)"):
        known.add("n", 1, url="http://h/x", signing_key="globex")
    assert r.keys("*t:n:*") == []
    assert known.add("n", 1, url="http://h/x", signing_key="acme")
    assert known.get("n", 1).signing_key == "acme" and known.get("n", 1).to_dict()["signing_key"] == "acme"
    unaware = Client.from_url(redis_url, config=config_mod.load(None, env={}))  # keys unknown here: the daemon decides
    assert unaware.add("n", 2, url="http://h/x", signing_key="globex")


@pytest.mark.system
def test_keys_reload_a_removed_key_fails_its_runs_unsent_and_no_secret_shows_anywhere(redis_url, tmp_path, http):
    path = tmp_path / "delayd.toml"
    path.write_text(f'url_signing_secret = "{DEFAULT}"\n[url_signing_keys]\nacme = ["{ACME_NEW}", "{ACME_OLD}"]\n'
                    f'globex = "{GLOBEX}"\n')
    metrics = free_port()
    d = Daemon(redis_url, tmp_path / "d", buckets=1, queues=1, DELAYD_CONFIG=str(path),
               DELAYD_METRICS_PORT=str(metrics))
    client = Client.from_url(redis_url)
    with d:
        assert delayd("add", "notify", "1", "--url", f"{http.base}/echo", "--signing-key", "acme", "--once",
                      env=d.env).returncode == 0
        client.add("notify", 2, url=f"{http.base}/echo", signing_key="globex", persistent=False)
        wait_for(lambda: len(http.requests) == 2, 20, message="both merchants notified")
        by_id = {req["headers"]["webhook-id"]: req for req in http.requests}
        assert verifies(ACME_NEW, by_id["notify:1"]) and verifies(ACME_OLD, by_id["notify:1"])
        assert verifies(GLOBEX, by_id["notify:2"]) and not verifies(ACME_NEW, by_id["notify:2"])
        wait_for(lambda: client.get("notify", 2).status == "ok", 20, message="globex's task done")

        # globex's key is removed; the reload starts queue processes on the new file
        path.write_text(f'url_signing_secret = "{DEFAULT}"\n[url_signing_keys]\nacme = "{ACME_NEW}"\n')
        assert delayd("reload", env=d.env).returncode == 0
        refused = delayd("add", "notify", "3", "--url", f"{http.base}/echo", "--signing-key", "globex",
                         env=d.env, check=1)  # the command reads the same file: it knows the keys
        assert "signing_key 'globex' is not one of url_signing_keys (acme)" in refused.stderr
        client.add("notify", 4, url=f"{http.base}/echo", signing_key="globex", persistent=False)  # keys unknown here
        wait_for(lambda: client.get("notify", 4).status == "failed", 20, message="the run failed")
        assert client.get("notify", 4).last_error.endswith(
            "last error: signing key 'globex' is not in url_signing_keys: not sent (add it to the config and reload)")
        assert [req["headers"]["webhook-id"] for req in http.requests] == ["notify:1", "notify:2"]  # nothing more

        got = delayd("get", "notify", "1", "--json", env=d.env).stdout
        assert json.loads(got)["signing_key"] == "acme"
        seen = [got, d.log(), *(" ".join(p.cmdline()) for p in [d.master, *d.children()]),
                delayd("status", env=d.env).stdout, delayd("status", "--json", env=d.env).stdout,
                delayd("get", "notify", "4", env=d.env).stdout,
                delayd("stats", "--json", env=d.env).stdout, delayd("ls", "--all", env=d.env).stdout,
                httpx.get(f"http://127.0.0.1:{metrics}/metrics", timeout=10).text]
        with Web(redis_url, DELAYD_CONFIG=str(path)) as web, web.client() as browser:
            page = browser.get("/tasks/notify/1")
            assert page.status_code == 200 and "acme" in page.text  # the key's name is shown, never its secrets
            seen += [page.text, browser.get("/api/tasks/notify/1").text, browser.get("/").text]
        for text in seen:
            for secret in ALL_SECRETS:
                assert secret not in text and secret.removeprefix("whsec_") not in text
