"""One run of a task: call a function or push to a list, and map the result.

The queue worker calls `Runner.run(task)` from its worker threads and enforces the hard
task timeout itself; this module only executes and classifies (URL targets run on the
queue's event loop: delayd.targets.url):

- `ok`     handler returned "success" (any case) or True; URL answered 2xx `success`;
           the push landed;
- `failed` handler returned "fail" or False; URL answered 2xx `fail`; the target is not
           allowed to run (no more runs: a task is data, never code);
- `retry`  anything else: another value, an exception, a target that cannot be imported
           (yet), a timeout, a non-2xx answer, a connection or Redis error.

A `call`/`callback` target is checked against `allowed_modules` *before* anything is
imported, and is resolved with plain `importlib` + `getattr`: nothing read from Redis is
ever eval-ed or unpickled. A queue process puts the directory delayd was started from and
`pythonpath` first on sys.path (`use_import_path`); a target that cannot be found says
where it was looked for.
"""
from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import sys
import threading
import traceback
import types
from dataclasses import dataclass
from typing import Any, Callable

from delayd.config import Config
from delayd.model.task import Task, TaskError, check_target, module_allowed
from delayd.store.connection import REDIS_ERRORS
from delayd.store.steps import command
from delayd.store.transport import Transport

HOW_TO_ALLOW = "add it to allowed_modules in the config or DELAYD_ALLOWED_MODULES"
EXCERPT = 200          # characters of an answer or a value quoted in an error
TRACE_FRAMES = 3       # frames of a handler's traceback kept in the error


@dataclass(frozen=True)
class Outcome:
    """The result of one run: `kind` is 'ok', 'failed', 'retry', or 'defer' (not run: the
    URL's circuit is open); `error` says why (one line). URL runs add the HTTP `status`,
    the `answer` (excerpt) of a success, and `wait`: seconds before which the next run
    may not start (Retry-After; for defer, the time until the circuit's probe). `asked`: a
    retry the handler's own answer asked for (SPEC section 2: anything but success or fail),
    no error of the run, so logged at INFO rather than WARNING."""

    kind: str
    error: str = ""
    status: int | None = None
    wait: float = 0.0
    answer: str = ""
    asked: bool = False


OK = Outcome("ok")


