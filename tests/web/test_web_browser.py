"""The dashboard in a real browser (login, search, retry, pause/resume, retry-all, the Failed list's row
and bulk actions, delete confirmations, the overview's refresh, XSS): Debian's chromium, headless,
driven by Playwright.

scripts/test installs chromium (apt) when it runs as root and it is missing; elsewhere
these tests skip and say why, except under CI=true (.ci/run sets it), where a missing browser
fails the run: CI must not pass with no browser test run. DASHBOARD_SCREENSHOTS=DIR saves the
overview, two task pages (a failed call, a cron URL task), two task lists (failed, any status), the
schedules page and the hosts page as PNGs (docs/ has the committed ones).
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from daemon_helper import Daemon
from redis_server import wait_for
from web_helper import Web

from delayd.store.transport import Transport
from delayd.targets.url.health import Health

pytestmark = pytest.mark.system

CHROMIUM = os.environ.get("DELAYD_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
TOKEN = "browser-t0ken"
XSS = "<script>window.pwned=1</script>"


def missing(what: str) -> None:
    """Skip this file for want of `what`; under CI=true, fail instead."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"CI=true and {what}: the browser tests cannot run", pytrace=False)
    pytest.skip(what, allow_module_level=True)


try:
    from playwright import sync_api
except ImportError:
    missing("playwright is not installed (pip install -e .[test])")
if not (Path(CHROMIUM).is_file() or shutil.which("chromium")):
    missing(f"no chromium at {CHROMIUM} (scripts/test installs it with apt-get when run as root)")


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    dialogs: list[str] = []
    page.accept_dialogs = False  # a test sets it to say yes to the next confirm()
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message),
                                      dialog.accept() if page.accept_dialogs else dialog.dismiss()))
    page.dialogs = dialogs
    page.set_default_timeout(15_000)
    yield page
    context.close()


def screenshot(page, name: str) -> None:
    where = os.environ.get("DASHBOARD_SCREENSHOTS")
    if where:
        page.screenshot(path=str(Path(where) / name), full_page=True)


def test_login_search_retry_and_xss_stays_text(redis_url, tmp_path, client, page):
    with Daemon(redis_url, tmp_path / "d"), Web(redis_url, DELAYD_WEB_TOKEN=TOKEN) as web:
        client.add_many([{"topic": "order:cancel", "id": f"ord-{i}", "call": "delayd.examples:echo"}
                         for i in range(40)])
        client.add_many([{"topic": "order:notify", "id": f"n-{i}", "call": "delayd.examples:fail"} for i in range(3)])
        client.add("order:notify", "n-77", call="delayd.examples:fail", params={"order": 77, "note": XSS})
        client.add(f"evil{XSS}", "x", call="delayd.examples:echo", delay=3600, params={"html": XSS})
        wait_for(lambda: client.stats()["counts"]["failed"] == 4 and client.stats()["counts"]["ok"] == 40, 30,
                 message="the failures and successes recorded")

        page.goto(web.base + "/")
        assert page.url.startswith(web.base + "/login")
        page.fill("input[name=token]", "wrong")
        page.click("button.primary")
        assert page.locator("[role=alert]").inner_text() == "That token is not right."
        page.fill("input[name=token]", TOKEN)
        page.click("button.primary")
        page.wait_for_url(web.base + "/")
        assert "order:notify" in page.locator("table").first.inner_text()
        screenshot(page, "dashboard-overview.png")

        # Search: failed tasks of a topic by id prefix.
        page.click("a:text('Tasks')")
        page.fill("form.filters input[name=topic]", "order:notify")
        page.select_option("form.filters select[name=status]", "failed")
        page.fill("form.filters input[name=q]", "n-7")
        page.click("form.filters button")
        rows = page.locator("table.tasks tbody tr")
        assert rows.count() == 1 and "n-77" in rows.inner_text()
        rows.locator("a").click()
        page.wait_for_url("**/tasks/order:notify/n-77")
        assert "fail" in page.locator("pre.err").inner_text()
        assert XSS in page.locator("pre.json").inner_text(), "stored HTML is shown as text"
        screenshot(page, "dashboard-task.png")

        # Retry it and see it run again (it fails again: run 2).
        page.click("button:text('Retry now')")
        assert "will run again now" in page.locator(".flash").inner_text()
        wait_for(lambda: client.get("order:notify", "n-77").runs == 2 and
                 client.get("order:notify", "n-77").status == "failed", 30, message="the retried run")
        page.reload()
        assert page.locator("table.fields tr:has(th:text('runs')) td").first.inner_text() == "2"

        # The XSS payload in a topic and in params stays text and never runs.
        page.goto(web.base + "/tasks?topic=" + f"evil{XSS}")
        page.locator("table.tasks a").first.click()
        assert page.locator("h1").inner_text().startswith(f"evil{XSS}")
        assert page.evaluate("window.pwned") is None and page.dialogs == []
        page.goto(web.base + "/")
        assert f"evil{XSS}" in page.locator("table").first.inner_text()
        assert page.evaluate("window.pwned") is None and page.dialogs == []


