"""The `delayd` command's parser and start-up, in the fast tier: a run that stops at the parser
imports no redis-py, so it costs little (tests/cli/test_cli.py runs the verbs, as system tests)."""
from __future__ import annotations

import subprocess
import sys

from daemon_helper import delayd
from test_cli import TASK_VERBS


def test_add_help_says_intervals_are_gaps():
    text = " ".join(delayd("add", "--help").stdout.split())
    assert "gaps in seconds, each from the previous run's due time: 0,30,60 runs at +0, +30, +90 s" in text


def test_top_level_help_lists_task_verbs():
    out = delayd("--help").stdout
    assert all(verb in out for verb in TASK_VERBS)
    assert delayd("--version").stdout.startswith("delayd ")


def test_a_verb_imports_only_what_it_needs(redis_url):
    """The parser (--help, a syntax error) needs no redis-py, a task verb no AsyncClient: each import
    is start-up time of every `delayd` run."""
    script = ("import sys; from delayd.cli import build_parser, main; build_parser(); print('redis' in sys.modules); "
              "main(['get', 'x', 'y']); print('redis' in sys.modules, 'delayd.client.async_client' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["False", "True", "False"], (proc.stdout, proc.stderr)
    assert proc.stderr == "delayd: error: not found: x:y\n"
