"""The `delayd` command's task verbs, run as a real process against a real Redis."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_helper import DELAYD, delayd, one_line_error
from redis_server import free_port
from store_helper import claim_due, promote_all

from delayd import Client
from delayd.cli import build_parser
from delayd.store.keys import bucket_of

pytestmark = pytest.mark.system

SECTION_2_FIELDS = {"topic", "id", "call", "url", "params", "intervals", "persistent", "priority", "callback",
                    "status", "created_at", "due_at", "last_run_at", "runs", "last_error"}
TASK_VERBS = ("add", "get", "del", "retry", "ls", "stats")


def delayd_many(cases: list[list[str]], env: dict | None = None) -> list[subprocess.CompletedProcess]:
    """Run several independent invocations at once (each is a fresh interpreter)."""
    full_env = {**os.environ, **(env or {})}
    procs = [subprocess.Popen([*DELAYD, *args], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=full_env) for args in cases]
    done = []
    for args, proc in zip(cases, procs):
        out, err = proc.communicate(timeout=60)
        done.append(subprocess.CompletedProcess(args, proc.returncode, out, err))
    return done


# -- add / get ---------------------------------------------------------------------
def test_add_then_get_json(redis_url):
    proc = delayd("add", "order:cancel", "42", "--call", "shop.tasks:cancel_order", "--delay", "1800",
                  "--params", '{"order": 42}', "--priority", "3", "--intervals", "0,30,60", "--once",
                  "--callback", "shop.tasks:done")
    assert proc.stdout.startswith("added order:cancel:42 due ")
    task = json.loads(delayd("get", "order:cancel", "42", "--json").stdout)
    assert SECTION_2_FIELDS <= set(task)
    assert task["topic"] == "order:cancel" and task["id"] == "42" and task["call"] == "shop.tasks:cancel_order"
    assert task["params"] == {"order": 42} and task["priority"] == 3 and task["intervals"] == [0, 30, 60]
    assert task["persistent"] is False and task["callback"] == "shop.tasks:done" and task["status"] == "delayed"
    assert task["runs"] == 0 and task["last_run_at"] is None and task["last_error"] is None
    assert isinstance(task["created_at"], float) and isinstance(task["due_at"], float)
    assert task["due_at"] - task["created_at"] == pytest.approx(1800, abs=0.002)


def test_add_takes_the_trace_context_from_traceparent_or_the_environment(redis_url):
    """--traceparent, else $TRACEPARENT (with $TRACESTATE): the context a calling process hands down; a bad
    one exits 1 with the clients' message and writes nothing."""
    given, inherited = ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    delayd("add", "t", "1", "--call", "a:b", "--traceparent", given, TRACEPARENT=inherited)
    delayd("add", "t", "2", "--call", "a:b", TRACEPARENT=inherited, TRACESTATE="congo=t61rcWkgMzE")
    delayd("add", "t", "3", "--call", "a:b", TRACEPARENT="")
    client = Client.from_url(redis_url)
    assert [client.get("t", i).trace for i in (1, 2, 3)] == [given, f"{inherited} congo=t61rcWkgMzE", None]
    assert json.loads(delayd("get", "t", "2", "--json").stdout)["traceparent"] == inherited
    error = one_line_error(delayd("add", "t", "4", "--call", "a:b", check=1, TRACEPARENT=inherited.upper()))
    assert error.startswith("delayd: error: traceparent must be W3C's 00-<32 hex>-<16 hex>-<2 hex>")
    assert client.get("t", 4) is None


def test_add_url_and_push_and_at(redis_url):
    delayd("add", "order:notify", "5", "--url", "http://merchant.example/notify", "--method", "post",
           "--body", "json", "--timeout", "2.5", "--at", "2033-05-18T03:33:20Z")
    task = json.loads(delayd("get", "order:notify", "5", "--json").stdout)
    assert (task["url"], task["method"], task["body"], task["timeout"]) == (
        "http://merchant.example/notify", "POST", "json", 2.5)
    assert task["due_at"] == 2_000_000_000.0
    delayd("add", "t", "p", "--push", "my:list", "--at", "2000000000")
    assert json.loads(delayd("get", "t", "p", "--json").stdout)["push"] == "my:list"


def test_add_json_output(redis_url):
    out = json.loads(delayd("add", "t", "1", "--call", "a:b", "--json").stdout)
    assert out["result"] == "added" and out["task"]["key"] == "t:1"