def test_retry_all_failed_counts_in_the_browser(redis_url, tmp_path, client, page):
    with Daemon(redis_url, tmp_path / "d"), Web(redis_url) as web:
        client.add_many([{"topic": "bulk", "id": i, "call": "delayd.examples:fail"} for i in range(5)])
        wait_for(lambda: client.stats()["counts"]["failed"] == 5, 30, message="5 failed")
        page.goto(web.base + "/")
        row = page.locator("tr:has(a:text-is('bulk'))")
        row.locator("button:text('Pause')").click()
        assert "topic bulk paused" in page.locator(".flash").inner_text() and client.paused() == ["bulk"]
        assert row.locator(".badge").inner_text() == "paused"
        row.locator("button:text('Resume')").click()
        assert client.paused() == [] and row.locator(".badge").count() == 0
        button = page.locator("form[data-repeat] button")
        button.click()
        sync_api.expect(button).to_have_text(re.compile(r"^Retried 5, \d+ failed left$"))
        wait_for(lambda: all(client.get("bulk", i).runs == 2 for i in range(5)), 30, message="all 5 ran again")


def test_schedules_page_runs_a_task_now_and_pauses_its_topic(redis_url, tmp_path, client, page):
    with Daemon(redis_url, tmp_path / "d"), Web(redis_url) as web:
        client.add("report:daily", "sales", call="delayd.examples:echo", cron="0 6 * * 1-5", tz="Europe/Berlin")
        client.add("report:daily", "stock", call="delayd.examples:echo", cron="30 23 * * *", tz="America/New_York")
        client.add("cleanup", "tmp", call="delayd.examples:echo", every=900, delay=300)
        client.add("heartbeat", "ping", call="delayd.examples:echo", every=60, delay=0)
        client.add("sync", "crm", call="delayd.examples:boom", every=1, delay=0)  # fails, and runs on
        client.add("order:cancel", "o-1", call="delayd.examples:echo", delay=600)  # not recurring: not listed
        client.pause("cleanup")
        wait_for(lambda: client.get("heartbeat", "ping").runs == 1 and client.get("sync", "crm").runs >= 2
                 and client.get("sync", "crm").status == "delayed", 30, message="runs of the recurring tasks")
        page.goto(web.base + "/schedules")
        rows = page.locator("table.schedules tbody tr")
        assert rows.count() == 5 and "o-1" not in page.locator("table.schedules").inner_text()
        assert "cron '0 6 * * 1-5' in Europe/Berlin" in rows.nth(2).inner_text()
        assert rows.nth(0).locator(".badge").inner_text() == "paused"
        assert "boom" in rows.nth(4).locator(".err").inner_text()
        screenshot(page, "dashboard-schedules.png")
        page.locator("tr:has(a:text-is('ping'))").locator("button:text('Run now')").click()
        assert "heartbeat:ping is due now" in page.locator(".flash").inner_text()
        wait_for(lambda: client.get("heartbeat", "ping").runs == 2, 30, message="the run now")
        page.locator("tr:has(a:text-is('tmp'))").locator("button:text('Resume topic')").click()
        assert client.paused() == [] and page.locator("table.schedules .badge").count() == 0


