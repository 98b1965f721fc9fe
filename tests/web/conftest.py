"""The dashboard's tests: a real `delayd web` with a token (`web`) and a client that sends it (`api`)."""
from __future__ import annotations

import pytest
from web_helper import TOKEN, Web


@pytest.fixture
def web(redis_url):
    with Web(redis_url, DELAYD_WEB_TOKEN=TOKEN) as server:
        yield server


@pytest.fixture
def api(web):
    with web.client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield client
