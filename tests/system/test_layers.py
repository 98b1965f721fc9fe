"""The contracts in .importlinter, checked with import-linter: the package's wings import only
downward, only the store and the clients import redis, and the dashboard reads Redis only through the
AsyncClient (no import of delayd.store)."""
import subprocess
import sys

from daemon_helper import ROOT


def test_wings_import_only_downward():
    done = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                           "lint_imports_command()", "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    contracts = ROOT.joinpath(".importlinter").read_text().count("[importlinter:contract:")
    assert f"{contracts} kept, 0 broken" in done.stdout
