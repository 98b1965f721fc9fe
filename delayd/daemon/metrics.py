"""The Prometheus endpoint: the master serves /metrics on metrics_bind:metrics_port.

The numbers come from the counters that every script keeps in Redis (see
docs/redis-layout.md, "Counters"), so they are already aggregated across every
queue and bucket process of every daemon sharing the store; the master adds what
only it knows (its children, their restarts). Every series is named `delayd_…`.

The server runs in one thread of the master, which forks its children, so:
- the thread blocks the master's signals (they must wake the main loop, which
  sleeps on a queue);
- a child forked while a scrape is under way closes every descriptor it inherited
  (the listening socket, the accepted connection, the Redis connection) at once
  (worker.close_inherited), so the thread takes no lock against forks and a slow
  client or a slow Redis never holds up the master.
"""
from __future__ import annotations

import logging
import signal
import socket
import sys
import threading
import time
from typing import Any, Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app

from delayd.client.hosts import hosts_steps
from delayd.config import Config
from delayd.daemon.current_redis import CurrentRedis
from delayd.log import event
from delayd.model.limit import per_second
from delayd.model.task import STATUSES
from delayd.store import connection
from delayd.store import stats as stats_mod
from delayd.store.connection import REDIS_ERRORS
from delayd.store.keys import PRIORITIES, recorded_buckets
from delayd.store.transitions import Store
from delayd.store.transport import Transport
from delayd.version import __version__
from delayd.workers.process import HANDLED_SIGNALS

log = logging.getLogger("delayd.metrics")

# (kind, name, up, restarts, crash_looping) for each slot the master keeps alive
Slots = Callable[[], Iterable[tuple[str, str, bool, int, bool]]]