def clip(text: str, limit: int = EXCERPT) -> str:
    """Whitespace collapsed to single spaces (one line), cut to `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _safe_repr(value: Any) -> str:
    try:
        return clip(repr(value))
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
    return Outcome("retry", f"handler returned {_safe_repr(value)}: not done yet "
                            "(done: 'success' or True; failed: 'fail' or False)", asked=True)


def describe_exception(exc: BaseException, skip: int = 0) -> str:
    """`Type: message | last frames: file.py:12 in func: code > …`, on one line.

    `skip` drops that many outer frames (the frame of delayd that called the handler).
    """
    try:
        message = str(exc)
    except Exception:
        message = ""
    text = type(exc).__name__ + (f": {clip(message, 500)}" if message.strip() else "")
    frames = [f for f in traceback.extract_tb(exc.__traceback__)[skip:]
              if not f.filename.startswith("<frozen ")][-TRACE_FRAMES:]  # importlib's own frames say nothing
    if frames:
        where = " > ".join(
            f"{os.path.basename(f.filename)}:{f.lineno} in {f.name}" + (f": {clip(f.line, 80)}" if f.line else "")
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
_import_path: tuple[str, ...] = ()  # what use_import_path put first on sys.path


def use_import_path(entries: tuple[str, ...]) -> None:
    """Put `entries` (Config.import_path) first on sys.path, in order, for this process."""
    global _import_path
    sys.path[:] = [*entries, *(p for p in sys.path if p not in entries)]
    _import_path = entries
    importlib.invalidate_caches()


def searched() -> str:
    """Where a missing module was looked for, for an error message."""
    first = f"first: {', '.join(_import_path)} (the start directory and pythonpath), then " if _import_path else ""
    return f"searched {first}PYTHONPATH and site-packages"


def import_module(module_name: str, of: str = "") -> types.ModuleType:
    """Import a target's (`of`: " of 'mod:func'") or preload's module; TargetUnavailable says why
    not, and where it looked for a module that was not found."""
    try:
        return importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:  # ImportError, SyntaxError, whatever the module raises
        where = ""
        if isinstance(exc, ImportError):
            importlib.invalidate_caches()  # so that code deployed before the next run is found
            where = f" ({searched()})" if isinstance(exc, ModuleNotFoundError) else ""
        # skip=2: this frame and importlib.import_module's; the module's own frames stay
        raise TargetUnavailable(f"cannot import module {module_name!r}{of}: {describe_exception(exc, skip=2)}"
                                f"{where}") from None


def _load(target: str) -> Callable[..., Any]:
    module_name, _, path = target.partition(":")
    module = obj = import_module(module_name, of=f" of {target!r}")
    for part in path.split("."):
        if part.startswith("__"):
            raise TargetRefused(f"{target!r} names {part!r}: a target must be a function or class "
                           "of the module, not a dunder attribute")
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetUnavailable(f"module {module_name!r} has no attribute {path!r} (for {target!r}; the "
                                    f"module was loaded from {getattr(module, '__file__', None) or '?'})") from None
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


def _call(func: Callable[..., Any], task: Task, awaiting: Callable[[Any], Any]) -> Outcome:
    try:
        value = func(task)
        if inspect.iscoroutine(value):
            value = awaiting(value)
    except (Exception, SystemExit) as exc:
        return Outcome("retry", describe_exception(exc, skip=1))
    return outcome_of(value)


class Runner:
    """Runs the call and push targets of tasks in one queue process. Thread-safe: many threads
    call run() at once. An `async def` target or callback runs on `loop` (the queue process's
    event loop, set by its delayd.targets.url.engine.Engine) while the calling thread waits for it,
    for at most task_timeout."""

    def __init__(self, config: Config, transport: Transport | None) -> None:
        self.config = config
        self.transport = transport  # the store's (the one road to Redis): a push target's RPUSH goes on it
        self.allowed = tuple(config.allowed_modules)
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- public ---------------------------------------------------------------------------
    def run(self, task: Task) -> Outcome:
        """Execute the task's call or push target once and classify the result. Never raises."""
        try:
            if task.call:
                return self._run_call(task)
            if task.push:
                return self._run_push(task)
            return Outcome("failed", "task has no call or push target (URL tasks run on the event loop)")
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
                value = func(task)
                if inspect.iscoroutine(value):
                    self.awaiting(value)
            except (Exception, SystemExit) as exc:
                return f"callback failed: {describe_exception(exc, skip=1)}"
            return ""
        except Exception as exc:
            return f"callback failed: internal error in delayd: {describe_exception(exc)}"

    def awaiting(self, coro: Any) -> Any:
        """Run an async target's coroutine on the loop and wait for its value (at most
        task_timeout: then it is cancelled there, and TimeoutError raised here)."""
        if self.loop is None or not self.loop.is_running():
            coro.close()
            raise RuntimeError("an async def target needs the queue process's event loop, which is not running")
        return asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, float(self.config.task_timeout)),
                                                self.loop).result()

    # -- targets --------------------------------------------------------------------------
    def _run_call(self, task: Task) -> Outcome:
        try:
            func = resolve(task.call, self.allowed)
        except TargetRefused as exc:
            return Outcome("failed", f"call refused: {exc}")
        except TargetUnavailable as exc:
            return Outcome("retry", str(exc))
        return _call(func, task, self.awaiting)

    def _run_push(self, task: Task) -> Outcome:
        try:
            self.transport.send(command("RPUSH", task.push, task.to_json()))
        except (*REDIS_ERRORS, OSError) as exc:
            return Outcome("retry", f"Redis error pushing to {task.push!r}: {type(exc).__name__}: {clip(str(exc))}")
        return OK


__all__ = ["Outcome", "Runner", "outcome_of", "describe_exception", "clip", "resolve",
           "TargetRefused", "TargetUnavailable", "HOW_TO_ALLOW"]
