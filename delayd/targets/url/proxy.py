"""The proxy of a URL request, from the environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY),
read once when the engine starts.

aiohttp's `trust_env` would read the environment and ~/.netrc again for every request,
in a thread of the executor: two thread hops per request, most of the event loop's time
at thousands of requests/s. The environment of a queue process does not change after
it starts (a reload starts new processes), so it is read once here; and ~/.netrc
credentials are not sent to the hosts of tasks (a task's URL is data, not a login).
"""
from __future__ import annotations

import functools
import urllib.request
from typing import Any

from aiohttp.helpers import proxies_from_env
from yarl import URL


class Proxies:
    def __init__(self, by_scheme: dict[str, Any]):
        self.by_scheme = by_scheme  # scheme -> aiohttp ProxyInfo (proxy URL, auth)

    @classmethod
    def from_env(cls) -> "Proxies":
        return cls(proxies_from_env())

    @property
    def hosts(self) -> frozenset[str]:
        """The proxies' host names (and addresses), as the connection resolves them."""
        return frozenset(info.proxy.raw_host for info in self.by_scheme.values() if info.proxy.raw_host)

    def for_url(self, url: URL) -> dict[str, Any]:
        """The request's proxy keywords: {} when it goes direct (no proxy, or NO_PROXY names its host)."""
        info = self.by_scheme.get(url.scheme)
        if info is None or _bypass(url.host or ""):
            return {}
        return {"proxy": info.proxy, "proxy_auth": info.proxy_auth}


@functools.lru_cache(maxsize=4096)
def _bypass(host: str) -> bool:
    """NO_PROXY names `host` (urllib's rules, as aiohttp applies them)."""
    return bool(urllib.request.proxy_bypass(host))
