"""The configuration's help as the CLI prints it: every option with its variable, default and
one-line help (the daemon verbs' --help), and the summary under `delayd --help`; made from the
option table of delayd.config."""
from __future__ import annotations

from dataclasses import fields
from typing import Any

from delayd import config as config_mod


def _default_text(value: Any) -> str:
    """A default as the environment variable would spell it."""
    if value is None or value == "":
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(map(str, value)) or "empty"
    return f"{value:g}" if isinstance(value, float) else str(value)


def options_help() -> str:
    """Every option with its variable, default and help, from the Config table (defaults only:
    a configured value, a secret's above all, is never shown)."""
    lines = ["options (config file key, environment variable, default; etc/delayd.toml says more):"]
    for f in fields(config_mod.Config):
        if f.name in config_mod.OPTIONS:
            lines.append(f"  {f.name}  {config_mod.env_var(f.name)}  (default {_default_text(f.default)})")
            lines.append(f"      {f.metadata['help']}")
    return "\n".join(lines)


HELP = ("Configuration: defaults < config file (-c FILE, $DELAYD_CONFIG or /etc/delayd/delayd.toml; every option "
        "is documented in etc/delayd.toml) < environment < flags. Every option NAME has the variable "
        f"DELAYD_<NAME>: {', '.join(map(config_mod.env_var, config_mod.OPTIONS))}. `delayd start --help` lists "
        "them with their defaults.")