# URL hosts given series of their own: the most recently seen (and the disabled ones), then those with the most
# tasks waiting
METRICS_HOSTS = 100


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class Collector:
    """Reads the store's counters at each scrape and turns them into metric families. Every scrape uses
    one client (CurrentRedis: made at the first, again when a reload changes redis_url; its pool
    reconnects after a failed one): a client per scrape left the master's RSS growing at the scrape
    rate, as the registrar's did (tests/daemon/test_registrar.py)."""

    def __init__(self, current: Callable[[], Config], slots: Slots):
        """`current` is the master's config as it is now (it follows reloads)."""
        self.current = current
        self.slots = slots
        self.redis = CurrentRedis(current, socket_connect_timeout=2.0, socket_timeout=5.0)

    def read(self) -> dict[str, Any] | None:
        config = self.current()
        try:
            client = self.redis.get()
            buckets = recorded_buckets(client, config.prefix, config.buckets)
            store = Store(client, config.prefix, buckets)
            stats = stats_mod.collect(client, store)
            stats["host_health"] = Transport(client).run(hosts_steps(store, METRICS_HOSTS))
            return stats
        except REDIS_ERRORS as exc:
            event(log, "metrics_redis_unavailable", logging.WARNING, redis=connection.where(config.redis_url),
                  error=str(exc))
            return None

    def collect(self) -> Iterable[Any]:
        started = time.monotonic()
        info = GaugeMetricFamily("delayd_info", "delayd version (always 1)", labels=["version"])
        info.add_metric([__version__], 1)
        yield info
        yield from self.master_families()
        stats = self.read()
        up = GaugeMetricFamily("delayd_redis_up", "1 if this scrape could read the counters in Redis")
        up.add_metric([], 1 if stats is not None else 0)
        yield up
        if stats is not None:
            yield from self.store_families(stats)
        took = GaugeMetricFamily("delayd_scrape_duration_seconds", "time this scrape took")
        took.add_metric([], time.monotonic() - started)
        yield took

    def master_families(self) -> Iterable[Any]:
        slots = list(self.slots())
        children = GaugeMetricFamily("delayd_children", "child processes up, by kind", labels=["kind"])
        for kind in sorted({s[0] for s in slots}):
            children.add_metric([kind], sum(1 for s in slots if s[0] == kind and s[2]))
        child_up = GaugeMetricFamily("delayd_child_up", "1 if the child of this slot is running", labels=["child"])
        restarts = CounterMetricFamily("delayd_child_restarts", "times the child of this slot was restarted",
                                       labels=["child"])
        looping = GaugeMetricFamily("delayd_child_crash_looping", "1 if this slot's child keeps dying at start",
                                    labels=["child"])
        for _kind, name, is_up, count, crash_looping in slots:
            child_up.add_metric([name], 1 if is_up else 0)
            restarts.add_metric([name], count)
            looping.add_metric([name], 1 if crash_looping else 0)
        yield from (children, child_up, restarts, looping)

    def store_families(self, stats: dict[str, Any]) -> Iterable[Any]:
        topics = stats["topics"]
        buckets = GaugeMetricFamily("delayd_buckets", "buckets of the store")
        buckets.add_metric([], stats["buckets"])
        tasks = GaugeMetricFamily("delayd_tasks", "tasks by topic and status (ok/failed/deleted: within retention)",
                                  labels=["topic", "status"])
        waiting = GaugeMetricFamily("delayd_tasks_waiting", "delayed tasks not due yet (or not yet moved to a "
                                    "ready queue)", labels=["topic"])
        ready = GaugeMetricFamily("delayd_tasks_ready", "tasks due and waiting for a worker, by priority",
                                  labels=["topic", "priority"])
        lag = GaugeMetricFamily("delayd_topic_oldest_due_lag_seconds",
                                "now minus the due time of the topic's oldest task that is due and not started",
                                labels=["topic"])
        paused = GaugeMetricFamily("delayd_topic_paused", "1 while the topic is paused (delayd pause)",
                                   labels=["topic"])
        parked = GaugeMetricFamily("delayd_tasks_parked", "due tasks of a paused topic, waiting for its resume",
                                   labels=["topic"])
        throttled = GaugeMetricFamily("delayd_tasks_throttled", "due tasks held back by their topic's limit "
                                      "(delayd limit)", labels=["topic"])
        for topic, t in topics.items():
            paused.add_metric([topic], 1 if t["paused"] else 0)
            parked.add_metric([topic], t["parked"])
            throttled.add_metric([topic], t["throttled"])
            for status in STATUSES:
                tasks.add_metric([topic, status], t["counts"][status])
            waiting.add_metric([topic], t["waiting"])
            for p in PRIORITIES:
                ready.add_metric([topic, str(p)], t["ready"][str(p)])
            lag.add_metric([topic], t["oldest_due_lag"])
        overall_lag = GaugeMetricFamily("delayd_oldest_due_lag_seconds",
                                        "now minus the due time of the oldest task that is due and not started")
        overall_lag.add_metric([], stats["oldest_due_lag"])
        quarantined = GaugeMetricFamily("delayd_tasks_quarantined", "records set aside as corrupt")
        quarantined.add_metric([], stats["quarantined"])
        yield from (buckets, tasks, waiting, ready, overall_lag, lag, quarantined, paused, parked, throttled)
        yield from limit_families(stats)
        yield from host_families(stats)

        limited = CounterMetricFamily("delayd_runs_limited", "runs held back by their topic's limit before they "
                                      "started", labels=["topic"])
        limited_wait = CounterMetricFamily("delayd_limit_wait_seconds", "time runs were held back by their topic's "
                                           "limit (apart from the lateness, which is the daemon's own)",
                                           labels=["topic"])
        runs = CounterMetricFamily("delayd_runs", "runs whose outcome was recorded (defer: not sent, the URL's "
                                   "circuit was open; no run counted)", labels=["topic", "outcome"])
        starts = CounterMetricFamily("delayd_runs_started", "runs handed to a worker", labels=["topic"])
        lapsed = CounterMetricFamily("delayd_leases_lapsed", "runs whose lease lapsed (worker died or hung); "
                                     "the task runs again", labels=["topic"])
        lateness = HistogramMetricFamily("delayd_lateness_seconds", "start time minus due time of each run, by "
                                         "Redis's clock", labels=["topic"])
        for topic, events in stats["totals"].items():
            for outcome in stats_mod.SHOWN:
                runs.add_metric([topic, outcome], events[outcome])
            starts.add_metric([topic], events["started"])
            lapsed.add_metric([topic], events["lapsed"])
            limited.add_metric([topic], events["limited"])
            limited_wait.add_metric([topic], events["limited_ms"] / 1000)
            lateness.add_metric([topic], [(_le(b), n) for b, n in stats_mod.histogram(events)],
                                sum_value=events["lateness_ms"] / 1000)
        yield from (runs, starts, lapsed, lateness, limited, limited_wait)