def test_get_text(redis_url):
    delayd("add", "t", "1", "--call", "a:b", "--params", '{"x": 1}')
    out = delayd("get", "t", "1").stdout
    assert "status" in out and "delayed" in out and "a:b" in out and '{"x": 1}' in out


def test_get_text_shows_method_and_body_of_url_tasks_only(redis_url):
    delayd("add", "t", "call", "--call", "a:b")
    delayd("add", "t", "url", "--url", "http://h/n", "--method", "POST", "--body", "json")
    names = {key: {line.split()[0] for line in delayd("get", "t", key).stdout.splitlines()} for key in ("call", "url")}
    assert not {"method", "body"} & names["call"] and {"method", "body"} <= names["url"]
    assert {"method", "body"} <= json.loads(delayd("get", "t", "call", "--json").stdout).keys()


def test_get_missing_exits_1(redis_url):
    proc = delayd("get", "nope", "1", check=1)
    assert "not found" in one_line_error(proc) and proc.stdout == ""
    assert "not found" in one_line_error(delayd("get", "nope", "1", "--json", check=1))


def test_a_name_that_is_not_utf8_is_shown_as_xNN(redis_url):
    for verb in ("get", "del", "retry", "run"):
        proc = delayd(verb, "c", "\udcfe", check=1)  # argv byte 0xfe
        assert one_line_error(proc) == "delayd: error: not found: c:\\xfe", verb


def test_nx_exits_0_both_ways(redis_url):
    first = delayd("add", "t", "1", "--call", "a:b", "--nx", "--params", '{"v": 1}')
    second = delayd("add", "t", "1", "--call", "a:b", "--nx", "--params", '{"v": 2}')
    assert first.stdout.startswith("added") and second.stdout.startswith("exists")
    assert json.loads(delayd("get", "t", "1", "--json").stdout)["params"] == {"v": 1}
    out = json.loads(delayd("add", "t", "1", "--call", "a:b", "--nx", "--json").stdout)
    assert out["result"] == "exists"


# -- ls / stats --------------------------------------------------------------------
def test_ls(redis_url):
    for i in range(3):
        delayd("add", "a", str(i), "--call", "x:y", "--delay", "60")
    delayd("add", "b", "1", "--url", "http://h/", "--delay", "60")
    delayd("del", "a", "2")
    lines = delayd("ls").stdout.splitlines()
    assert lines[0].split()[:3] == ["KEY", "STATUS", "RUNS"] and len(lines) == 5
    assert any(line.startswith("b:1 ") and "url:http://h/" in line for line in lines)
    rows = [json.loads(line) for line in delayd("ls", "--json").stdout.splitlines()]
    assert sorted(row["key"] for row in rows) == ["a:0", "a:1", "a:2", "b:1"]
    assert all(SECTION_2_FIELDS <= set(row) for row in rows)
    listed = delayd("ls", "--json", "--topic", "a", "--status", "delayed").stdout
    rows = [json.loads(line) for line in listed.splitlines()]
    assert sorted(row["key"] for row in rows) == ["a:0", "a:1"]
    assert len(delayd("ls", "--json", "--limit", "2").stdout.splitlines()) == 2
    assert len(delayd("ls", "--json", "--limit", "2", "--offset", "3").stdout.splitlines()) == 1
    assert delayd("ls", "--json", "--status", "failed").stdout == ""


def test_ls_says_on_stderr_how_many_more_and_how_to_page(redis_url, client):
    """`ls` stopped at 100 rows without a word (1,013 tasks stored)."""
    client.add_many([{"topic": "a", "id": i, "push": "out", "delay": 600} for i in range(250)]
                    + [{"topic": "b", "id": i, "push": "out", "delay": 600} for i in range(10)])
    text, json_page, every = delayd_many([["ls"], ["ls", "--json"], ["ls", "--json", "--all"]])
    more = ("delayd: 100 tasks shown, 160 more: --offset 100 for the next page, --limit N for more at once, "
            "--all for every one\n")
    assert len(text.stdout.splitlines()) == 101 and text.stderr == more
    assert len(json_page.stdout.splitlines()) == 100 and json_page.stderr == more
    keys = [json.loads(line)["key"] for line in every.stdout.splitlines()]
    assert sorted(keys) == sorted([f"a:{i}" for i in range(250)] + [f"b:{i}" for i in range(10)]) and every.stderr == ""
    pages = delayd_many([["ls", "--json", "--topic", "a", "--offset", str(n)] for n in (0, 100, 200)])
    assert [p.stderr.split(",")[1] if p.stderr else "" for p in pages] == [
        " 150 more: --offset 100 for the next page", " 50 more: --offset 200 for the next page", ""]
    paged = [json.loads(line)["key"] for p in pages for line in p.stdout.splitlines()]
    assert sorted(paged) == sorted(f"a:{i}" for i in range(250))  # each once
    last = delayd("ls", "--topic", "b", "--limit", "10")
    assert len(last.stdout.splitlines()) == 11 and last.stderr == ""
    assert delayd("ls", "--json", "--limit", "9", "--topic", "b").stderr.startswith("delayd: 9 tasks shown, 1 more: ")


