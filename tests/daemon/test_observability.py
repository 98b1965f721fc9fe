"""Operating a real daemon: `stats --json` against a known workload, the Prometheus
endpoint scraped over HTTP, JSON logs, and no Redis password anywhere."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import urllib.error
import urllib.request

import psutil
import pytest
from daemon_helper import DELAYD, Daemon, delayd
from prometheus_client.parser import text_string_to_metric_families
from redis_server import RedisServer, free_port, wait_for
from store_helper import promote_all

from delayd import Client
from delayd.store.connection import redact


def tcp(proc: psutil.Process) -> list:
    """The process's TCP sockets (psutil >= 6 names it net_connections)."""
    return getattr(proc, "net_connections", None)(kind="tcp") if hasattr(proc, "net_connections") else \
        proc.connections(kind="tcp")


def scrape(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        return resp.read().decode()


def samples(text: str) -> dict[str, list]:
    """Metric family name -> its samples, as prometheus_client's parser reads the text."""
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def value(families: dict, sample_name: str, **labels) -> float:
    family = sample_name.removesuffix("_total").removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
    found = [s.value for s in families[family] if s.name == sample_name and all(
        s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (sample_name, labels, found)
    return found[0]


def add_workload(client: Client, r) -> None:
    """A workload whose statistics are known in advance (see test_stats_json_matches_a_known_workload)."""
    now = int(r.time()[0])
    items = [{"topic": "w:ok", "id": i, "call": "delayd.examples:noop"} for i in range(30)]
    items += [{"topic": "w:fail", "id": i, "call": "delayd.examples:fail"} for i in range(5)]
    # run 1 asks for a retry, run 2 (1 s later) succeeds
    items += [{"topic": "w:flaky", "id": i, "call": "delayd.examples:flaky", "intervals": [0, 1],
               "params": {"succeed_on": 2}} for i in range(4)]
    # due 3 s ago: each starts about 3 s late
    items += [{"topic": "w:late", "id": i, "call": "delayd.examples:noop", "at": now - 3} for i in range(3)]
    items += [{"topic": "w:later", "id": i, "call": "delayd.examples:noop", "delay": 3600,
               "priority": 1 + i % 3} for i in range(6)]
    assert client.add_many(items) == 48
    client.delete("w:later", 0)
    client.delete("w:later", 1)


def workload_done(client: Client) -> bool:
    counts = client.stats()["counts"]
    return counts["ok"] == 37 and counts["failed"] == 5 and counts["running"] == 0


@pytest.mark.system
def test_stats_json_matches_a_known_workload(redis_url, r, client, daemon_factory):
    daemon_factory(redis_url)
    add_workload(client, r)
    wait_for(lambda: workload_done(client), 30, interval=0.1, message="workload done")
    stats = json.loads(delayd("stats", "--json").stdout)

    assert stats["counts"] == {"delayed": 4, "running": 0, "ok": 37, "failed": 5, "deleted": 2}
    assert stats["waiting"] == 4 and stats["ready"] == {"3": 0, "2": 0, "1": 0} and stats["quarantined"] == 0
    assert stats["runs_last_minute"] == {"ok": 37, "failed": 5, "retry": 4, "quarantine": 0, "defer": 0,
                                         "started": 46, "lapsed": 0, "limited": 0}
    assert stats["tasks_per_s"] == pytest.approx(46 / stats["window_s"], abs=0.001)
    assert stats["oldest_due_lag"] == 0.0 and stats["oldest_due_at"] is None and stats["oldest_due_exact"]
    assert stats["next_due_at"] > stats["time"] + 3500
    late = stats["lateness"]
    # The 3 tasks due 3 s before the start are the late tail; the rest started on time (how
    # soon is scripts/bench's to measure: here, clearly before the late ones).
    assert late["runs"] == 46 and late["p50"] < 2.5 and 2.5 <= late["p99"] <= 5.0

    topics = stats["topics"]
    assert set(topics) == {"w:ok", "w:fail", "w:flaky", "w:late", "w:later"}
    assert topics["w:ok"]["counts"]["ok"] == 30 and topics["w:ok"]["runs_last_minute"]["started"] == 30
    assert topics["w:ok"]["tasks_per_s"] == pytest.approx(30 / stats["window_s"], abs=0.001)
    assert topics["w:ok"]["lateness"]["p99"] < 2.5
    assert topics["w:fail"]["counts"]["failed"] == 5 and topics["w:fail"]["runs_last_minute"]["failed"] == 5
    flaky = topics["w:flaky"]["runs_last_minute"]
    assert (flaky["ok"], flaky["retry"], flaky["started"]) == (4, 4, 8)
    assert 2.5 <= topics["w:late"]["lateness"]["p50"] <= 5.0 and topics["w:late"]["counts"]["ok"] == 3
    later = topics["w:later"]
    assert later["counts"] == {"delayed": 4, "running": 0, "ok": 0, "failed": 0, "deleted": 2}
    assert later["waiting"] == 4 and later["runs_last_minute"]["started"] == 0
    assert stats["totals"]["w:flaky"]["retry"] == 4 and stats["totals"]["w:late"]["le:5000"] == 3
    assert sum(b["ok"] for b in stats["per_bucket"]) == 37 and len(stats["per_bucket"]) == 3

    text = delayd("stats").stdout
    assert "ok=37" in text and "failed=5" in text and "deleted=2" in text and "retry=4" in text
    assert "w:flaky" in text and "lateness p50=" in text


def test_stats_lag_of_a_backlog(redis_url, r, client):
    """Due tasks nobody runs (no daemon): the lag grows, per topic and overall."""
    now = int(r.time()[0])
    client.add("old", 1, call="delayd.examples:noop", at=now - 30)
    client.add("new", 1, call="delayd.examples:noop", at=now - 2)
    stats = client.stats()
    assert 29 < stats["oldest_due_lag"] < 40 and 29 < stats["topics"]["old"]["oldest_due_lag"] < 40
    assert 1 < stats["topics"]["new"]["oldest_due_lag"] < 10
    store = client.store
    for b in range(store.buckets):  # now ready (promoted) instead of in the delayed set: the same lag
        promote_all(store, b, client.config.retention_ms, 100)
    again = client.stats()
    assert again["ready"]["2"] == 2 and again["waiting"] == 0
    assert 29 < again["topics"]["old"]["oldest_due_lag"] < 40


@pytest.mark.system
def test_metrics_endpoint_serves_prometheus_text(redis_url, r, client, daemon_factory):
    port = free_port()
    d = daemon_factory(redis_url, DELAYD_METRICS_PORT=str(port))
    add_workload(client, r)
    wait_for(lambda: workload_done(client), 30, interval=0.1, message="workload done")
    text = scrape(port)
    families = samples(text)
    assert all(name.startswith("delayd_") for name in families), sorted(families)
    assert all(s.name.startswith("delayd_") for fam in families.values() for s in fam)
    for name in ("delayd_info", "delayd_redis_up", "delayd_tasks", "delayd_tasks_ready", "delayd_tasks_waiting",
                 "delayd_oldest_due_lag_seconds", "delayd_topic_oldest_due_lag_seconds", "delayd_runs",
                 "delayd_runs_started", "delayd_leases_lapsed", "delayd_lateness_seconds", "delayd_children",
                 "delayd_child_up", "delayd_child_restarts", "delayd_tasks_quarantined"):
        assert name in families, name
    assert value(families, "delayd_redis_up") == 1
    assert value(families, "delayd_tasks", topic="w:ok", status="ok") == 30
    assert value(families, "delayd_tasks", topic="w:later", status="delayed") == 4
    assert value(families, "delayd_tasks", topic="w:later", status="deleted") == 2
    assert value(families, "delayd_tasks_ready", topic="w:later", priority="3") == 0
    assert value(families, "delayd_runs_total", topic="w:flaky", outcome="retry") == 4
    assert value(families, "delayd_runs_total", topic="w:fail", outcome="failed") == 5
    assert value(families, "delayd_runs_started_total", topic="w:ok") == 30
    assert value(families, "delayd_lateness_seconds_count", topic="w:late") == 3
    assert value(families, "delayd_lateness_seconds_bucket", topic="w:late", le="2.5") == 0
    assert value(families, "delayd_lateness_seconds_bucket", topic="w:late", le="5.0") == 3
    assert value(families, "delayd_lateness_seconds_bucket", topic="w:ok", le="+Inf") == 30
    assert 8 < value(families, "delayd_lateness_seconds_sum", topic="w:late") < 16
    assert value(families, "delayd_children", kind="queue") == 2
    assert value(families, "delayd_children", kind="bucket") == 3
    assert value(families, "delayd_child_up", child="queue 1") == 1
    assert value(families, "delayd_child_restarts_total", child="queue 0") == 0

    # Signals still reach the master's loop at once with the server thread running:
    # a killed child is restarted within a second or two, not after a heartbeat period.
    d.child("delayd: queue 0").send_signal(signal.SIGKILL)
    wait_for(lambda: value(samples(scrape(port)), "delayd_child_restarts_total", child="queue 0") == 1, 5,
             interval=0.1, message="restart counted")
    wait_for(lambda: len(d.children("queue")) == 2, 5, message="queue 0 back")
    # The children do not hold the listening socket (the master closes it in each one).
    for child in d.children():
        assert not any(c.laddr and c.laddr[1] == port for c in tcp(child)), child
    with pytest.raises(urllib.error.HTTPError) as err:
        scrape(port, "/nope")
    assert err.value.code == 404


@pytest.mark.system
def test_metrics_bind_defaults_to_loopback_and_a_busy_port_fails_the_start(redis_url, tmp_path):
    port = free_port()
    with Daemon(redis_url, tmp_path / "a", DELAYD_METRICS_PORT=str(port)) as d:
        listening = [c for c in tcp(d.master) if c.status == psutil.CONN_LISTEN]
        assert [(c.laddr[0], c.laddr[1]) for c in listening] == [("127.0.0.1", port)]
        second = Daemon(redis_url, tmp_path / "b", DELAYD_METRICS_PORT=str(port))
        proc = delayd("start", env=second.env, check=1)
        assert "metrics" in proc.stderr and str(port) in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr


@pytest.mark.system
def test_metrics_say_when_redis_is_down(tmp_path):
    server = RedisServer(str(tmp_path / "redis")).start()
    port = free_port()
    try:
        with Daemon(server.url, tmp_path / "d", DELAYD_METRICS_PORT=str(port)):
            assert value(samples(scrape(port)), "delayd_redis_up") == 1
            server.kill()
            families = samples(scrape(port))
            assert value(families, "delayd_redis_up") == 0 and "delayd_children" in families
            assert "delayd_tasks" not in families
            server.start()
    finally:
        server.stop()


@pytest.mark.system
def test_json_logs_one_object_per_line_with_task_and_run(redis_url, client, daemon_factory):
    d = daemon_factory(redis_url, DELAYD_LOG_FORMAT="json", DELAYD_LOG_LEVEL="DEBUG")
    client.add("j:ok", 1, call="delayd.examples:echo", params={"card": "4111-1111-1111-1111"})
    client.add("j:boom", 1, call="delayd.examples:boom", intervals=[0], persistent=False)
    wait_for(lambda: client.get("j:boom", 1).status == "failed" and client.get("j:ok", 1).status == "ok", 15)
    wait_for(lambda: '"j:ok:1"' in d.log() and '"j:boom:1"' in d.log(), 5, message="run lines written")
    lines = [json.loads(line) for line in d.log().splitlines()]
    assert lines and all({"event", "ts", "level", "proc"} <= set(line) for line in lines)
    assert {line["proc"] for line in lines} >= {"master", "queue.0"}
    runs = [line for line in lines if line["event"] == "run"]
    assert {(line["task"], line["run"], line["outcome"]) for line in runs} == {("j:ok:1", 1, "ok"),
                                                                               ("j:boom:1", 1, "failed")}
    task_lines = [line for line in lines if "task" in line]
    assert all(isinstance(line["run"], int) for line in task_lines), task_lines
    # params are logged only at DEBUG (here, by the example handler)
    assert any(line.get("params") == {"card": "4111-1111-1111-1111"} for line in task_lines)


@pytest.mark.system
def test_no_params_in_logs_unless_debug(redis_url, client, daemon_factory):
    d = daemon_factory(redis_url, DELAYD_LOG_LEVEL="INFO")
    secret = "4111-2222-3333-4444"
    client.add("p:echo", 1, call="delayd.examples:echo", params={"card": secret})
    client.add("p:boom", 1, call="delayd.examples:boom", params={"card": secret}, persistent=False)
    client.add("p:url", 1, url="http://127.0.0.1:9/never", params={"card": secret}, persistent=False)
    wait_for(lambda: all(client.get(t, 1).status in ("ok", "failed") for t in ("p:echo", "p:boom", "p:url")), 20)
    wait_for(lambda: "p:url:1" in d.log(), 5)
    assert "p:echo:1" in d.log()  # the example handler's line, with task and run but no params
    assert secret not in d.log()


@pytest.fixture(scope="module")
def password_redis(tmp_path_factory):
    server = RedisServer(str(tmp_path_factory.mktemp("pw")), password="pw-Sekr1t-xyz").start()
    yield server
    server.stop()


@pytest.mark.system
def test_no_password_in_ps_logs_status_stats_or_metrics(password_redis, tmp_path):
    secret = password_redis.password
    password_redis.client().flushall()
    port = free_port()
    d = Daemon(password_redis.url, tmp_path / "d", DELAYD_METRICS_PORT=str(port), DELAYD_LOG_LEVEL="DEBUG").start()
    try:
        env = {**d.env}
        delayd("add", "pw", "1", "--call", "delayd.examples:boom", "--once", env=env)
        delayd("add", "pw", "2", "--call", "delayd.examples:noop", env=env)
        c = Client.from_url(password_redis.url)
        wait_for(lambda: c.get("pw", 1).status == "failed" and c.get("pw", 2).status == "ok", 15)
        c.close()
        outputs = [delayd(*args, env=env) for args in (["status"], ["status", "--json"], ["stats"],
                                                       ["stats", "--json"], ["ls"], ["get", "pw", "1", "--json"])]
        assert "delayd: master" in outputs[0].stdout and json.loads(outputs[3].stdout)["counts"]["ok"] == 1
        wrong = delayd("stats", env=env, check=1, DELAYD_REDIS_URL=password_redis.url.replace(secret, "wrong-pw"))
        cmdlines = []
        for proc in [d.master, *d.master.children(recursive=True)]:
            cmdlines.append(" ".join(proc.cmdline()))
        assert len(cmdlines) == 1 + d.buckets + d.queues
        seen = "\n".join([*cmdlines, d.log(), scrape(port), (d.state_dir / "status.json").read_text(),
                          *(p.stdout + p.stderr for p in outputs), wrong.stdout + wrong.stderr])
        assert "redis://:***@127.0.0.1" in seen  # the URL is shown, redacted
        assert secret not in seen
        assert "wrong-pw" not in wrong.stderr and "127.0.0.1" in wrong.stderr
    finally:
        d.stop()
    assert secret not in d.log()  # including what was logged while stopping


@pytest.mark.system
def test_a_password_given_with_redis_flag_is_masked_in_ps(tmp_path):
    """`delayd stats --redis redis://:pw@…` retitles itself at once, so `ps` never shows the password
    while the command runs (here: for as long as a Redis that accepts but never answers keeps it waiting)."""
    secret = "flag-Sekr1t-987"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"redis://:{secret}@127.0.0.1:{listener.getsockname()[1]}/0"
        proc = subprocess.Popen([*DELAYD, "stats", "--redis", url], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, env={**os.environ, "DELAYD_STATE_DIR": str(tmp_path)})
        try:
            listener.settimeout(30)
            conn, _ = listener.accept()  # the command has parsed its flags and is talking to "Redis"
            with conn:
                cmdline = " ".join(psutil.Process(proc.pid).cmdline())
                assert "stats --redis redis://:***@127.0.0.1" in cmdline
                assert secret not in cmdline
        finally:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("url, shown", [
    ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
    ("rediss://user:pw@h/1", "rediss://user:***@h/1"),
    ("redis://user@h/0", "redis://user@h/0"),
    ("redis+cluster://:pw@h1:7000,h2:7001/", "redis+cluster://:***@h1:7000,h2:7001/"),
    ("redis+sentinel://:pw@s1:26379,s2:26379/mymaster/0?sentinel_password=spw",
     "redis+sentinel://:***@s1:26379,s2:26379/mymaster/0?sentinel_password=***"),
    ("unix:///run/redis.sock?db=2&password=pw", "unix:///run/redis.sock?db=2&password=***"),
    (None, "(embedded)"),
])
def test_redact_masks_every_password_form(url, shown):
    assert redact(url) == shown
