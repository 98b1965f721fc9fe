"""Who may use the dashboard, and proof that a POST comes from its own pages.

- With `web_token` set, every request needs it: `Authorization: Bearer TOKEN`, or the
  session cookie that the login form sets (HttpOnly, SameSite=Strict; Secure when the
  request came over HTTPS, also through a proxy in web_forwarded_allow_ips; an HMAC of its
  issue time under a key derived from the token, valid for SESSION_S, so the token itself
  is never stored in the browser and changing the token ends every session). Comparisons
  are constant-time; a cookie that is not exactly what new_session makes is no session.
- Wrong tokens (login form or Bearer) are counted per kind and client address (LoginThrottle):
  after a few different ones, that address is refused (429) for that kind a while, in bounded memory.
- Without a token the server only binds a loopback address (command.check_bind), and
  answers only requests whose Host is a loopback name, so a web page cannot reach it
  through DNS rebinding.
- A POST or DELETE authorised by a cookie, or by nothing (no token), must carry the CSRF
  token (form field `csrf` or header `X-CSRF-Token`) that the pages embed; a Bearer token
  needs none, since a browser never adds that header on its own.
- `producer_token` (Bearer only, never a login) is the narrow credential of HTTP producers:
  app.py lets it add, delete and read single tasks (producer_route there), nothing else.
  It does not make a non-loopback bind possible: that still takes web_token.
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import ipaddress
import os
import re
import time
from collections import OrderedDict
from typing import NamedTuple

COOKIE = "delayd_session"
SESSION_S = 12 * 3600
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
SESSION_SHAPE = re.compile(r"([0-9]{1,12})\.([0-9a-f]{64})")  # issue time (Unix s) . HMAC-SHA256 in hex


class Identity(NamedTuple):
    """How a request was authorised: 'bearer' (web_token), 'producer' (producer_token), 'cookie', or
    'open' (no web_token configured, no token sent)."""

    how: str

    @property
    def needs_csrf(self) -> bool:
        return self.how not in ("bearer", "producer")

    @property
    def producer(self) -> bool:
        return self.how == "producer"


@functools.lru_cache(maxsize=256)  # (asked for every request's Host when there is no web_token)
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
    def __init__(self, token: str, producer_token: str = ""):
        self.token = token
        self.producer_token = producer_token
        # Without a token the CSRF tokens come from a secret of this process.
        self.secret = hashlib.sha256(b"delayd-web:" + token.encode()).digest() if token else os.urandom(32)

    def _sign(self, text: str) -> str:
        return hmac.new(self.secret, text.encode(), hashlib.sha256).hexdigest()

    def new_session(self, now: float | None = None) -> str:
        issued = str(int(now if now is not None else time.time()))
        return f"{issued}.{self._sign('session:' + issued)}"

    def session_valid(self, value: str | None, now: float | None = None) -> bool:
        shape = SESSION_SHAPE.fullmatch(value or "")
        if shape is None:
            return False
        issued, mac = shape.groups()
        fresh = 0 <= (now if now is not None else time.time()) - int(issued) < SESSION_S
        return hmac.compare_digest(mac, self._sign("session:" + issued)) and fresh

    def flash_signature(self, message: str) -> str:
        """What proves that a page's message (?msg=) was chosen by this server, not by a link's author."""
        return self._sign("flash:" + message)

    def flash_valid(self, message: str, signature: str) -> bool:
        return hmac.compare_digest(signature.encode(), self.flash_signature(message).encode())

    def token_matches(self, given: str) -> bool:
        return bool(self.token) and hmac.compare_digest(given.encode(), self.token.encode())

    def identify(self, authorization: str | None, cookie: str | None) -> Identity | None:
        """The request's identity, or None when it must log in (or a Bearer token was wrong).

        Without web_token every request is open (loopback only) unless it carries Authorization: then
        it is the producer's, or (with a producer_token set) refused as a wrong token. Both tokens are
        compared every time, in constant time: the answer's timing tells neither apart."""
        if authorization and (self.token or self.producer_token):
            scheme, _, given = authorization.partition(" ")
            given = given.strip().encode()
            web = bool(self.token) and hmac.compare_digest(given, self.token.encode())
            producer = bool(self.producer_token) and hmac.compare_digest(given, self.producer_token.encode())
            if scheme.lower() != "bearer" or not (web or producer):
                return None
            return Identity("bearer" if web else "producer")
        if not self.token:
            return Identity("open")
        return Identity("cookie") if self.session_valid(cookie) else None

    def csrf_for(self, cookie: str | None) -> str:
        """The CSRF token of a session (of this process when no token is configured)."""
        return self._sign("csrf:" + (cookie or "") if self.token else "csrf")

    def csrf_valid(self, given: str | None, cookie: str | None) -> bool:
        return bool(given) and hmac.compare_digest(given.encode(), self.csrf_for(cookie).encode())


