"""Every store test runs its scripts under the undeclared-key guard (tests/key_guard.py)."""
from __future__ import annotations

import pytest
from key_guard import guard


@pytest.fixture(autouse=True)
def key_guard(monkeypatch):
    guard(monkeypatch)