def test_hosts_page_shows_the_tasks_waiting_for_each_host(redis_url, client, page):
    """Issue 29's "tasks waiting for it": a column of its own on /hosts, also for a disabled host and one only
    scheduled for later, never sent to."""
    failing, disabled, later = "http://10.0.0.1:80", "https://shop.example:443", "https://later.example:8443"
    health = Health()
    for _ in range(3):
        health.record(failing, False, "connection failed: 10.0.0.1:80: Connection refused", 30.0)
    Transport(client.redis).call(client.store.hosts_call(health.take()))
    client.add_many([{"topic": "notify", "id": i, "url": f"{failing}/hook"} for i in range(12)])
    client.add_many([{"topic": "notify", "id": f"s{i}", "url": f"{disabled}/hook"} for i in range(5000)])
    client.add("remind", 1, url=f"{later}/r", delay=3600)
    client.disable_host(disabled)
    with Web(redis_url) as web:
        page.goto(web.base + "/hosts")
        heads = [th.text_content() for th in page.locator("table.hosts thead th").all()]
        column = heads.index("tasks waiting")
        cells = {row.locator("td").nth(0).locator("span.mono").inner_text(): row.locator("td").nth(column).inner_text()
                 for row in page.locator("table.hosts tbody tr").all()}
        assert cells == {failing: "12", disabled: "5000", later: "1"}
        screenshot(page, "dashboard-hosts.png")


def test_failed_list_retries_and_deletes_per_row_and_in_bulk(redis_url, tmp_path, client, page):
    with Daemon(redis_url, tmp_path / "d"), Web(redis_url) as web:
        client.add_many([{"topic": "bulk", "id": f"b-{i}", "call": "delayd.examples:fail"} for i in range(6)])
        wait_for(lambda: client.stats()["counts"]["failed"] == 6, 30, message="6 failed")
        client.pause("bulk")  # a retried task waits (delayed) instead of failing again under the test
        page.goto(web.base + "/tasks?topic=bulk&status=failed")
        assert page.locator("nav a.on").all_inner_texts() == ["Failed"]
        assert "Most recently failed first." in page.locator("p.reach").inner_text()

        def row(id: str):
            return page.locator(f"table.tasks tr:has(a:text-is('{id}'))")

        row("b-0").locator("button:text('Delete')").click()  # dismissed: nothing happens
        assert page.dialogs[-1].startswith("Delete bulk:b-0? It never runs again")
        assert client.get("bulk", "b-0").status == "failed" and page.locator(".flash").count() == 0
        row("b-1").locator("button:text('Retry')").click()
        assert "bulk:b-1 will run again now" in page.locator(".flash").inner_text()
        assert client.get("bulk", "b-1").status == "delayed" and row("b-1").count() == 0
        page.accept_dialogs = True
        row("b-0").locator("button:text('Delete')").click()
        assert "bulk:b-0 deleted" in page.locator(".flash").inner_text()
        assert client.get("bulk", "b-0").status == "deleted"

        bulk = page.locator(".bulk")
        retry, delete = bulk.locator("button:text('Retry selected')"), bulk.locator("button:text('Delete selected')")
        assert retry.is_disabled() and delete.is_disabled(), "nothing selected yet"
        for id in ("b-2", "b-3"):
            row(id).locator("input.pick").check()
        screenshot(page, "dashboard-failed.png")
        retry.click()
        sync_api.expect(bulk.locator(".bulk-status")).to_have_text("Retried 2 of 2")
        statuses = [client.get("bulk", id).status for id in ("b-2", "b-3", "b-4", "b-5")]
        assert statuses == ["delayed", "delayed", "failed", "failed"]
        assert row("b-2").locator(".st").inner_text() == "retrying" and row("b-2").locator("form").count() == 0
        bulk.locator("input.pick-all").check()  # the rows not acted on yet: b-4 and b-5
        delete.click()
        assert page.dialogs[-1].startswith("Delete the selected tasks?") and page.dialogs[-1].endswith("(2)")
        sync_api.expect(bulk.locator(".bulk-status")).to_have_text("Deleted 2 of 2")
        assert [client.get("bulk", id).status for id in ("b-4", "b-5")] == ["deleted"] * 2
        assert [client.get("bulk", id).status for id in ("b-2", "b-3")] == ["delayed"] * 2
        client.resume("bulk")  # the retried ones run, and fail again
        wait_for(lambda: all(client.get("bulk", id).status == "failed" for id in ("b-1", "b-2", "b-3")), 30,
                 message="the retried tasks failed again")
        page.goto(web.base + "/tasks?topic=bulk")  # every status: no bulk bar; Retry and Delete where they apply
        screenshot(page, "dashboard-tasks.png")
        buttons = page.locator("table.tasks button")
        assert buttons.all_inner_texts() == ["Retry", "Delete"] * 3 and page.locator(".bulk").count() == 0


