"""`delayd web [--bind ADDR] [--port N]`: serve the dashboard in this process.

Importing this module is cheap (the CLI imports it to build its parser); Starlette
and uvicorn are imported only when the server starts.
"""
from __future__ import annotations

import argparse
import ipaddress
import socket
import sys
from typing import Any

from delayd import config as config_mod
from delayd.config import Config, ConfigError
from delayd.web.auth import is_loopback

DEFAULT_PORT = 8470
HEAD_LIMIT = 64 * 1024  # bytes of a request head uvicorn reads (server_settings)


def check_bind(config: Config) -> None:
    """Refuse (ConfigError, one line) a non-loopback bind without a token."""
    if not config.web_token and not is_loopback(config.web_bind):
        raise ConfigError(f"refusing to serve the dashboard on {config.web_bind} without a token: set web_token "
                          "(DELAYD_WEB_TOKEN), or bind 127.0.0.1")


def listen(config: Config) -> socket.socket:
    """The dashboard's listening socket (the master opens it once and hands it to each web child)."""
    check_bind(config)
    port = DEFAULT_PORT if config.web_port is None else config.web_port
    family = socket.AF_INET6 if ":" in config.web_bind else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # proto set: asyncio sets TCP_NODELAY
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.web_bind, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def serve(config: Config, sock: socket.socket, on_started: Any = None) -> None:
    """Run the dashboard on `sock` until SIGTERM/SIGINT (uvicorn's graceful shutdown).

    After a graceful shutdown uvicorn raises the signal it stopped on again, for the handler
    that was there before it: with the default one, a clean stop ended "killed by SIGTERM".
    Ours exits 0 (and a SIGTERM before uvicorn is up exits 0 at once)."""
    import asyncio
    import signal

    import uvicorn

    from delayd.web.app import create

    server = uvicorn.Server(uvicorn.Config(create(config), **server_settings(config)))

    signal.signal(signal.SIGTERM, _exit_stopped)

    async def main() -> None:
        if on_started is not None:
            asyncio.get_running_loop().create_task(on_started())
        await server.serve(sockets=[sock])
    asyncio.run(main())


def server_settings(config: Config) -> dict[str, Any]:
    """uvicorn's settings for the dashboard (scripts/bench_http.py serves its ceiling with them too). A request
    head (its line and headers) of up to HEAD_LIMIT bytes is read: every parameter docs/openapi.json allows fits,
    percent-encoded (a list's topic, id prefix and cursor: 512, 512 and 8,192 characters); a bigger one is
    answered 400 in text/plain by uvicorn itself (h11's default: 16 KiB)."""
    return {"log_level": "warning", "access_log": False, "server_header": False,
            "h11_max_incomplete_event_size": HEAD_LIMIT, **proxy_headers(config)}


def proxy_headers(config: Config) -> dict[str, Any]:
    """uvicorn's settings to believe X-Forwarded-Proto and -For from web_forwarded_allow_ips only
    (as networks: uvicorn takes "10.0.0.1/8" for a name, which no client address equals)."""
    proxies = config.web_forwarded_allow_ips
    return {"proxy_headers": bool(proxies), "forwarded_allow_ips": "*" if "*" in proxies else
            [str(ipaddress.ip_network(proxy, strict=False)) for proxy in proxies]}


def _exit_stopped(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    help = "serve the dashboard (pages and JSON API) and the producer API over HTTP"
    p = sub.add_parser("web", parents=[common], help=help,
                       description=help + f". Binds 127.0.0.1:{DEFAULT_PORT} unless told otherwise; a non-loopback "
                                          "address needs web_token (DELAYD_WEB_TOKEN). producer_token "
                                          "(DELAYD_PRODUCER_TOKEN) lets HTTP producers add, delete and read tasks "
                                          "(POST /api/tasks, DELETE and GET /api/tasks/TOPIC/ID), nothing else.")
    p.add_argument("--bind", metavar="ADDR", help="address to listen on (default: web_bind, 127.0.0.1)")
    p.add_argument("--port", type=int, metavar="N", help=f"TCP port (default: web_port, else {DEFAULT_PORT})")


def run(args: argparse.Namespace) -> int:
    from setproctitle import setproctitle

    from delayd.workers.process import title

    config = config_mod.load(args.config, redis_url=args.redis, prefix=args.prefix, web_bind=args.bind,
                             web_port=args.port)
    setproctitle(title(config, "web"))  # as `ps` shows the master's supervised web child
    try:
        sock = listen(config)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {config.web_bind}:{config.web_port or DEFAULT_PORT}: "
                          f"{exc.strerror or exc}") from None
    host, port = sock.getsockname()[:2]
    print(f"delayd web: serving http://{'[' + host + ']' if ':' in host else host}:{port}/"
          + (" (read-only)" if config.web_readonly else ""), file=sys.stderr, flush=True)
    serve(config, sock)
    return 0
