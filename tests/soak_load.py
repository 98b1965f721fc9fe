"""The soak's load, shaped like a shop's day: what each producer step adds, and the producers.

A step is a pure function of (producer, step number), so that the soak knows every task added
from how many steps each producer finished: its key, what it should end as, and how.
"""
from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import quote

import httpx

RAN = "soak:ran"                       # the ledger list: "<topic>:<id>:<run>" per run of a call task
PAID = "soak:paid"                     # the ledger list of orders a Python producer deleted while pending
PLANNED = "soak_handlers:planned"
ORDERS = "order:cancel"                # cancelled unless paid: some are deleted while pending
LIMITED = "sms:send"                   # a limited topic (rate and concurrency)
PAUSED = "report:build"                # paused, then resumed, by the soak's fault timer
TIMING = "reminder"                    # plain call tasks whose lateness is measured


@dataclass(frozen=True)
class Merchants:
    """Base URLs of the merchants' servers: steady (slow or flaky answers), one that goes down and
    comes back, one disabled and enabled with `delayd hosts`, and one that times out or fails."""
    steady: str
    comeback: str
    disabled: str
    timeouts: str


@dataclass(frozen=True)
class Expect:
    """What a task should end as: `final` (ok / failed), or None for a recurring one (never ends)."""
    final: str | None
    runs: int | None = None   # the exact number of runs a call task takes to end (None: any: a URL task)


def expect(item: dict[str, Any]) -> Expect:
    """A task's expected end, from the dict it was added with."""
    params = item.get("params", {})
    if "url" in item:
        final = "failed" if "/fail" in item["url"] or item.get("timeout") else "ok"
        return Expect(final)
    if "every" in item:
        return Expect(None)
    if params["plan"] == "fail":
        return Expect("failed", runs=1)
    return Expect("ok", runs=int(params.get("succeed_on", 1)))


def step(name: str, n: int, merchants: Merchants, ledger: str, leak: int = 0) -> list[dict[str, Any]]:
    """The tasks producer `name` adds at its step `n` (one, or a batch of ten): a pure function."""
    rng = random.Random(f"{name}-{n}")
    key = f"{name}-{n}"

    def call(topic: str, plan: str = "ok", **extra: Any) -> dict[str, Any]:
        params = {"list": RAN, "redis": ledger, "plan": plan, **extra.pop("params", {})}
        if leak and topic == TIMING:
            params["leak"] = leak
        return {"topic": topic, "id": key, "call": PLANNED, "params": params, **extra}

    kind = n % 10
    if kind == 0:
        return [call(ORDERS, delay=round(rng.uniform(20, 40), 3))]
    if kind == 1:
        return [call(TIMING, delay=round(rng.uniform(0.5, 5), 3), params={"late": 1})]
    if kind == 2:
        batch = [call(TIMING, delay=round(rng.uniform(0.5, 8), 3), params={"late": 1}) for _ in range(10)]
        return [{**item, "id": f"{key}-{j}"} for j, item in enumerate(batch)]
    if kind == 3:
        return [call("payment:capture", plan=rng.choice(["ok", "raise"]), params={"succeed_on": 3},
                     delay=round(rng.uniform(0, 3), 3))]
    if kind == 4:
        return [call("stock:release", plan="fail", delay=round(rng.uniform(0, 3), 3))]
    if kind == 5:
        path = rng.choice([f"/slow?seconds={rng.uniform(0.1, 0.8):.2f}", "/flaky?succeed_on=2"])
        return [{"topic": "order:notify", "id": key, "url": merchants.steady + path, "method": "POST",
                 "params": {"order": key}, "intervals": [0, 1, 2, 4], "persistent": False}]
    if kind == 6:
        return [{"topic": "order:notify", "id": key, "url": merchants.comeback + "/success",
                 "intervals": [0, 2, 4, 8, 15], "delay": round(rng.uniform(0, 3), 3)}]
    if kind == 7:
        return [{"topic": "merchant:sync", "id": key, "url": merchants.disabled + "/success",
                 "intervals": [0, 2, 4, 8, 15], "delay": round(rng.uniform(0, 3), 3)}]
    if kind == 8:
        if rng.random() < 0.5:
            return [{"topic": "order:notify", "id": key, "url": merchants.timeouts + "/slow?seconds=3",
                     "timeout": 1, "intervals": [0, 1], "persistent": False}]
        return [{"topic": "order:notify", "id": key, "url": merchants.timeouts + "/fail", "intervals": [0, 1]}]
    return [call(rng.choice([LIMITED, PAUSED]), delay=round(rng.uniform(0, 2), 3))]


