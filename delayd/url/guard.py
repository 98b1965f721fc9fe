"""The SSRF guard (url_deny_private): no request to an address that is not public.

Checked on the addresses a host name resolves to, at send time, in the resolver the
connection then uses (so a name cannot resolve to a public address for the check and
to a private one for the connection), and on IP literals in the URL. Refused:
loopback, private, link-local (which holds the cloud metadata address 169.254.169.254),
shared, reserved, unspecified and multicast addresses: whatever is not globally
routable, also when written as an IPv4-mapped IPv6 address.
"""
from __future__ import annotations

import ipaddress
import socket
from typing import Any

from aiohttp.abc import AbstractResolver
from aiohttp.resolver import DefaultResolver


class Refused(Exception):
    """The host resolves to an address that url_deny_private refuses."""


def refused(address: str) -> bool:
    """True if `address` (an IP literal) is not a public unicast address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False  # a name: the resolver checks what it resolves to
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return not ip.is_global or ip.is_multicast


def check_literal(host: str) -> None:
    """Refused if `host` is an IP literal that is not public."""
    if refused(host.strip("[]")):
        raise Refused(f"{host} is not a public address (url_deny_private)")


class GuardedResolver(AbstractResolver):
    """The default resolver, refusing every answer that holds a non-public address."""

    def __init__(self) -> None:
        self.inner = DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[Any]:
        results = await self.inner.resolve(host, port, family)
        bad = sorted({r["host"] for r in results if refused(r["host"])})
        if bad:
            raise Refused(f"{host} resolves to {', '.join(bad)}, not a public address (url_deny_private)")
        return results

    async def close(self) -> None:
        await self.inner.close()