def test_ls_order_is_bucket_then_key_and_pages_hold_while_tasks_change_state(redis_url, client):
    """`ls` listed each bucket index by index (ready, delayed by due time, running, finished), an order
    neither of due time nor of key: a task that started or finished between two `--offset` pages moved
    to another index, and was listed twice or not at all. Now: bucket by bucket, by key within a bucket,
    whatever a task's state (docs/guides/running.md, Operations)."""
    client.add_many([{"topic": "o", "id": i, "push": "out", "delay": 0 if i % 3 else 600} for i in range(60)])
    store = client.store
    for bucket in range(store.buckets):
        promote_all(store, bucket)  # two thirds ready, the rest delayed
    keys = [f"o:{i}" for i in range(60)]
    expected = sorted(keys, key=lambda key: (bucket_of(key, store.buckets), key))
    listed = [json.loads(line)["key"] for line in delayd("ls", "--json", "--all").stdout.splitlines()]
    assert listed == expected
    first = [json.loads(line)["key"] for line in delayd("ls", "--json", "--limit", "30").stdout.splitlines()]
    for i in range(0, 60, 2):  # between the pages, half the tasks change state
        if i % 3:
            client.delete("o", i)
        else:
            client.run_now("o", i)
    second = [json.loads(line)["key"] for line in delayd("ls", "--json", "--offset", "30", "--all").stdout.splitlines()]
    assert first + second == expected


def test_stats(redis_url):
    delayd("add", "t", "1", "--call", "x:y", "--at", "2000000000")
    delayd("add", "t", "2", "--call", "x:y", "--delay", "60")
    delayd("del", "t", "2")
    stats = json.loads(delayd("stats", "--json").stdout)
    assert stats["counts"] == {"delayed": 1, "running": 0, "ok": 0, "failed": 0, "deleted": 1}
    assert stats["next_due_at"] == 2_000_000_000.0 and stats["oldest_due_at"] is None
    assert set(stats["ready"]) == {"1", "2", "3"}
    text = delayd("stats").stdout
    assert "delayed=1" in text and "deleted=1" in text and "bucket 0" in text


def test_every_time_says_its_zone(redis_url):
    """add, get, ls and stats name the zone of each time; a cron task's times are in its zone first,
    with the local time beside them (issue 25: 'due 2026-12-07 02:00:00.000' beside 'in Europe/Berlin')."""
    utc = {"TZ": "UTC"}
    cron_due = r"\d{4}-\d\d-\d\d 03:00:00\.000 CES?T \(0[12]:00:00 UTC\)"
    added = delayd("add", "report", "daily", "--call", "x:y", "--cron", "0 3 * * mon-fri", "--tz", "Europe/Berlin",
                   **utc).stdout
    assert re.fullmatch(r"added report:daily due " + cron_due + "\n", added), added
    got = delayd("get", "report", "daily", **utc).stdout
    assert re.search(r"\ndue_at +" + cron_due + r", unix \d+\.000\n", got), got
    # (The local time beside it carries its date too when that differs: 23:00-24:00 UTC.)
    assert re.search(r"\ncreated_at +\S+ \S+ CES?T \((\S+ )?\S+ UTC\), unix ", got), got
    delayd("add", "t", "1", "--call", "x:y", "--at", "2033-05-18T03:33:20Z", **utc)
    assert "due_at       2033-05-18 03:33:20.000 UTC, unix 2000000000.000" in delayd("get", "t", "1", **utc).stdout
    berlin = delayd("get", "t", "1", TZ="Europe/Berlin").stdout
    assert "due_at       2033-05-18 05:33:20.000 CEST, unix 2000000000.000" in berlin, "local time, named"
    listed = delayd("ls", **utc).stdout
    assert re.search(r"report:daily +delayed +0 \d{4}-\d\d-\d\d 03:00:00\.000 CES?T ", listed), listed
    assert re.search(r"t:1 +delayed +0 2033-05-18 03:33:20\.000 UTC ", listed), listed
    header, *rows = listed.splitlines()
    assert {row.index("call:x:y") for row in rows} == {header.index("TARGET")}, "the columns stay aligned"
    stats = delayd("stats", **utc).stdout
    assert re.search(r"next \d{4}-\S+ 0[12]:00:00\.000 UTC\n", stats) and re.search(r"next=\S+ \S+ UTC\n", stats)