class LoginThrottle:
    """Wrong tokens per credential kind and client address: after `allowed` different ones of a kind within
    `window` seconds (counted from the first), that address is refused for that kind until the window
    ends, even with the right token. The kinds (KINDS) are the dashboard's Bearer token, a Bearer token on
    a producer route, and the login form: a misconfigured producer holds back neither the dashboard nor,
    repeating its one wrong token (counted once: a known-wrong token tells nothing), the good producers
    beside it. The dashboard token's success clears the address's counts; the producer token's clears
    none, since a wrong token on a producer route may be a guess at the dashboard token.

    At most `size` (kind, address) entries are kept, the least recently failed forgotten first, so a
    flood of addresses costs bounded memory (each then still gets only `allowed` tries per window). An
    IPv6 client counts as its /64, which one host usually holds whole. Behind a proxy every client has
    the proxy's address unless the proxy is trusted (web_forwarded_allow_ips)."""

    KINDS = ("dashboard", "producer", "login")

    def __init__(self, allowed: int = 5, window: float = 60.0, size: int = 10_000):
        self.allowed, self.window, self.size = allowed, window, size
        # "kind address": (window start, fingerprints of the different wrong tokens seen in it)
        self.failures: OrderedDict[str, tuple[float, frozenset[bytes]]] = OrderedDict()
        self.secret = os.urandom(16)  # (fingerprints are keyed: the table never holds a token's own hash)

    @staticmethod
    @functools.lru_cache(maxsize=1024)  # (asked twice per request that carries a token)
    def key(address: str | None) -> str:
        """An IPv4 address, an IPv6 /64, or (a forwarded name that is no address) its first 64 characters."""
        try:
            ip = ipaddress.ip_address(address or "")
        except ValueError:
            return (address or "")[:64]
        if ip.version == 6 and ip.ipv4_mapped:  # an IPv4 client of a dual-stack bind
            ip = ip.ipv4_mapped
        return str(ipaddress.ip_network(f"{ip}/64", strict=False)) if ip.version == 6 else str(ip)

    def wait(self, address: str | None, kind: str, now: float | None = None) -> float:
        """Seconds until `address` may try a token of `kind` again (0: now)."""
        now = time.monotonic() if now is None else now
        start, seen = self.failures.get(f"{kind} {self.key(address)}", (now, frozenset()))
        left = start + self.window - now
        return left if len(seen) >= self.allowed and left > 0 else 0.0

    def failed(self, address: str | None, kind: str, given: str, now: float | None = None) -> None:
        """`address` sent `given`, a wrong token of `kind`."""
        now = time.monotonic() if now is None else now
        key = f"{kind} {self.key(address)}"
        start, seen = self.failures.pop(key, (now, frozenset()))
        if now - start >= self.window:
            start, seen = now, frozenset()
        self.failures[key] = (start, seen | {hmac.new(self.secret, given.encode(errors="surrogateescape"),
                                                      hashlib.sha256).digest()[:8]})
        while len(self.failures) > self.size or now - next(iter(self.failures.values()))[0] >= self.window:
            self.failures.popitem(last=False)  # the least recently failed: over the size, or its window is over

    def succeeded(self, address: str | None) -> None:
        """The dashboard token came from `address`: its counts of every kind start again."""
        for kind in self.KINDS:
            self.failures.pop(f"{kind} {self.key(address)}", None)