def host_families(stats: dict[str, Any]) -> Iterable[Any]:
    """The URL hosts disabled now, how many times hosts were disabled and enabled, and each host's health
    as `delayd hosts` shows it (METRICS_HOSTS of them: a bounded set of labels)."""
    sent = GaugeMetricFamily("delayd_host_deliveries_last_hour", "URL requests sent to the host in the last hour",
                             labels=["host"])
    failed = GaugeMetricFamily("delayd_host_failures_last_hour", "URL requests to the host that failed in the "
                               "last hour (an error, a timeout, a non-2xx answer)", labels=["host"])
    failing = GaugeMetricFamily("delayd_host_failing", "1 while the host's last delivery failed (failing since "
                                "its first failure after a success)", labels=["host"])
    breaker = GaugeMetricFamily("delayd_host_breaker_open", "1 while the host's circuit is open (nothing is sent "
                                "to it until the probe)", labels=["host"])
    waiting = GaugeMetricFamily("delayd_host_tasks_waiting", "URL tasks of the host still to be delivered (delayed, "
                                "ready, running, parked, held by a limit, set aside while it is disabled)",
                                labels=["host"])
    for h in stats.get("host_health", []):
        sent.add_metric([h.host], h.deliveries)
        failed.add_metric([h.host], h.failures)
        failing.add_metric([h.host], 1 if h.failing_since is not None else 0)
        breaker.add_metric([h.host], 1 if h.breaker == "open" else 0)
        waiting.add_metric([h.host], h.tasks_waiting)
    yield from (sent, failed, failing, breaker, waiting)
    hosts = stats.get("hosts", {})
    disabled = GaugeMetricFamily("delayd_host_disabled", "1 while the URL host is disabled (delayd hosts disable): "
                                 "its due tasks are set aside", labels=["host"])
    for host in hosts.get("disabled", []):
        disabled.add_metric([host], 1)
    switches = CounterMetricFamily("delayd_host_switches", "times a URL host was disabled or enabled",
                                   labels=["event"])
    for name, times in hosts.get("events", {}).items():
        switches.add_metric([name], times)
    yield from (disabled, switches)


def limit_families(stats: dict[str, Any]) -> Iterable[Any]:
    """The limits set (delayd limit): starts per second and runs in flight allowed, per topic."""
    rate = GaugeMetricFamily("delayd_limit_rate_per_second", "starts per second a topic's rate limit allows",
                             labels=["topic"])
    concurrency = GaugeMetricFamily("delayd_limit_concurrency", "runs in flight a topic's limit allows",
                                    labels=["topic"])
    for topic, limit in stats.get("limits", {}).items():
        if limit["rate"]:
            rate.add_metric([topic], per_second(limit["rate"]))
        if limit["concurrency"]:
            concurrency.add_metric([topic], limit["concurrency"])
    yield from (rate, concurrency)


def _at_metrics(app: Callable[..., Any]) -> Callable[..., Any]:
    """prometheus_client's app at /metrics only: / says where, any other path is 404."""
    def routed(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return app(environ, start_response)
        status, body = ("200 OK", b"delayd: metrics at /metrics\n") if path == "/" else \
            ("404 Not Found", b"not found; try /metrics\n")
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
        return [body]
    return routed


class _QuietHandler(WSGIRequestHandler):
    """No line on stderr per scrape; a client that says nothing is dropped after a few seconds."""

    timeout = 5.0

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


class _Server(ThreadingWSGIServer):
    """prometheus_client's threaded WSGI server (a thread per scrape, so a slow client holds up no
    other); its errors go to the log, not stderr."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        event(log, "metrics_error", logging.WARNING, client=str(client_address), error=repr(sys.exc_info()[1]))


class MetricsServer:
    """/metrics: prometheus_client's WSGI app (content negotiation, OpenMetrics, gzip) on its threaded
    server, accepting in one thread of the master (see the module docstring)."""

    def __init__(self, current: Callable[[], Config], slots: Slots):
        """`current` is the master's config as it is now: the port and address are the start's, the
        Redis read at each scrape follows reloads."""
        config = current()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(Collector(current, slots))
        family = socket.AF_INET6 if ":" in config.metrics_bind else socket.AF_INET
        server_class = type("Server", (_Server,), {"address_family": family})
        self.server = make_server(config.metrics_bind, config.metrics_port, _at_metrics(make_wsgi_app(registry)),
                                  server_class, _QuietHandler)  # OSError: in use
        self.address = self.server.server_address[:2]
        self.closed = False
        self.thread = threading.Thread(target=self.serve, daemon=True, name="metrics")

    def start(self) -> "MetricsServer":
        # The thread starts with the master's signals blocked (a thread inherits the mask of its
        # creator, and so do the scrapes' threads), so the kernel delivers them to the main thread.
        old = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED_SIGNALS)
        try:
            self.thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return self

    def serve(self) -> None:
        """Accept scrapes until close(): handle_request() blocks (no timeout, so no polling) until a
        client connects or close() shuts the socket down."""
        while not self.closed:
            self.server.handle_request()

    def close(self) -> None:
        self.closed = True
        try:
            self.server.socket.shutdown(socket.SHUT_RDWR)  # wakes handle_request
        except OSError:
            pass
        self.server.server_close()
