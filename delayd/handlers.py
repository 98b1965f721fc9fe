"""One run of a task: call a function, request a URL or push to a list, and map the result.

The queue worker calls `Runner.run(task)` from its worker threads and enforces the hard
task timeout itself; this module only executes and classifies:

- `ok`     handler returned "success" (any case) or True; URL answered 2xx `success`;
           the push landed;
- `failed` handler returned "fail" or False; URL answered 2xx `fail`; the target is not
           allowed to run (no more runs: a task is data, never code);
- `retry`  anything else: another value, an exception, a target that cannot be imported
           (yet), a timeout, a non-2xx answer, a connection or Redis error.

A `call`/`callback` target is checked against `allowed_modules` *before* anything is
imported, and is resolved with plain `importlib` + `getattr`: nothing read from Redis is
ever eval-ed or unpickled.
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import threading
import traceback
import types
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any, Callable
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx
import redis

from . import __version__, deadline
from .config import Config
from .task import Task, TaskError, check_target, module_allowed

USER_AGENT = f"delayd/{__version__}"
HOW_TO_ALLOW = "add it to allowed_modules in the config or DELAYD_ALLOWED_MODULES"
EXCERPT = 200          # characters of an answer or a value quoted in an error
TRACE_FRAMES = 3       # frames of a handler's traceback kept in the error


@dataclass(frozen=True)
class Outcome:
    """The result of one run: `kind` is 'ok', 'failed' or 'retry'; `error` says why (one line)."""

    kind: str
    error: str = ""


OK = Outcome("ok")


def _clip(text: str, limit: int = EXCERPT) -> str:
    """Whitespace collapsed to single spaces (one line), cut to `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _safe_repr(value: Any) -> str:
    try:
        return _clip(repr(value))
    except Exception:  # a broken __repr__ must not break the worker
        return f"<{type(value).__name__} object>"


def outcome_of(value: Any) -> Outcome:
    """Map a handler's return value to an Outcome (SPEC section 2)."""
    if value is True:
        return OK
    if value is False:
        return Outcome("failed", "handler returned False")
    if isinstance(value, str):
        answer = value.strip().lower()
        if answer == "success":
            return OK
        if answer == "fail":
            return Outcome("failed", "handler returned 'fail'")
    return Outcome("retry", f"handler returned {_safe_repr(value)}; "
                            "expected 'success' or True, 'fail' or False")


def describe_exception(exc: BaseException, skip: int = 0) -> str:
    """`Type: message | last frames: file.py:12 in func: code > …`, on one line.

    `skip` drops that many outer frames (the frame of delayd that called the handler).
    """
    try:
        message = str(exc)
    except Exception:
        message = ""
    text = type(exc).__name__ + (f": {_clip(message, 500)}" if message.strip() else "")
    frames = traceback.extract_tb(exc.__traceback__)[skip:][-TRACE_FRAMES:]
    if frames:
        where = " > ".join(
            f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" + (f": {_clip(f.line, 80)}" if f.line else "")
            for f in frames)
        text += f" | last frames: {where}"
    return text


# -- call targets ---------------------------------------------------------------------------

class TargetRefused(Exception):
    """The target may not run; running again would not change that (-> failed)."""


class TargetUnavailable(Exception):
    """The target cannot be loaded now; a deploy may fix it (-> retry)."""


# One resolved function per target per process, shared by every Runner and thread. The
# allowlist is checked on every run, before this cache is consulted.
_targets: dict[str, Callable[..., Any]] = {}
_targets_lock = threading.Lock()


def _load(target: str) -> Callable[..., Any]:
    module_name, _, path = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # ImportError, SyntaxError, whatever the module raises
        if isinstance(exc, ImportError):
            importlib.invalidate_caches()  # so that code deployed before the next run is found
        raise TargetUnavailable(f"cannot import module {module_name!r} of {target!r}: "
                            f"{describe_exception(exc)}") from None
    for part in path.split("."):
        if part.startswith("__"):
            raise TargetRefused(f"{target!r} names {part!r}: a target must be a function or class "
                           "of the module, not a dunder attribute")
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetUnavailable(f"module {module_name!r} has no attribute {path!r} "
                                f"(for {target!r})") from None
        except Exception as exc:  # a module __getattr__ that raises something else
            raise TargetUnavailable(f"cannot resolve {target!r}: {describe_exception(exc)}") from None
        if isinstance(obj, types.ModuleType):
            # `allowed.module:os.system` must not reach into modules the allowlist never named.
            raise TargetRefused(f"{target!r} reaches through the module {obj.__name__!r}; name the module "
                           "before the ':' instead (its prefix must be in allowed_modules)")
    if not callable(obj):
        raise TargetUnavailable(f"{target!r} is not callable (it is a {type(obj).__name__})")
    return obj


def resolve(target: str, allowed: tuple[str, ...]) -> Callable[..., Any]:
    """The function a `module:function` target names; raise TargetRefused or TargetUnavailable."""
    try:
        check_target("target", target)
    except TaskError as exc:
        raise TargetRefused(str(exc)) from None
    if not module_allowed(target, allowed):
        module = target.partition(":")[0]
        listed = ", ".join(allowed) if allowed else "empty"
        raise TargetRefused(f"module {module!r} of {target!r} is not allowed to run "
                       f"(allowed_modules: {listed}); to allow it, {HOW_TO_ALLOW}")
    func = _targets.get(target)
    if func is None:
        with _targets_lock:  # import each target once, even when many threads ask at once
            func = _targets.get(target)
            if func is None:
                func = _targets[target] = _load(target)
    return func


def _call(func: Callable[..., Any], task: Task) -> Outcome:
    try:
        value = func(task)
    except (Exception, SystemExit) as exc:
        return Outcome("retry", describe_exception(exc, skip=1))
    if inspect.iscoroutine(value):
        value.close()
        return Outcome("retry", "handler is a coroutine function (async def); delayd calls "
                                "handlers synchronously: define it with def")
    return outcome_of(value)


# -- url targets ----------------------------------------------------------------------------

def _scalar(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def form_items(params: dict) -> list[tuple[str, str]]:
    """`params` as (key, value) pairs for a query or a form body.

    Scalars are sent as text (True -> "true", None -> ""), a list of scalars as the key
    repeated, anything nested as compact JSON text.
    """
    items: list[tuple[str, str]] = []
    for key, value in params.items():
        if isinstance(value, list) and all(v is None or isinstance(v, (str, int, float)) for v in value):
            items.extend((str(key), _scalar(v)) for v in value)
        elif isinstance(value, (dict, list)):
            items.append((str(key), json.dumps(value, separators=(",", ":"), ensure_ascii=False)))
        else:
            items.append((str(key), _scalar(value)))
    return items


def _no_cookies() -> CookieJar:
    # One client serves every task: a cookie one answer sets must never reach another request.
    # (A bare CookieJar: httpx.Cookies(...) of one would copy it into a jar that accepts all.)
    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


def with_query(url: str, items: list[tuple[str, str]]) -> str:
    """`url` with `items` appended to the query it already has (kept as written)."""
    if not items:
        return url
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, urlencode(items)) if q)
    return urlunsplit(parts._replace(query=query, fragment=""))


class Runner:
    """Runs the targets of tasks in one queue process. Thread-safe: many threads call run() at once."""

    def __init__(self, config: Config, redis_client: Any) -> None:
        self.config = config
        self.redis = redis_client
        self.allowed = tuple(config.allowed_modules)
        size = max(1, int(config.concurrency))
        self.http = httpx.Client(
            transport=deadline.transport(limits=httpx.Limits(max_connections=size, max_keepalive_connections=size,
                                                             keepalive_expiry=30.0), verify=True),
            timeout=float(config.url_timeout), follow_redirects=False,
            headers={"User-Agent": USER_AGENT}, cookies=_no_cookies())

    # -- public ---------------------------------------------------------------------------
    def run(self, task: Task) -> Outcome:
        """Execute the task's target once and classify the result. Never raises."""
        try:
            if task.call:
                return self._run_call(task)
            if task.url:
                return self._run_url(task)
            if task.push:
                return self._run_push(task)
            return Outcome("failed", "task has no call, url or push target")
        except Exception as exc:  # a bug here must cost a retry, not a worker thread
            return Outcome("retry", f"internal error in delayd: {describe_exception(exc)}")

    def run_callback(self, task: Task) -> str:
        """Call the task's callback once; '' if it ran (or there is none), else the error. Never raises."""
        if not task.callback:
            return ""
        try:
            try:
                func = resolve(task.callback, self.allowed)
            except TargetRefused as exc:
                return f"callback refused: {exc}"
            except TargetUnavailable as exc:
                return f"callback failed: {exc}"
            try:
                func(task)
            except (Exception, SystemExit) as exc:
                return f"callback failed: {describe_exception(exc, skip=1)}"
            return ""
        except Exception as exc:
            return f"callback failed: internal error in delayd: {describe_exception(exc)}"

    def close(self) -> None:
        """Close the HTTP connection pool (the Redis client belongs to the caller)."""
        self.http.close()

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- targets --------------------------------------------------------------------------
    def _run_call(self, task: Task) -> Outcome:
        try:
            func = resolve(task.call, self.allowed)
        except TargetRefused as exc:
            return Outcome("failed", f"call refused: {exc}")
        except TargetUnavailable as exc:
            return Outcome("retry", str(exc))
        return _call(func, task)

    def _run_push(self, task: Task) -> Outcome:
        try:
            self.redis.rpush(task.push, task.to_json())
        except (redis.RedisError, OSError) as exc:
            return Outcome("retry", f"Redis error pushing to {task.push!r}: {type(exc).__name__}: {_clip(str(exc))}")
        return OK

    def _request_args(self, task: Task) -> dict[str, Any]:
        """Method, URL, headers and body of the request for this run."""
        key = f"{task.topic}:{task.id}:{task.runs}"
        # topic and id may be any non-space text; UTF-8 bytes keep the key exact.
        headers: dict[str, Any] = {"Idempotency-Key": key if key.isascii() else key.encode()}
        args: dict[str, Any] = {"method": task.method, "url": task.url, "headers": headers}
        if task.method == "GET":
            args["url"] = with_query(task.url, form_items(task.params))
        elif task.body == "json":
            args["content"] = json.dumps(task.params, separators=(",", ":"), ensure_ascii=False).encode()
            headers["Content-Type"] = "application/json"
        else:
            args["content"] = urlencode(form_items(task.params)).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        return args

    def _run_url(self, task: Task) -> Outcome:
        timeout = float(task.timeout or self.config.url_timeout)
        cap = int(self.config.max_response_bytes)
        body = bytearray()
        over = False
        try:
            # One deadline for the whole request: pool wait, connect, sending, and every read.
            with deadline.total(timeout), self.http.stream(timeout=timeout, **self._request_args(task)) as resp:
                for chunk in resp.iter_bytes():
                    body += chunk
                    if len(body) > cap:
                        over = True
                        del body[cap:]
                        break
                status, location = resp.status_code, resp.headers.get("location", "")
        except httpx.ConnectTimeout:
            return Outcome("retry", f"timeout after {timeout:g} s connecting")
        except httpx.PoolTimeout:
            return Outcome("retry", f"timeout after {timeout:g} s waiting for a free connection "
                                    f"(all {self.config.concurrency} in use)")
        except httpx.TimeoutException:
            return Outcome("retry", f"timeout after {timeout:g} s waiting for the answer")
        except httpx.ConnectError as exc:
            return Outcome("retry", f"connection failed: {_clip(str(exc)) or type(exc).__name__}")
        except httpx.HTTPError as exc:  # protocol errors, resets, invalid URLs…
            return Outcome("retry", f"request failed: {type(exc).__name__}: {_clip(str(exc))}")

        text = body.decode("utf-8", "replace")
        excerpt = _clip(text) or "(empty answer)"
        if 200 <= status < 300:
            if over:
                return Outcome("retry", f"HTTP {status}: answer larger than {cap} bytes "
                                        f"(max_response_bytes), not success or fail: {excerpt}")
            answer = text.strip().lstrip("\ufeff").strip().lower()
            if answer == "success":
                return OK
            if answer == "fail":
                return Outcome("failed", f"HTTP {status}: the URL answered fail")
            return Outcome("retry", f"HTTP {status}: answer is not success or fail: {excerpt}")
        if 300 <= status < 400:
            return Outcome("retry", f"HTTP {status}: redirect to {_clip(location) or '(no location)'} "
                                    f"not followed: {excerpt}")
        return Outcome("retry", f"HTTP {status}: {excerpt}")


__all__ = ["Outcome", "Runner", "outcome_of", "describe_exception", "form_items", "with_query", "resolve",
           "TargetRefused", "TargetUnavailable", "USER_AGENT", "HOW_TO_ALLOW"]
