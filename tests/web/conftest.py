"""The dashboard's tests: a real `delayd web` with a token (`web`) and a client that sends it (`api`)."""
from __future__ import annotations

import pytest
from web_helper import REQUESTS_SENT, TOKEN, Web


@pytest.fixture
def web(redis_url):
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN) as server:
        yield server


@pytest.fixture
def api(web):
    with web.client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield client


def pytest_terminal_summary(terminalreporter):
    """How many requests the OpenAPI fuzz run sent (the reports carry it, also from xdist's workers)."""
    counts = [value for reports in terminalreporter.stats.values() for report in reports
              for name, value in getattr(report, "user_properties", ()) if name == REQUESTS_SENT]
    if counts:
        terminalreporter.write_line(f"schemathesis: {sum(counts)} requests in {len(counts)} runs (an operation "
                                    "with one token each)")
