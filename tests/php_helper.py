"""PHP for the tests of clients/php: whether it is here (php-cli with phpredis), and a runner of
a PHP snippet against the test's Redis with `$client` ready (a Delayd\\Client on prefix delayd:),
loaded from the vendor/ of an application that installed delayd/client with Composer
(tests/packages_helper.py)."""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from packages_helper import php_app

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def php_ready() -> bool:
    if not shutil.which("php"):
        return False
    modules = subprocess.run(["php", "-m"], capture_output=True, text=True).stdout.split()
    return "redis" in modules


def require_php() -> None:
    """Skip when php-cli or phpredis is missing; under CI=true fail instead (./scripts/test installs them)."""
    if not php_ready():
        assert os.environ.get("CI") != "true", "php-cli with phpredis is missing (./scripts/test installs them)"
        pytest.skip("php-cli with phpredis is not installed (apt-get install php-cli php-redis)")


def php(code: str, redis_url: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run `code` (PHP statements) with $redis connected to `redis_url` and $client made on it."""
    where = urlsplit(redis_url)
    prelude = (f"require {str(php_app() / 'vendor/autoload.php')!r}; $redis = new Redis(); "
               f"$redis->connect('{where.hostname}', {where.port}); "
               "$client = new Delayd\\Client($redis, ['prefix' => 'delayd:']);\n")
    proc = subprocess.run(["php", "-r", prelude + code], capture_output=True, text=True, timeout=60)
    if check:
        assert proc.returncode == 0 and not proc.stderr, (proc.returncode, proc.stdout, proc.stderr)
    return proc
