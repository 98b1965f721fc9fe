"""The house style a machine can check, with ruff and pyproject.toml's selection: no unused or undefined
names, imports in order, no line over 120 characters, in the package, the tests and the scripts."""
import subprocess
import sys

from daemon_helper import ROOT


def test_the_code_passes_ruff():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "delayd", "tests", "scripts"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
