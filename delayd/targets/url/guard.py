"""The SSRF guard (url_deny_private): no request to an address that is not public.

Checked on the addresses a host name resolves to, at send time, in the resolver the
connection then uses (so a name cannot resolve to a public address for the check and
to a private one for the connection), and on IP literals in the URL. Refused:
loopback, private, link-local (which holds the cloud metadata address 169.254.169.254),
shared, reserved, unspecified and multicast addresses: whatever is not globally
routable, by Python's table and by `_NOT_PUBLIC` (which does not depend on Python's
version). An IPv6 address that carries an IPv4 one (IPv4-mapped, -translated and
-compatible, NAT64 64:ff9b::/96) is judged by that IPv4 address; a 6to4 one
(2002::/16) is refused if its IPv4 address is.

Through a proxy, the proxy resolves the target, not the connection's resolver: `Guard`
resolves it here first and refuses it the same way (the proxy then looks the name up
again on its own). The proxy's own address is the operator's setting, not a task's: not
checked, except when a task names that host as its target.
"""
from __future__ import annotations

import asyncio
import functools
import ipaddress
import re
import socket
import time
from collections import OrderedDict
from typing import Any

from aiohttp.abc import AbstractResolver
from aiohttp.resolver import DefaultResolver
from yarl import URL

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Not globally reachable (IANA special-purpose registries) where Python's table says otherwise
# in some version.
_NOT_PUBLIC = tuple(ipaddress.ip_network(net) for net in (
    "192.0.0.0/24",     # IETF protocol assignments (Python: only parts of it)
    "64:ff9b:1::/48",   # local-use NAT64 (RFC 8215)
    "fec0::/10",        # site-local (deprecated, still routed inside some sites)
    "5f00::/16",        # SRv6 SIDs
    "3fff::/20",        # documentation
))
# IPv6 forms of an IPv4 address, in their last 32 bits.
_CARRY_IPV4 = tuple(ipaddress.IPv6Network(net) for net in (
    "::ffff:0:0/96",    # IPv4-mapped
    "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
    "64:ff9b::/96",     # NAT64, well-known prefix: reaches the IPv4 address on a DNS64 network
    "::/96",            # IPv4-compatible (deprecated); holds :: and ::1 too
))
_INET_ATON_FORM = re.compile(r"[0-9][0-9a-fA-FxX.]*")  # 1-4 numbers, decimal, octal (0…) or hex (0x…)
NAME_CACHE = 4096  # names checked for proxied requests, kept for the DNS cache's ttl


class Refused(Exception):
    """The host resolves to an address that url_deny_private refuses."""


class Unresolved(Exception):
    """A host name the guard resolves itself (Guard.check) does not resolve: it cannot be checked."""


def _not_public(ip: IPAddress) -> bool:
    if ip.version == 6:
        if any(ip in net for net in _CARRY_IPV4):
            return _not_public(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        if ip.sixtofour is not None and _not_public(ip.sixtofour):
            return True
    return not ip.is_global or ip.is_multicast or any(ip in net for net in _NOT_PUBLIC)


def _literal(host: str) -> IPAddress | None:
    """The address `host` is written as (a zone index dropped), None for a name. Every IPv4 form that
    inet_aton reads is an address (`2130706433`, `0177.0.0.1`, `127.1`, `0x7f.1`: resolvers, proxies and
    aiohttp before 3.14 connect to 127.0.0.1 for each), not a name to look up."""
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    if not _INET_ATON_FORM.fullmatch(host):  # (C's inet_aton also takes what follows a space)
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def refused(address: str) -> bool:
    """True if `address` (an IP literal) is not a public unicast address; False for a name."""
    ip = _literal(address)
    return ip is not None and _not_public(ip)


class GuardedResolver(AbstractResolver):
    """The default resolver, refusing every answer that holds a non-public address, except for
    the `trusted` names (the proxies')."""

    def __init__(self, trusted: frozenset[str] = frozenset()) -> None:
        self.inner = DefaultResolver()
        self.trusted = trusted

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[Any]:
        if host in self.trusted:
            return await self.inner.resolve(host, port, family)
        return await self.checked(host, port, family)

    async def checked(self, host: str, port: int, family: socket.AddressFamily) -> list[Any]:
        """The addresses of `host`; Refused if one is not public."""
        results = await self.inner.resolve(host, port, family)
        bad = sorted({r["host"] for r in results if refused(r["host"])})
        if bad:
            raise Refused(f"{host} resolves to {', '.join(bad)}, not a public address (url_deny_private)")
        return results

    async def close(self) -> None:
        await self.inner.close()


class Guard:
    """url_deny_private for one engine: the resolver its connections use, and `check` before
    each request for what that resolver does not see."""

    def __init__(self, proxy_hosts: frozenset[str], ttl: float) -> None:
        self.resolver = GuardedResolver(trusted=proxy_hosts)
        self.ttl = ttl
        self.names: OrderedDict[str, tuple[float, asyncio.Future]] = OrderedDict()  # public: until, lookup

    async def check(self, url: URL, proxied: bool) -> None:
        """Refused if `url`'s host is a non-public IP literal or, when the connection's resolver
        will not check it (the request goes through a proxy, or to a proxy's host), a name
        resolving to one; Unresolved if such a name does not resolve."""
        host = url.raw_host or ""
        ip = _literal(host)
        if ip is not None:
            if _not_public(ip):
                raise Refused(f"{host} is not a public address (url_deny_private)")
        elif proxied or host in self.resolver.trusted:
            await self._check_name(host, url.port or 0)

    async def _check_name(self, host: str, port: int) -> None:
        """Resolve `host` and refuse it (Refused, Unresolved); a name found public is not looked up
        again for `ttl` seconds, and concurrent requests share one lookup."""
        entry = self.names.get(host)
        now = time.monotonic()
        if entry is None or now >= entry[0]:
            lookup = asyncio.ensure_future(self.resolver.checked(host, port, socket.AF_UNSPEC))
            entry = self.names[host] = (now + self.ttl, lookup)
            self.names.move_to_end(host)
            if len(self.names) > NAME_CACHE:
                self.names.popitem(last=False)
            lookup.add_done_callback(functools.partial(self._forget_failed, host, entry))
        try:
            await asyncio.shield(entry[1])
        except OSError as exc:
            raise Unresolved(f"{host}:{port}: {exc.strerror or exc}") from None

    def _forget_failed(self, host: str, entry: tuple[float, asyncio.Future], lookup: asyncio.Future) -> None:
        if (lookup.cancelled() or lookup.exception() is not None) and self.names.get(host) is entry:
            del self.names[host]