def test_stats_counts_parked_tasks_in_words(redis_url, client):
    client.add("mail", 1, push="out")
    client.pause("mail")
    for bucket in range(client.store.buckets):
        promote_all(client.store, bucket)  # the due task is parked, not made ready
    assert "paused   mail (1 due task waiting for resume)" in delayd("stats").stdout


# -- del / retry -------------------------------------------------------------------
def test_del_soft_then_hard(redis_url, r):
    delayd("add", "t", "1", "--call", "x:y", "--delay", "60")
    assert delayd("del", "t", "1").stdout.strip() == "deleted t:1"
    assert json.loads(delayd("get", "t", "1", "--json").stdout)["status"] == "deleted"
    assert json.loads(delayd("del", "t", "1", "--hard", "--json").stdout) == {"result": "deleted", "hard": True,
                                                                              "claimed": False}
    delayd("get", "t", "1", check=1)
    assert [k for k in r.keys("*") if ":t:" in k] == []
    assert "not found" in one_line_error(delayd("del", "t", "1", check=1))


@pytest.mark.parametrize("json_", [False, True], ids=["text", "json"])
def test_del_of_a_claimed_task_says_too_late_and_exits_3(redis_url, json_):
    """SPEC section 10: deleted, but a run was already claimed (a daemon's claim, here the script's own):
    exit 3, not 0, so a script can tell "cancelled in time" from "too late"."""
    client = Client.from_url(redis_url)
    client.add("t", 1, call="x:y")
    claim_due(client.store, "t:1")
    proc = delayd("del", "t", "1", *(["--json"] if json_ else []), check=3)
    if json_:
        assert json.loads(proc.stdout) == {"result": "deleted", "hard": False, "claimed": True}
    else:
        assert proc.stdout == "deleted t:1, too late: a run had already been claimed and may be starting or running\n"
    assert proc.stderr == "" and client.get("t", 1).status == "deleted"
    assert delayd("del", "t", "1").stdout == "deleted t:1\n"  # deleted already: no run claimed now
    client.close()


def test_retry(redis_url):
    delayd("add", "t", "1", "--call", "x:y")
    assert "not failed" in one_line_error(delayd("retry", "t", "1", check=1))
    assert "not found" in one_line_error(delayd("retry", "nope", "1", check=1))
    client = Client.from_url(redis_url)  # fail it as a queue process would
    store = client.store
    bucket = store.keys_for("t:1").bucket
    promote_all(store, bucket, 60_000, 100)
    [run] = store.claim(bucket, (5, 3, 2), 10, 60_000, 60_000).tasks
    store.finish(bucket, [("t:1", run.claim, "failed", 0, "said fail")], 60_000)
    assert json.loads(delayd("get", "t", "1", "--json").stdout)["status"] == "failed"
    assert delayd("retry", "t", "1").stdout.strip() == "retrying t:1 now"
    task = json.loads(delayd("get", "t", "1", "--json").stdout)
    assert task["status"] == "delayed" and task["runs"] == 1


# -- exit codes --------------------------------------------------------------------
USAGE_ERRORS = [
    ["add", "t", "1", "--call", "a:b", "--bogus"],
    ["add", "t"],
    ["add", "t", "1"],                                     # no target
    ["add", "t", "1", "--call", "a:b", "--url", "http://h/"],
    ["add", "t", "1", "--call", "a:b", "--priority", "5"],
    ["add", "t", "1", "--call", "a:b", "--priority", "high"],
    ["add", "t", "1", "--call", "a:b", "--delay", "soon"],
    ["add", "t", "1", "--call", "a:b", "--method", "PUT"],
    ["get", "t"],
    ["ls", "--limit", "0"],
    ["ls", "--offset", "-1"],
    ["ls", "--all", "--limit", "5"],
    ["ls", "--status", "weird"],
    ["frobnicate"],
    [],
]