def test_task_page_asks_before_a_delete_and_shows_an_answer_as_an_answer(redis_url, tmp_path, client, page, http):
    with Daemon(redis_url, tmp_path / "d"), Web(redis_url, TZ="UTC") as web:
        client.add("report:daily", "sales", url=http.base + "/success", cron="0 3 * * mon-fri", tz="Europe/Berlin",
                   params={"region": "eu"})
        client.run_now("report:daily", "sales")
        wait_for(lambda: client.get("report:daily", "sales").runs == 1 and
                 client.get("report:daily", "sales").status == "delayed", 30, message="the run now")
        page.goto(web.base + "/tasks/report:daily/sales")
        due = page.locator("table.fields tr:has(th:text-is('next due')) td").inner_text()
        assert re.fullmatch(r"\d{4}-\d\d-\d\d 03:00:00\.000 CES?T \(0[12]:00:00 UTC\)", due), due
        answer = page.locator("section:has(h2:text('Delivery log')) tbody td").last
        assert answer.inner_text() == "success" and "err" not in answer.get_attribute("class")
        screenshot(page, "dashboard-task-cron.png")
        page.locator(".actions-bar button:text-is('Delete')").click()
        assert page.dialogs[-1].startswith("Delete report:daily:sales? It never runs again")
        assert client.get("report:daily", "sales").status == "delayed", "dismissed: not deleted"
        page.accept_dialogs = True
        page.locator(".actions-bar button:text-is('Delete')").click()
        assert "deleted: it never runs again" in page.locator(".flash").inner_text()
        assert client.get("report:daily", "sales").status == "deleted"


def test_overview_does_not_reload_while_retry_failed_runs(redis_url, tmp_path, client, page):
    with Daemon(redis_url, tmp_path / "d"), Web(redis_url) as web:
        client.add_many([{"topic": "slow", "id": i, "call": "delayd.examples:fail"} for i in range(3)])
        wait_for(lambda: client.stats()["counts"]["failed"] == 3, 30, message="3 failed")
        client.pause("slow")  # the retried tasks wait instead of failing again while counted
        page.clock.install()
        page.goto(web.base + "/")
        page.clock.pause_at(page.evaluate("Date.now()") / 1000 + 0.1)  # (seconds) timers move only when told
        page.evaluate("window.stayed = true")  # gone when the page reloads
        held = []
        page.route("**/api/topics/slow/retry-failed*", lambda route: held.append(route))  # the first answer waits
        with page.expect_request("**/api/topics/slow/retry-failed*"):
            page.locator("tr:has(a:text-is('slow')) button:text('Retry failed')").click()
        page.clock.run_for(20_000)
        assert page.evaluate("window.stayed") is True, "reloaded under a running action"
        assert len(held) == 1
        held[0].continue_()
        sync_api.expect(page.locator("form[data-repeat] button")).to_have_text("Retried 3, 0 failed left")
        with page.expect_navigation():
            page.clock.run_for(5_000)  # the action is over: the refresh runs again
        assert page.evaluate("window.stayed") is None


def test_task_page_shows_its_trace_and_links_it(redis_url, client, page):
    """The trace context of the add (tests/web/test_trace_page.py over HTTP): its id linked to web_trace_url,
    the full traceparent and a tracestate holding HTML, which stays text."""
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    client.add("order:cancel", "traced", call="delayd.examples:echo", delay=600,
               traceparent=f"00-{trace_id}-00f067aa0ba902b7-01", tracestate=f"congo=t61rcWkgMzE,x={XSS}")
    with Web(redis_url, DELAYD_WEB_TRACE_URL="https://jaeger.example/trace/{trace_id}") as web:
        page.goto(web.base + "/tasks/order:cancel/traced")
        card = page.locator("section#trace")
        link = card.locator("a")
        assert link.inner_text() == trace_id and link.get_attribute("href") == f"https://jaeger.example/trace/{trace_id}"
        assert card.locator("tr:has(th:text-is('traceparent')) td").inner_text() == f"00-{trace_id}-00f067aa0ba902b7-01"
        assert card.locator("tr:has(th:text-is('tracestate')) td").inner_text() == f"congo=t61rcWkgMzE,x={XSS}"
        assert page.evaluate("window.pwned") is None and page.dialogs == []
        screenshot(page, "dashboard-task-trace.png")
