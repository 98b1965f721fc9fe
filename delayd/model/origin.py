"""A URL host as delayd counts it: its origin, scheme://host:port (default ports made explicit), the unit
of per-host caps, breakers and health (delayd.targets.url), of disabling a host and of replay; and the
origins an operator's HOST names (delayd hosts disable|enable, delayd replay --host): an origin
`scheme://host[:port]`, or a bare `host[:port]` meaning both its http and https origins (on ports 80 and
443 unless a port is given).
"""
from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from delayd.model.checks import url_authority_error
from delayd.model.task import TaskError


def origin(url: str) -> str:
    """scheme://host:port of `url`: the unit of per-host isolation (default ports made explicit). ValueError
    for a port urlsplit cannot read (a URL stored past the add gate: its readers catch it)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    return f"{parts.scheme}://{'[' + host + ']' if ':' in host else host}:{port}"


def origins(host: Any) -> list[str]:
    """The origins (scheme://host:port) a HOST names (see above); TaskError if none."""
    text = str(host).strip().lower()
    bare = "://" not in text
    try:
        parts = urlsplit(("http://" if bare else "") + text)
        port, name = parts.port, parts.hostname or ""
    except ValueError as exc:
        raise TaskError(f"bad host {host!r}: {exc}") from None
    if name and (why := url_authority_error(parts.netloc)):
        raise TaskError(f"bad host {host!r}: it {why}")
    if (not name or parts.path not in ("", "/") or parts.query or parts.scheme not in ("http", "https")
            or not text.isprintable() or " " in text):  # (urlsplit drops tabs and newlines: looked at before)
        raise TaskError(f"bad host {host!r}: give scheme://host[:port] (http or https) or a bare host[:port]")
    name = f"[{name}]" if ":" in name else name
    schemes = ("http", "https") if bare else (parts.scheme,)
    return [f"{scheme}://{name}:{port or (443 if scheme == 'https' else 80)}" for scheme in schemes]