def test_usage_errors_exit_2(redis_url, r):
    for proc in delayd_many(USAGE_ERRORS):
        assert proc.returncode == 2, (proc.args, proc.returncode, proc.stderr)
        assert "usage:" in proc.stderr and "Traceback" not in proc.stderr, proc.args
    assert r.dbsize() == 0


INVALID_TASKS = [
    (["--call", "notatarget"], "call"),
    (["--call", "os.system"], "call"),
    (["--call", "a:b", "--params", "{bad json"], "--params"),
    (["--call", "a:b", "--params", "[1, 2]"], "params"),
    (["--call", "a:b", "--intervals", "0,x,60"], "interval"),
    (["--call", "a:b", "--intervals", "0,-5"], "interval"),
    (["--call", "a:b", "--intervals", "nan"], "interval"),
    (["--url", "ftp://h/x"], "url"),
    (["--url", "http://h/a b"], "url must not contain spaces"),
    (["--call", "a:b", "--at", "next tuesday"], "at"),
    (["--call", "a:b", "--timeout", "0"], "timeout"),
    (["--call", "a:b", "--callback", "nope"], "callback"),
    (["--push", "has space"], "push"),
    (["--call", "a:b", "--params", '{"x": "\udcff"}'], "params are not valid UTF-8"),  # argv byte 0xff
    (["--call", "a:b", "--params", '{"a":' + "[" * 64 + "]" * 64 + "}"], "params are nested more than 64 levels"),
]


def test_invalid_task_exits_1_and_writes_nothing(redis_url, r):
    procs = delayd_many([["add", "t", "1", *args] for args, _ in INVALID_TASKS])
    for (args, says), proc in zip(INVALID_TASKS, procs):
        assert proc.returncode == 1, (args, proc.returncode, proc.stderr)
        line = one_line_error(proc)
        assert line.startswith("delayd: error:") and says in line, (args, line)
        assert proc.stdout == "", args
    assert r.dbsize() == 0


def test_invalid_id_exits_1(redis_url, r):
    assert "':'" in one_line_error(delayd("add", "t", "a:b", "--call", "a:b", check=1))
    assert r.dbsize() == 0


def test_allowlist_refusal_exits_1(redis_url, r):
    proc = delayd("add", "t", "1", "--call", "evil.x:f", DELAYD_ALLOWED_MODULES="shop", check=1)
    assert "allowed" in one_line_error(proc)
    assert r.dbsize() == 0
    delayd("add", "t", "1", "--call", "shop.x:f", DELAYD_ALLOWED_MODULES="shop")


def test_redis_down_exits_1_with_one_line():
    port = free_port()  # nothing listens there
    cases = [["add", "t", "1", "--call", "a:b", "--nx"], ["get", "t", "1", "--json"], ["del", "t", "1", "--hard"],
             ["retry", "t", "1"], ["ls"], ["stats", "--json"]]
    for proc in delayd_many(cases, env={"DELAYD_REDIS_URL": f"redis://:pa55word-x@127.0.0.1:{port}/0"}):
        assert proc.returncode == 1, (proc.args, proc.returncode, proc.stderr)
        line = one_line_error(proc)
        assert f"127.0.0.1:{port}" in line, line
        assert "pa55word" not in proc.stderr + proc.stdout
        assert proc.stdout == ""


def test_a_server_that_is_not_redis_exits_1_with_one_line(http, tmp_path):
    """`--redis` at an HTTP server: add and stats printed a 96-line traceback (redis-py's InvalidResponse)."""
    where = f"127.0.0.1:{http.server_address[1]}"
    cases = [["add", "t", "1", "--call", "a:b"], ["get", "t", "1"], ["del", "t", "1"], ["ls"], ["stats"],
             ["status", "--cluster"], ["limits"], ["hosts"]]
    for proc in delayd_many(cases, env={"DELAYD_REDIS_URL": f"redis://{where}/0"}):
        assert proc.returncode == 1, (proc.args, proc.returncode, proc.stderr)
        assert one_line_error(proc).startswith(f"delayd: error: the server at {where} did not answer as Redis: ")
    proc = delayd("start", "--redis", f"redis://{where}/0", check=1, DELAYD_STATE_DIR=str(tmp_path))
    assert proc.stderr.strip().startswith(f"delayd: error: the server at {where} did not answer as Redis: ")


