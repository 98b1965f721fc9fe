"""state_dir/start.json: the recipe a running master's config was built from (its file, DELAYD_*
variables, start directory and flags), so that `delayd restart` starts on the same config as a
reload would reread, not on the defaults of the shell it is typed in. Written by the master when it
starts, removed when it stops; owner-only (0600), as it may hold what the variables held (a Redis
password, tokens)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from delayd.config import Config, Recipe


def record_path(config: Config) -> Path:
    return Path(config.state_dir) / "start.json"


def save(config: Config, recipe: Recipe) -> None:
    """Write the recipe atomically, readable by its owner only. Raises OSError."""
    path = record_path(config)
    tmp = path.with_suffix(".tmp-start")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"path": recipe.path, "env": dict(recipe.env), "start_dir": recipe.start_dir,
                   "flags": dict(recipe.flags)}, fh)
    os.replace(tmp, path)


def read(config: Config) -> Recipe | None:
    """The running master's recipe; None when it left none (a master of an earlier version)."""
    try:
        data = json.loads(record_path(config).read_text())
        return Recipe(data["path"], data["env"], data["start_dir"], data["flags"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove(config: Config) -> None:
    record_path(config).unlink(missing_ok=True)
