"""$DELAYD_TEST_REDIS chooses the suite's redis-server in pytest-xdist's workers too (tests/redis_server.py):
tests/conftest.py clears DELAYD_* before the workers start, which once made `-n 2` runs of the server matrix
silently use the default server."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from redis_server import server_binary

pytestmark = pytest.mark.system

PROBE = '''
from redis_server import server_binary
def test_the_server_chosen():
    assert server_binary() == {binary!r}, server_binary()
'''


def test_the_chosen_server_reaches_xdist_workers(tmp_path):
    default = server_binary()
    other = next((path for path in ("/usr/bin/valkey-server", "/usr/bin/redis-server")
                  if os.access(path, os.X_OK) and os.path.realpath(path) != os.path.realpath(default)), None)
    if other is None:
        pytest.skip("no second redis-server on this machine to choose")
    tests = Path(__file__).parent
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE.format(binary=other))
    env = {**os.environ, "DELAYD_TEST_REDIS": other}
    env.pop("PYTEST_DELAYD_REDIS_SERVER", None)
    # The suite's conftest as a plugin (-p): it clears DELAYD_* in the controller, before the workers start.
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest", "-n", "2",
                           "--rootdir", str(tmp_path), "-c", os.devnull, str(probe)],
                          cwd=tmp_path, env={**env, "PYTHONPATH": str(tests)}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