def test_redis_flag_overrides_environment(redis_url, r):
    port = free_port()
    delayd("add", "t", "1", "--call", "a:b", "--redis", redis_url, DELAYD_REDIS_URL=f"redis://127.0.0.1:{port}/0")
    assert r.exists("delayd:meta")
    delayd("add", "t", "1", "--call", "a:b", "--prefix", "other:")
    assert r.exists("other:meta")


def test_bad_config_file_exits_1(redis_url, tmp_path):
    config = tmp_path / "delayd.toml"
    config.write_text("buckets = 'many'\n")
    line = one_line_error(delayd("ls", "-c", str(config), check=1))
    assert "buckets" in line


# -- help --------------------------------------------------------------------------
def every_verb() -> list[str]:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(set(sub.choices) | set(TASK_VERBS))


def test_help_on_every_verb():
    verbs = every_verb()
    for verb, proc in zip(verbs, delayd_many([[verb, "--help"] for verb in verbs])):
        assert proc.returncode == 0, (verb, proc.stderr)
        assert proc.stdout.startswith(f"usage: delayd {verb}"), (verb, proc.stdout)


def test_console_script_entry_point(redis_url):
    script = Path(sys.executable).parent / "delayd"
    if not script.exists():
        pytest.skip("no delayd console script next to this Python")
    proc = subprocess.run([str(script), "add", "t", "1", "--call", "a:b"], capture_output=True, text=True,
                          timeout=30, env=os.environ.copy())
    assert proc.returncode == 0 and proc.stdout.startswith("added t:1")


# -- add --from FILE.jsonl, progress -------------------------------------------------
def write_jsonl(path: Path, items: list) -> Path:
    path.write_text("".join((item if isinstance(item, str) else json.dumps(item)) + "\n" for item in items))
    return path


def with_tty_stderr(args: list[str]) -> tuple[int, str, str]:
    """Run delayd with stderr on a pseudo-terminal: (exit code, stdout, what the terminal got)."""
    import pty
    import select
    import tempfile

    main, sub = pty.openpty()
    stdout = tempfile.TemporaryFile()  # not a pipe: a long listing must not block on it while we read the pty
    proc = subprocess.Popen([*DELAYD, *args], stdout=stdout, stderr=sub,
                            stdin=subprocess.DEVNULL, env=os.environ.copy())
    os.close(sub)
    seen = b""
    while True:
        ready, _, _ = select.select([main], [], [], 30)
        if not ready:
            break
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the process closed its end
            break
        if not chunk:
            break
        seen += chunk
    code = proc.wait(30)
    os.close(main)
    stdout.seek(0)
    out = stdout.read().decode()
    stdout.close()
    return code, out, seen.decode(errors="replace")


def test_add_from_jsonl_file(redis_url, tmp_path, r):
    items = [{"topic": "bulk", "id": i, "call": "a:b", "delay": 60, "params": {"n": i}} for i in range(1200)]
    items.insert(7, "")  # blank lines are skipped
    items.append({"topic": "bulk:late", "id": "x", "url": "http://example.com/", "at": 2_000_000_000,
                  "intervals": [0, 30], "persistent": False, "priority": 3})
    path = write_jsonl(tmp_path / "tasks.jsonl", items)
    proc = delayd("add", "--from", str(path))
    assert proc.stdout.strip() == f"added 1201 tasks from {path}" and proc.stderr == ""  # piped: quiet
    c = Client.from_url(redis_url)
    assert c.stats()["counts"]["delayed"] == 1201
    assert c.get("bulk", 1199).params == {"n": 1199}
    late = c.get("bulk:late", "x")
    assert late.due_at == 2_000_000_000.0 and late.priority == 3 and late.persistent is False
    again = json.loads(delayd("add", "--from", str(path), "--nx", "--json").stdout)
    assert again == {"result": "added", "lines": 1202, "tasks": 1201, "written": 0, "existed": 1201}
    c.close()


