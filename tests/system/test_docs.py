"""The documentation site (mkdocs.yml, docs/): `mkdocs build --strict` passes (no broken link or anchor, no
page left out of the nav), the reference pages the build generates name every option, flag, metric, route and
task field the code has (read here by other means than scripts/docs_reference.py reads them), and every block
marked runnable is run by a test."""
from __future__ import annotations

import argparse
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from daemon_helper import ROOT
from docs_examples import marked

from delayd import config
from delayd.cli import build_parser
from delayd.model.task import Task

pytestmark = pytest.mark.system  # (it runs mkdocs, which imports the package and builds ~20 pages: seconds)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as `mkdocs build --strict` writes it from this checkout."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})  # (Material's notice of its successor)
    assert done.returncode == 0, done.stderr  # (no mkdocs: ./scripts/test installs docs/requirements.txt)
    assert "WARNING" not in done.stderr, done.stderr
    return out


def page(site: Path, name: str) -> str:
    return (site / name / "index.html").read_text()


def test_the_site_builds_strict_with_every_page(site):
    for name in ("guides/getting-started", "guides/adding-tasks", "guides/webhooks", "reference/cli",
                 "reference/options", "reference/metrics", "reference/http-api", "reference/task-fields",
                 "protocol", "redis-layout", "benchmark-results"):
        assert (site / name / "index.html").exists(), name
    assert "delayd master  (pidfile + flock" in page(site, "architecture")  # README's picture, included
    assert "lateness p99" in page(site, "benchmark-results")  # BENCHMARKS.md, included


def test_the_options_page_has_every_option_with_its_variable(site):
    text = page(site, "reference/options")
    missing = [name for name in config.OPTIONS
               if f"<code>{name}</code>" not in text or f"<code>{config.env_var(name)}</code>" not in text]
    assert not missing, missing


def verbs(parser: argparse.ArgumentParser, prog: str = "delayd"):
    """(command line, parser) of every verb, nested ones too."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield f"{prog} {name}", sub
                yield from verbs(sub, f"{prog} {name}")


def test_the_cli_page_has_every_verb_and_flag(site):
    text = page(site, "reference/cli")
    missing = []
    for line, sub in verbs(build_parser()):
        anchor = line.replace(" ", "-")
        if f'id="{anchor}"' not in text:
            missing.append(line)
            continue
        section = text.split(f'id="{anchor}"', 1)[1].split("<h2", 1)[0]
        missing += [f"{line} {flag}" for action in sub._actions for flag in action.option_strings
                    if flag not in ("-h", "--help") and f"<code>{flag}" not in section]
    assert not missing, missing


def test_the_metrics_page_has_every_metric_family(site):
    text = page(site, "reference/metrics")
    source = (ROOT / "delayd" / "daemon" / "metrics.py").read_text()
    families = re.findall(r'(Gauge|Counter|Histogram)MetricFamily\(\s*"(delayd_\w+)"', source)
    assert len(families) > 20, families
    shown = {"Gauge": "{}", "Counter": "{}_total", "Histogram": "{}_bucket"}
    missing = [name for kind, name in families if f"<code>{shown[kind].format(name)}" not in text]
    assert not missing, missing


def test_the_http_page_has_every_operation(site):
    text = page(site, "reference/http-api")
    document = json.loads((ROOT / "docs" / "openapi.json").read_text())
    missing = [f"{method.upper()} {path}" for path, item in document["paths"].items() for method in item
               if method in ("get", "post", "delete") and f"{method.upper()} {path}" not in text]
    assert not missing, missing


def test_the_task_fields_page_has_every_field_a_task_shows(site):
    text = page(site, "reference/task-fields")
    missing = [name for name in Task(topic="t", id="1", call="m:f").to_dict() if f"<code>{name}</code>" not in text]
    assert not missing, missing


def test_the_task_fields_page_gives_the_defaults_a_task_shows(site):
    """The default column is what `delayd get --json` prints for a task added with only its target (retries 20,
    not the model's unset None), and a task without a schedule's `intervals` of [0] is explained."""
    text = page(site, "reference/task-fields")
    shown = Task(topic="t", id="1", call="m:f").to_dict()
    wrong = {}
    for name, value in shown.items():
        if name in ("topic", "id", "key", "call"):
            continue
        cell = re.search(rf"<td><code>{name}</code></td>\s*<td>(.*?)</td>", text, re.S)
        if cell is None or html.unescape(cell.group(1)) != f"<code>{json.dumps(value)}</code>":
            wrong[name] = cell and cell.group(1)
    assert not wrong, wrong
    intervals = re.search(r"<td><code>intervals</code></td>\s*<td>.*?</td>\s*<td>(.*?)</td>", text, re.S).group(1)
    assert "without" in intervals and "<code>[0]</code>" in intervals, intervals


ITEM = re.compile(r"(- |\* |\d+\. )")


def test_no_list_is_glued_to_the_paragraph_before_it():
    """A list right under a paragraph line renders as a list on GitHub, but MkDocs (Python-Markdown) reads it
    as more of the paragraph, dashes and all: text moved from the README needs a blank line there. Likewise a
    numbered item's later paragraphs and code blocks need 4 spaces of indent, not GitHub's 3, and the item after
    an item with a blank line in it needs a blank line before it."""
    glued = []
    for path in sorted((ROOT / "docs").rglob("*.md")):
        lines, fenced, loose = path.read_text().split("\n"), False, False
        for n, (before, line) in enumerate(zip(lines, lines[1:]), 2):
            fenced ^= before.lstrip().startswith("```")
            loose = (loose or not before.strip()) and not ITEM.match(before)  # a blank line inside an item
            if (not fenced and ITEM.match(line) and before.strip() and not ITEM.match(before)
                    and (loose or not before.startswith((" ", "\t", "#", "|", "<", ">", "```")))):
                glued.append(f"{path.relative_to(ROOT)}:{n}")
            if re.match(r"   \S", line):  # (a numbered item's code block or paragraph: 4 spaces, not 3)
                glued.append(f"{path.relative_to(ROOT)}:{n}: indented 3 spaces")
    assert not glued, glued


def test_every_runnable_block_is_run_by_a_test():
    used = set()
    for path in (ROOT / "tests").rglob("*.py"):
        used.update(re.findall(r'''\bexample\(["']([\w-]+)["']\)''', path.read_text()))
    assert set(marked()) <= used, sorted(set(marked()) - used)
