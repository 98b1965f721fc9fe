"""A fast local HTTP server for `scripts/bench --url`: the merchants of the URL benchmark.

Answers every request with `success` after `--delay` seconds, on 127.0.0.2 … (20 loopback
addresses by default, up to 254), from `--procs` processes sharing each port (SO_REUSEPORT). With
`--dead N` the last N addresses accept connections and never answer. HTTP/1.1 keep-alive;
only what delayd's and the benchmark's clients send is parsed (Content-Length bodies).
Prints `ready` once every process listens; stops on SIGTERM.
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import socket

# Connections waiting to be accepted, per address. asyncio's create_server listens again with
# its own backlog (100 unless told): past it the kernel drops SYNs, which the client resends
# only after 1 s, 3 s…, a delay of the server's, not of the client under test.
BACKLOG = 4096
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Type: text/plain\r\n\r\nsuccess"


def addresses(hosts: int) -> list[str]:
    return [f"127.0.0.{2 + i}" for i in range(hosts)]


class Merchant(asyncio.Protocol):
    def __init__(self, delay: float, dead: bool):
        self.delay, self.dead = delay, dead
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        if self.dead:
            return
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].lower()
            length = 0
            at = head.find(b"content-length:")
            if at >= 0:
                length = int(head[at + 15:].split(b"\r\n", 1)[0])
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            self.buffer = self.buffer[end:]
            if self.delay:
                asyncio.get_running_loop().call_later(self.delay, self.answer)
            else:
                self.answer()

    def answer(self):
        if self.transport and not self.transport.is_closing():
            self.transport.write(ANSWER)


def listener(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    return sock


def serve(port: int, hosts: int, dead: int, delay: float, ready) -> None:
    async def main():
        loop = asyncio.get_running_loop()
        for i, host in enumerate(addresses(hosts)):
            is_dead = i >= hosts - dead
            await loop.create_server(lambda d=is_dead: Merchant(delay, d), sock=listener(host, port), backlog=BACKLOG)
        ready.set()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        # Stopping: a second SIGTERM (the parent's multiprocessing cleanup) must not reach the
        # loop's signal wakeup fd once asyncio.run has closed it ("Exception ignored …" noise).
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    asyncio.run(main())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--dead", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--procs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    args = parser.parse_args(argv)
    if not 1 <= args.hosts <= 254:
        parser.error("--hosts: 1 to 254 (127.0.0.2 … 127.0.0.255)")
    events = [multiprocessing.Event() for _ in range(args.procs)]
    procs = [multiprocessing.Process(target=serve, args=(args.port, args.hosts, args.dead, args.delay, e),
                                     daemon=True) for e in events]
    for p in procs:
        p.start()
    for e in events:
        e.wait(30)
    print("ready", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: [p.terminate() for p in procs])  # each stops, then joins below
    for p in procs:
        p.join()


if __name__ == "__main__":
    main()
