"""Who may use the dashboard, and proof that a POST comes from its own pages.

- With `web_token` set, every request needs it: `Authorization: Bearer TOKEN`, or the
  session cookie that the login form sets (HttpOnly, SameSite=Strict; an HMAC of its
  issue time under the token, valid for SESSION_S, so the token itself is never stored
  in the browser). Comparisons are constant-time.
- Without a token the server only binds a loopback address (command.check_bind), and
  answers only requests whose Host is a loopback name, so a web page cannot reach it
  through DNS rebinding.
- A POST authorised by a cookie, or by nothing (no token), must carry the CSRF token
  (form field `csrf` or header `X-CSRF-Token`) that the pages embed; a Bearer token
  needs none, since a browser never adds that header on its own.
"""
from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import time
from typing import NamedTuple

COOKIE = "delayd_session"
SESSION_S = 12 * 3600
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class Identity(NamedTuple):
    """How a request was authorised: 'bearer', 'cookie' or 'open' (no token configured)."""

    how: str

    @property
    def needs_csrf(self) -> bool:
        return self.how != "bearer"


def is_loopback(host: str) -> bool:
    """True for a loopback address or name (the bind address, or a Host header without port)."""
    host = host.strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str:
    """The host part of a Host header ('[::1]:8080' -> '::1', 'a:80' -> 'a')."""
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


class Auth:
    def __init__(self, token: str):
        self.token = token
        # Without a token the CSRF tokens come from a secret of this process.
        self.secret = hashlib.sha256(b"delayd-web:" + token.encode()).digest() if token else os.urandom(32)

    def _sign(self, text: str) -> str:
        return hmac.new(self.secret, text.encode(), hashlib.sha256).hexdigest()

    def new_session(self, now: float | None = None) -> str:
        issued = str(int(now if now is not None else time.time()))
        return f"{issued}.{self._sign('session:' + issued)}"

    def session_valid(self, value: str | None, now: float | None = None) -> bool:
        issued, _, mac = (value or "").partition(".")
        if not issued.isdigit():
            return False
        fresh = 0 <= (now if now is not None else time.time()) - int(issued) < SESSION_S
        return hmac.compare_digest(mac, self._sign("session:" + issued)) and fresh

    def token_matches(self, given: str) -> bool:
        return bool(self.token) and hmac.compare_digest(given.encode(), self.token.encode())

    def identify(self, authorization: str | None, cookie: str | None) -> Identity | None:
        """The request's identity, or None when it must log in (or a Bearer token was wrong)."""
        if not self.token:
            return Identity("open")
        if authorization:
            scheme, _, given = authorization.partition(" ")
            return Identity("bearer") if scheme.lower() == "bearer" and self.token_matches(given.strip()) else None
        return Identity("cookie") if self.session_valid(cookie) else None

    def csrf_for(self, cookie: str | None) -> str:
        """The CSRF token of a session (of this process when no token is configured)."""
        return self._sign("csrf:" + (cookie or "") if self.token else "csrf")

    def csrf_valid(self, given: str | None, cookie: str | None) -> bool:
        return bool(given) and hmac.compare_digest(given.encode(), self.csrf_for(cookie).encode())