def produce(name: str, redis_url: str, merchants: Merchants, ledger: str, every: float, done, stop,
            leak: int = 0) -> None:
    """A producer process: a step every `every` seconds (add, or add_many for a batch) until `stop`
    is set; `done.value` is the number of steps written. A step whose write failed (Redis down) is
    written again with nx, so that a write that did land is not replaced."""
    from delayd import Client
    from delayd.client.errors import DelaydError
    client = Client.from_url(redis_url)
    n, retrying = 0, False
    while not stop.is_set():
        items = step(name, n, merchants, ledger, leak)
        try:
            if len(items) == 1:
                client.add(**items[0], nx=retrying)
            else:
                client.add_many(items, nx=retrying)
        except DelaydError:
            retrying = True
            stop.wait(0.2)
            continue
        n, retrying = n + 1, False
        done.value = n
        if n % 10 == 5:
            pay(client, f"{name}-{n - 5}", ledger)
        stop.wait(every)
    client.close()


def pay(client, order: str, ledger: str) -> None:
    """Delete order `order` (paid) while it is pending, and say so in the ledger's PAID list."""
    from delayd.client.errors import DelaydError
    from delayd.examples import _redis
    try:
        task = client.get(ORDERS, order)
        if task is not None and task.status == "delayed" and client.delete(ORDERS, order):
            _redis(ledger).rpush(PAID, f"{ORDERS}:{order}")
    except DelaydError:
        pass


class HttpProducer(threading.Thread):
    """Adds through `delayd web` (POST /api/tasks, single and arrays) and deletes paid orders there
    (DELETE /api/tasks/…) while they are pending. A failed request (the web's Redis is down) is sent
    again with nx. `steps` counts the steps written; `deleted` the orders deleted in time (200, not claimed)."""

    def __init__(self, base: str, token: str, merchants: Merchants, ledger: str, every: float,
                 pending_order: Callable[[str], bool], leak: int = 0):
        super().__init__(daemon=True)
        self.http = httpx.Client(base_url=base, timeout=10.0, headers={"Authorization": f"Bearer {token}"})
        self.merchants, self.ledger, self.every, self.leak = merchants, ledger, every, leak
        self.pending_order = pending_order
        self.stop = threading.Event()
        self.steps = 0
        self.deleted: list[str] = []

    def run(self) -> None:
        retrying = False
        while not self.stop.is_set():
            items = step("web", self.steps, self.merchants, self.ledger, self.leak)
            body: Any = [{**item, "nx": True} for item in items] if retrying else items
            if len(items) == 1:
                body = body[0]
            try:
                answer = self.http.post("/api/tasks", json=body)
                ok = answer.status_code in (200, 201)
            except httpx.HTTPError:
                ok = False
            if not ok:
                retrying = True
                self.stop.wait(0.2)
                continue
            self.steps, retrying = self.steps + 1, False
            if self.steps % 10 == 5:
                self.pay(f"web-{self.steps - 5}")
            self.stop.wait(self.every)
        self.http.close()

    def pay(self, order: str) -> None:
        """Delete order `order` (paid) if it is still pending."""
        if not self.pending_order(f"{ORDERS}:{order}"):
            return
        try:
            answer = self.http.delete(f"/api/tasks/{quote(ORDERS, safe='')}/{quote(order, safe='')}")
        except httpx.HTTPError:
            return
        if answer.status_code == 200 and not answer.json()["claimed"]:  # (claimed: too late, its run may go on)
            self.deleted.append(f"{ORDERS}:{order}")
