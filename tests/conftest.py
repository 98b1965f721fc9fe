"""Shared fixtures: a real redis-server per test session, flushed before every test."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from daemon_helper import Daemon  # noqa: E402

# Fixtures of the helpers, shared by every wing (a real HTTP server, a URL engine, a proxy, Node).
from node_helper import node  # noqa: E402,F401
from redis_server import RedisServer, wait_for  # noqa: E402
from suite_order import DURATIONS, SLOW_FILE, DurationRecorder, longest_first  # noqa: E402
from url_helper import http, make_engine, proxy  # noqa: E402,F401

# Tests must not read the user's or the system's delayd configuration (DELAYD_CHROMIUM is the
# browser tests' own: which chromium they drive).
for _var in [v for v in os.environ if v.startswith("DELAYD_") and v != "DELAYD_CHROMIUM"]:
    del os.environ[_var]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = RedisServer(str(tmp_path_factory.mktemp("redis"))).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server, monkeypatch, tmp_path):
    """A flushed Redis, and DELAYD_* pointing at it and at a private state dir."""
    client = redis_server.client()
    client.flushall()
    client.close()
    monkeypatch.setenv("DELAYD_REDIS_URL", redis_server.url)
    monkeypatch.setenv("DELAYD_STATE_DIR", str(tmp_path / "state"))
    return redis_server.url


@pytest.fixture
def r(redis_server, redis_url):
    client = redis_server.client()
    yield client
    client.close()


@pytest.fixture
def client(redis_url):
    from delayd import Client

    c = Client.from_url(redis_url)
    yield c
    c.close()


__all__ = ["wait_for"]


@pytest.fixture
def daemon_factory(tmp_path):
    """start(redis_url, buckets=3, queues=2, **env): a real daemon, stopped after the test."""
    started = []

    def start(redis_url, buckets=3, queues=2, **env):
        d = Daemon(redis_url, tmp_path / f"d{len(started)}", buckets=buckets, queues=queues, **env).start()
        started.append(d)
        return d
    yield start
    for d in started:
        d.stop()


@pytest.fixture
def daemon(request, redis_url, daemon_factory):
    """One real daemon on the test's Redis, stopped after the test. Its options come from the
    nearest `@pytest.mark.daemon(buckets=2, queues=1, DELAYD_LEASE="3", ...)` (a test's, or a
    module's pytestmark), daemon_factory's defaults otherwise."""
    options = request.node.get_closest_marker("daemon")
    return daemon_factory(redis_url, **(options.kwargs if options else {}))


def pytest_addoption(parser):
    parser.addoption("--record-durations", action="store_true",
                     help=f"write the time of each test file run that took {SLOW_FILE:g} s or more into "
                          "tests/durations.json (the files run and faster are dropped from it, the others kept)")


def pytest_configure(config):
    # xdist's own order of files (most tests first) would undo the longest-first order given below.
    if getattr(config.option, "dist", "no") in ("loadfile", "loadscope") and DURATIONS.exists():
        config.option.loadscopereorder = False
    if config.getoption("record_durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationRecorder(), "delayd-durations")


def pytest_collection_modifyitems(config, items):
    """A test that asks for a daemon is a system test even where its mark was forgotten, so that
    `-m "not system"` stays the fast tier as tests are added. In an xdist worker (whose collection the
    controller hands out in order) the files of tests/durations.json come first, longest first, then the
    others by their number of tests, as xdist would order them."""
    for item in items:
        if {"daemon", "daemon_factory"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.system)
    if hasattr(config, "workerinput") and DURATIONS.exists():
        longest_first(items, json.loads(DURATIONS.read_text()))
