"""The Grafana dashboard (etc/grafana/delayd.json) queries only what a real daemon's /metrics
exposes: every metric name in a panel's PromQL, and the labels its selectors and `by (...)` name."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis_server import free_port, wait_for
from test_observability import scrape

DASHBOARD = Path(__file__).resolve().parents[2] / "etc" / "grafana" / "delayd.json"
METRIC = re.compile(r"\bdelayd_[a-z_]+")
SELECTOR = re.compile(r"\b(delayd_[a-z_]+)\{([^}]*)\}")
MATCHER = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)")
BY = re.compile(r"\bby\s*\(([^)]*)\)")
SCRAPE_LABELS = {"instance", "job"}  # added by Prometheus to every series it scrapes


def queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel (rows' nested panels too) and every
    query variable."""
    panels = [p for top in dashboard["panels"] for p in (top, *top.get("panels", []))]
    found = [(p["title"], t["expr"]) for p in panels for t in p.get("targets", [])]
    found += [(f"variable {v['name']}", v["definition"]) for v in dashboard["templating"]["list"]
              if v["type"] == "query"]
    return found


def exposed(text: str) -> set[str]:
    """The series names a scrape's families stand for, from their `# TYPE` lines (there even for a
    family with no samples yet): a counter's name (prometheus-client writes it with `_total`), a
    histogram's `_bucket`, `_sum` and `_count`, a gauge's name."""
    names = set()
    for name, kind in re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE):
        if kind == "counter" and not name.endswith("_total"):
            name += "_total"
        suffixes = ("_bucket", "_sum", "_count") if kind == "histogram" else ("",)
        names.update(name + suffix for suffix in suffixes)
    return names


def labels_of(text: str) -> dict[str, set[str]]:
    """Series name -> the label names its samples carry."""
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(sample.labels)
    return found


def unknown_metrics(found: list[tuple[str, str]], names: set[str]) -> dict[str, list[str]]:
    """Metric name -> the panels that query it, for each name the scrape does not expose."""
    missing: dict[str, list[str]] = {}
    for title, expr in found:
        for name in sorted(set(METRIC.findall(expr)) - names):
            missing.setdefault(name, []).append(title)
    return missing


def unknown_labels(found: list[tuple[str, str]], labels: dict[str, set[str]]) -> list[str]:
    """'panel: label' for each label a selector or a `by (...)` names that the series it applies to
    do not carry (a `by` may name any label of the expression's series)."""
    wrong = []
    for title, expr in found:
        for name, matchers in SELECTOR.findall(expr):
            wrong += [f"{title}: {name}{{{key}}}" for key in MATCHER.findall(matchers)
                      if key not in labels.get(name, set()) | SCRAPE_LABELS]
        known = set().union(SCRAPE_LABELS, *(labels.get(name, set()) for name in METRIC.findall(expr)))
        for grouped in BY.findall(expr):
            wrong += [f"{title}: by ({key})" for key in map(str.strip, grouped.split(",")) if key not in known]
    return wrong


@pytest.mark.system
def test_every_metric_and_label_the_dashboard_queries_is_exposed(redis_url, client, daemon_factory):
    port = free_port()
    daemon_factory(redis_url, buckets=1, queues=1, DELAYD_METRICS_PORT=str(port))
    # a run, a disabled host and a failed delivery, so that the labelled series have samples whose labels
    # can be checked
    client.add("grafana", 1, call="delayd.examples:noop")
    client.disable_host("http://shop.example")
    dead = f"http://127.0.0.1:{free_port()}"
    client.add("grafana", 2, url=f"{dead}/notify", persistent=False)
    wait_for(lambda: client.get("grafana", 1).status == "ok" and client.get("grafana", 2).status == "failed", 15,
             message="both runs recorded")
    text = scrape(port)
    # The hosts' health, as `delayd hosts` shows it, one series per host.
    assert f'delayd_host_failures_last_hour{{host="{dead}"}} 1.0' in text
    assert f'delayd_host_failing{{host="{dead}"}} 1.0' in text
    assert re.search(r'^delayd_host_deliveries_last_hour\{host="http://shop.example(:80)?"\} 0.0$', text, re.M)
    dashboard = json.loads(DASHBOARD.read_text())
    found = queries(dashboard)
    assert len(found) > 20

    assert unknown_metrics(found, exposed(text)) == {}
    assert unknown_labels(found, labels_of(text)) == []
    # Every series is read from the chosen job only (one store: the max over its daemons is the store's
    # value), but for the job variable's own list.
    unfiltered = [(title, expr) for title, expr in found if len(METRIC.findall(expr)) != expr.count('{job=~"$job"')]
    assert unfiltered == [("variable job", "label_values(delayd_info, job)")]
    # The checks bite: a counter without its _total, a histogram by its family name, a wrong label.
    wrong = [("A", "rate(delayd_runs[5m])"), ("B", "delayd_lateness_seconds"),
             ("D", 'sum by (host) (delayd_tasks{state="running"})')]
    assert unknown_metrics(wrong, exposed(text)) == {"delayd_runs": ["A"], "delayd_lateness_seconds": ["B"]}
    assert unknown_labels(wrong, labels_of(text)) == ["D: delayd_tasks{state}", "D: by (host)"]

    # Every panel reads the data source chosen at import (the DS_PROMETHEUS input).
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert {p["datasource"]["uid"] for p in panels} == {"${DS_PROMETHEUS}"}
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