def test_add_from_refused_part_way_says_how_many_were_written(redis_url, tmp_path, r):
    """Redis fills up (maxmemory, noeviction) after the first batches of several add_many calls: the
    one-line error says how many tasks of the whole file were written, which is what Redis holds."""
    total = 30_000
    path = write_jsonl(tmp_path / "tasks.jsonl", [{"topic": "bulk", "id": i, "call": "a:b"} for i in range(total)])
    r.config_set("maxmemory", r.info("memory")["used_memory"] + 3_000_000)  # ~10k tasks: past the first call
    try:
        line = one_line_error(delayd("add", "--from", str(path), check=1))
    finally:
        r.config_set("maxmemory", 0)
    written = len(r.keys("delayd:{*}:t:bulk:*"))
    assert 2000 < written < total, written  # `add --from` writes 2,000 tasks per add_many call
    assert "refused the command: OOM" in line and line.endswith(f"(after {written} of {total} tasks were written)")


def test_add_from_stdin(redis_url, r):
    lines = "\n".join(json.dumps({"topic": "in", "id": i, "call": "a:b"}) for i in range(3)) + "\n"
    proc = delayd("add", "--from", "-", input=lines)
    assert proc.stdout.strip() == "added 3 tasks from stdin" and proc.stderr == ""
    assert len(r.keys("delayd:{*}:t:in:*")) == 3


@pytest.mark.parametrize("bad, says", [
    ("{not json", "not valid JSON"),
    ('["a", "list"]', "expected a JSON object"),
    ('{"topic": "t", "id": 3}', "give exactly one of call, url or push"),
    ('{"topic": "t", "id": 3, "call": "a:b", "nx": true}', "unknown task field(s): nx"),
    ('{"topic": "t", "id": "a:b", "call": "a:b"}', "':'"),
    ('{"topic": "t", "id": 3, "call": "a:b", "delay": -1}', "delay"),
])
def test_add_from_a_bad_line_names_it_and_writes_nothing(redis_url, tmp_path, r, bad, says):
    good = [{"topic": "t", "id": i, "call": "a:b"} for i in range(2)]
    path = write_jsonl(tmp_path / "tasks.jsonl", [*good, bad, *good])
    proc = delayd("add", "--from", str(path), check=1)
    line = one_line_error(proc)
    assert f"{path} line 3: " in line and says in line and "nothing was added" in line, line
    assert proc.stdout == "" and r.dbsize() == 0


def test_add_from_counts_every_bad_line_and_checks_the_allowlist(redis_url, tmp_path, r):
    path = write_jsonl(tmp_path / "t.jsonl", [{"topic": "t", "id": 1, "call": "shop.x:f"}, "{",
                                              {"topic": "t", "id": 2, "call": "evil:f"}, "[]"])
    line = one_line_error(delayd("add", "--from", str(path), DELAYD_ALLOWED_MODULES="shop", check=1))
    assert "line 2: not valid JSON" in line and "(and 2 more bad lines)" in line
    assert r.dbsize() == 0
    assert "cannot read" in one_line_error(delayd("add", "--from", str(tmp_path / "missing.jsonl"), check=1))


def test_add_from_usage_errors_exit_2(redis_url, tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [{"topic": "t", "id": 1, "call": "a:b"}])
    for args in (["add", "t", "1", "--from", str(path)], ["add", "--from", str(path), "--call", "a:b"],
                 ["add", "t"], ["add", "t", "1"], ["add"]):
        proc = delayd(*args, check=2)
        assert proc.stderr.startswith("usage: delayd add"), (args, proc.stderr)


def test_progress_on_a_terminal_only(redis_url, tmp_path):
    items = [{"topic": "p", "id": i, "call": "a:b", "delay": 60} for i in range(12_000)]
    path = write_jsonl(tmp_path / "tasks.jsonl", items)
    code, out, terminal = with_tty_stderr(["add", "--from", str(path)])
    assert code == 0 and out.strip() == f"added 12000 tasks from {path}"
    assert "adding 0/12000" in terminal and "\x1b[K" in terminal and "Traceback" not in terminal
    code, out, terminal = with_tty_stderr(["ls", "--limit", "12000", "--json"])
    assert code == 0 and len(out.splitlines()) == 12000
    assert "listing: bucket" in terminal and "records read" in terminal
    piped = delayd("ls", "--limit", "12000", "--json")
    assert piped.stderr == "" and len(piped.stdout.splitlines()) == 12000
