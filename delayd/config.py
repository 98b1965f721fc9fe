"""Configuration: defaults, then the TOML file, then DELAYD_* variables, then flags.

Every option NAME has the variable DELAYD_<NAME> (`env_var`); a DELAYD_* variable
that is neither an option's nor one of NOT_OPTIONS is reported in `Config.warnings`
with the closest name, as an unknown key in the file is an error.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import difflib
import ipaddress
import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from delayd.model.task import DEFAULT_RETRIES, MAX_RETRIES, TaskError, check_key_name

MAX_BUCKETS = 1024  # the most buckets a store may have (each is a set of keys and a bucket process)
MAX_PARAMS = 960 * 1024  # the most params_limit may be: a task's spec, params and the rest, stays under 1 MiB

SYSTEM_CONFIG = Path("/etc/delayd/delayd.toml")


class ConfigError(ValueError):
    """A configuration that cannot be used. The message is one line."""


WHSEC_PREFIX = "whsec_"
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def signing_key(secret: str, what: str = "url_signing_secret") -> bytes:
    """The HMAC key of a url_signing_secret, read exactly as the standardwebhooks libraries read it
    (an optional `whsec_` prefix, then base64, padding optional), so that a receiver verifies with
    the very string the daemon was given. Unlike them, text that is not base64 is refused (they
    would silently drop the characters outside the alphabet): ConfigError naming `what`, never
    quoting the secret."""
    text = secret[len(WHSEC_PREFIX):] if secret.startswith(WHSEC_PREFIX) else secret
    if not _BASE64.fullmatch(text):
        raise ConfigError(f"{what} must be base64 (optionally prefixed whsec_), as Standard Webhooks secrets are")
    try:
        key = base64.b64decode(text + "==")  # as the libraries do: padding may be left out
    except (binascii.Error, ValueError):
        raise ConfigError(f"{what} is not valid base64") from None
    if not key:
        raise ConfigError(f"{what} decodes to no bytes")
    return key


def signing_keys(value: Any) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """url_signing_keys as (name, (secret, ...)) pairs, newest secret first: from the file's table
    (`name = "secret"` or `name = ["new", "old"]`) or the variable's `name=secret[ secret…],name=secret`.
    Names follow the task field's rule (delayd.model.task.check_key_name); every secret is checked
    as url_signing_secret is. ConfigError names the key, never a secret."""
    if isinstance(value, str):
        pairs = [entry.strip().partition("=") for entry in value.split(",") if entry.strip()]
        if any(not sep for _, sep, _ in pairs):
            raise ConfigError("url_signing_keys must be name=secret[ secret…],name=secret")
        items = [(name.strip(), secrets.split()) for name, _, secrets in pairs]
    elif isinstance(value, dict):
        items = [(name, [secrets] if isinstance(secrets, str) else secrets) for name, secrets in value.items()]
    else:
        raise ConfigError("url_signing_keys must be a table of name = secret or [secrets, newest first]")
    keys: dict[str, tuple[str, ...]] = {}
    for name, secrets in items:
        try:
            check_key_name(name)
        except TaskError as exc:
            raise ConfigError(f"url_signing_keys: {exc}") from None
        if name in keys:
            raise ConfigError(f"url_signing_keys: key {name!r} is given twice")
        if not isinstance(secrets, list) or not secrets or not all(isinstance(s, str) for s in secrets):
            raise ConfigError(f"url_signing_keys: key {name!r} needs a secret or a list of secrets")
        for n, secret in enumerate(secrets, 1):
            signing_key(secret, f"url_signing_keys: secret {n} of key {name!r}")
        keys[name] = tuple(secrets)
    return tuple(keys.items())


def option(default: Any, help: str, **kwargs: Any) -> Any:
    """A Config field with its one-line help (shown by `delayd start --help`)."""
    return field(default=default, metadata={"help": help}, **kwargs)


@dataclass
class Config:
    """Every option, with its default and help: the one table that the environment
    variables, the file's keys and `delayd start --help` come from (`etc/delayd.toml`
    documents each one at length)."""

    redis_url: str | None = option(None, "Redis URL; unset: the embedded Redis of state_dir")
    state_dir: str = option("", "pidfile, status, log and embedded Redis data; unset: ~/.local/state/delayd")
    redis_socket_mode: str = option("700", "permissions of the embedded Redis's unix socket (octal; 770: "
                                           "the daemon's group may add tasks too)")
    prefix: str = option("delayd:", "prefix of every key in Redis")
    name: str = option("", "shown in process titles when several daemons share a host")
    buckets: int = option(4, "bucket processes (fixed for a store once tasks exist)")
    queues: int = option(2, "queue processes")
    concurrency: int = option(32, "call and push tasks one queue process runs at once")
    priority_weights: tuple = option((5, 3, 2), "claims per round for priority 3, 2, 1")
    allowed_modules: tuple = option(("delayd.examples",), "module prefixes call/callback targets may name")
    preload: tuple = option((), "modules queue processes import at start (must be allowed)")
    pythonpath: tuple = option((), "directories put first on the import path of call targets, after the "
                                   "directory delayd was started from (':'-separated; relative to it)")
    lease: float | None = option(None, "seconds a claim stays leased (renewed while running); "
                                       "unset: task_timeout + max(30 s, 20 %)")
    task_timeout: float = option(30.0, "seconds a handler may run before it is abandoned")
    retries: int = option(DEFAULT_RETRIES, "retries (backoff 1, 2, 4 … s) of a task added without intervals/every/cron "
                              "or retries of its own")
    retry_max_delay: float = option(3600.0, "cap on the backoff between those retries (seconds)")
    url_timeout: float = option(10.0, "default per-request timeout of url tasks (seconds)")
    max_response_bytes: int = option(65536, "how much of a URL's answer is read (bytes)")
    url_concurrency: int = option(1000, "URL requests in flight per queue process (its event loop)")
    url_host_concurrency: int = option(16, "of which at most this many per scheme+host+port")
    url_breaker_failures: int = option(5, "consecutive connection errors/timeouts of one queue process's "
                                       "requests that open a host's circuit in that process")
    url_breaker_cooldown: float = option(30.0, "seconds an open circuit sends nothing, then one probe")
    url_retry_after_max: float = option(3600.0, "cap on a 429/503 answer's Retry-After (seconds)")
    url_disable_after: float = option(0.0, "disable a URL host after this many seconds of continuous failure "
                                           "(delayd hosts enable brings it back; 0: never)")
    url_signing_secret: str = option("", "Standard Webhooks secret (base64, whsec_ optional); unset: "
                                         "requests are not signed", repr=False)
    url_signing_keys: tuple = option((), "named Standard Webhooks keys a url task picks with signing_key: "
                                         "name=secret[ secret…],… (newest first; all sign)", repr=False)
    url_deny_private: bool = option(False, "refuse URLs resolving to loopback/private/link-local addresses")
    attempts_kept: int = option(10, "runs kept in a task's delivery log (get: attempts)")
    graceful_timeout: float = option(30.0, "seconds a stop waits for tasks in hand")
    heartbeat_timeout: float = option(30.0, "a child silent this long (seconds) is killed and replaced")
    retention: float = option(604800.0, "seconds finished tasks stay readable")
    params_limit: int = option(65536, "bytes of JSON params a task may carry")
    pidfile: str = option("", "pidfile of the master; unset: state_dir/delayd.pid")
    log_file: str = option("", "log file; unset: state_dir/delayd.log when daemonized, else stderr")
    log_level: str = option("INFO", "DEBUG, INFO, WARNING, ERROR or CRITICAL")
    log_format: str = option("kv", "kv or json")
    metrics_port: int | None = option(None, "port of the Prometheus endpoint /metrics; unset: off")
    metrics_bind: str = option("127.0.0.1", "address the metrics endpoint binds to")
    web_port: int | None = option(None, "port of the dashboard, supervised as `delayd: web`; unset: off")
    web_bind: str = option("127.0.0.1", "address the dashboard binds to")
    web_token: str = option("", "token the dashboard asks for; required for a non-loopback web_bind",
                            repr=False)
    producer_token: str = option("", "Bearer token of HTTP producers: only POST /api/tasks, DELETE and GET "
                                     "/api/tasks/TOPIC/ID, GET /api/openapi.json; unset: off", repr=False)
    web_readonly: bool = option(False, "the dashboard shows, but every action is refused (403)")
    web_forwarded_allow_ips: tuple = option((), "proxies (addresses or networks, * = any) whose X-Forwarded-Proto "
                                                "and X-Forwarded-For the dashboard believes; unset: none")
    web_trace_url: str = option("", "a tracing UI's page of a trace: a URL with {trace_id}, linked from a task's "
                                    "page when the task carries a trace; unset: no link")
    source: str = field(default="", compare=False)  # the file read, if any
    start_dir: str = field(default="", compare=False, repr=False)  # where `delayd start` ran (cwd when loaded)
    explicit: frozenset = field(default=frozenset(), compare=False, repr=False)  # options set by file/env/flag
    warnings: tuple = field(default=(), compare=False, repr=False)  # one line each: unknown DELAYD_* variables
    lease_derived: bool = field(default=False, init=False, compare=False, repr=False)  # lease follows task_timeout

    def __post_init__(self) -> None:
        if not self.state_dir:
            self.state_dir = str(Path.home() / ".local" / "state" / "delayd")
        if not self.start_dir:
            self.start_dir = current_dir()
        for name in PATH_OPTIONS:  # the daemonized master works in state_dir: a relative path would move
            value = getattr(self, name)
            if value and self.start_dir:
                setattr(self, name, absolute(value, self.start_dir))
        if self.lease is None:
            self.lease, self.lease_derived = default_lease(self.task_timeout), True

    def validate(self) -> "Config":
        """Raise ConfigError for a value that cannot work; return self."""
        def positive(name: str, limit: float = 1e9) -> None:
            value = getattr(self, name)
            if not 0 < value <= limit:
                raise ConfigError(f"{name} must be > 0 and <= {limit:g}, got {value!r}")

        for name, limit in (("buckets", MAX_BUCKETS), ("queues", 256), ("concurrency", 4096),
                            ("url_concurrency", 100_000), ("url_host_concurrency", 100_000),
                            ("url_breaker_failures", 1_000_000)):
            positive(name, limit)
        for name in ("url_breaker_cooldown", "url_retry_after_max", "retry_max_delay"):
            positive(name)
        if not 0 <= self.retries <= MAX_RETRIES:
            raise ConfigError(f"retries must be >= 0 and <= {MAX_RETRIES}, got {self.retries!r}")
        if not 0 <= self.url_disable_after <= 1e9:
            raise ConfigError(f"url_disable_after must be >= 0 and <= 1e9, got {self.url_disable_after!r}")
        if not 0 <= self.attempts_kept <= 1000:
            raise ConfigError(f"attempts_kept must be >= 0 and <= 1000, got {self.attempts_kept!r}")
        if self.url_signing_secret:
            signing_key(self.url_signing_secret)
        for name in ("lease", "task_timeout", "url_timeout", "graceful_timeout", "heartbeat_timeout",
                     "retention", "max_response_bytes"):
            positive(name)
        if not 0 < self.params_limit <= MAX_PARAMS:
            raise ConfigError(f"params_limit must be > 0 and <= {MAX_PARAMS} (the add script refuses a task's "
                              f"spec over 1 MiB, docs/protocol.md), got {self.params_limit!r}")
        if self.lease <= self.task_timeout:  # only a lease set explicitly can be (see default_lease)
            raise ConfigError(f"lease ({self.lease:g} s) must be longer than task_timeout "
                              f"({self.task_timeout:g} s), or a running task could be taken twice; "
                              "leave lease unset and it follows task_timeout")
        if not re.fullmatch(r"0?[0-7]{3}", self.redis_socket_mode):
            raise ConfigError(f"redis_socket_mode must be octal permissions like 700 or 770, "
                              f"got {self.redis_socket_mode!r}")
        if "{" in self.prefix or "}" in self.prefix or not self.prefix:
            raise ConfigError("prefix must be non-empty and must not contain '{' or '}'")
        if len(self.priority_weights) != 3 or any(w < 1 for w in self.priority_weights):
            raise ConfigError("priority_weights must be three integers >= 1 (priority 3, 2, 1)")
        if self.log_format not in ("kv", "json"):
            raise ConfigError(f"log_format must be kv or json, got {self.log_format!r}")
        if self.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ConfigError(f"log_level must be DEBUG, INFO, WARNING or ERROR, got {self.log_level!r}")
        self.log_level = self.log_level.upper()
        from delayd.model.task import module_allowed
        for module in self.preload:
            if not module_allowed(module + ":x", self.allowed_modules):
                raise ConfigError(f"preload module {module!r} is not in allowed_modules")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ConfigError(f"metrics_port must be a TCP port, got {self.metrics_port!r}")
        if self.web_port is not None and not 0 <= self.web_port <= 65535:
            raise ConfigError(f"web_port must be a TCP port, got {self.web_port!r}")
        if self.producer_token and self.producer_token == self.web_token:
            raise ConfigError("producer_token must differ from web_token (it allows only the producer API)")
        trace_url = self.web_trace_url
        if trace_url and (not trace_url.startswith(("https://", "http://")) or "{trace_id}" not in trace_url):
            raise ConfigError(f"web_trace_url must be an http(s) URL with {{trace_id}} in it, got {trace_url!r}")
        for proxy in self.web_forwarded_allow_ips:
            if proxy != "*" and not _is_network(proxy):
                raise ConfigError(f"web_forwarded_allow_ips: {proxy!r} is not an IP address, a network or *")
        return self

    @property
    def pid_path(self) -> Path:
        return Path(self.pidfile) if self.pidfile else Path(self.state_dir) / "delayd.pid"

    @property
    def log_path(self) -> Path:
        return Path(self.log_file) if self.log_file else Path(self.state_dir) / "delayd.log"

    @property
    def spans_path(self) -> Path:
        """Where the `console` trace exporter writes spans, one JSON line each (delayd.tracing): beside
        the log, not in it."""
        return Path(self.state_dir) / "spans.jsonl"

    @property
    def import_path(self) -> tuple[str, ...]:
        """What the daemon puts first on sys.path for call targets: the start directory, then
        `pythonpath` (relative entries taken from the start directory), as gunicorn and rq do. Not
        the state directory (systemd's WorkingDirectory): the embedded Redis writes files there."""
        state = os.path.realpath(self.state_dir)
        found = [self.start_dir] if self.start_dir and os.path.realpath(self.start_dir) != state else []
        found += [os.path.normpath(os.path.join(self.start_dir, entry)) for entry in self.pythonpath]
        return tuple(dict.fromkeys(found))

    @property
    def retention_ms(self) -> int:
        return int(self.retention * 1000)

    @property
    def lease_ms(self) -> int:
        return int(self.lease * 1000)


def _is_network(text: str) -> bool:
    try:
        ipaddress.ip_network(text, strict=False)
    except ValueError:
        return False
    return True


def absolute(path: str, start_dir: str) -> str:
    """`path` taken from `start_dir` when it is relative (`~` expanded first)."""
    return os.path.normpath(os.path.join(start_dir, os.path.expanduser(path)))


def current_dir() -> str:
    """The working directory, or '' when it was removed under us."""
    try:
        return os.getcwd()
    except OSError:
        return ""


def default_lease(task_timeout: float) -> float:
    """The lease when none is set: longer than the task timeout by 30 s or 20 %, whichever is more."""
    return task_timeout + max(30.0, 0.2 * task_timeout)


OPTIONS = tuple(f.name for f in fields(Config)
                if f.init and f.name not in ("source", "start_dir", "explicit", "warnings"))
ENV_PREFIX = "DELAYD_"
# DELAYD_* variables that delayd reads but that are not options (no warning for them)
NOT_OPTIONS = frozenset({"DELAYD_CONFIG", "DELAYD_PROC"})
_BOOLS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False,
          "": False}
_TYPES = {f.name: f.type for f in fields(Config)}
# the options whose values an error never quotes
SECRETS = frozenset({"url_signing_secret", "url_signing_keys", "web_token", "producer_token"})
LIST_SEPARATORS = {"pythonpath": ":"}  # how a variable spells a list; the others are comma-separated
PATH_OPTIONS = ("state_dir", "pidfile", "log_file")  # files the master opens again after it chdirs to state_dir


def env_var(option: str) -> str:
    """The environment variable of an option: DELAYD_ and the name in capitals."""
    return ENV_PREFIX + option.upper()


_ENV = {env_var(name): name for name in OPTIONS}


def closest(word: str, choices: list[str], spell: Callable[[str], str] = str) -> str:
    """' (did you mean X?)' naming the closest of `choices` (as `spell` writes it), or '' when none is close."""
    match = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {spell(match[0])}?)" if match else ""


def unknown_variables(env: Mapping[str, str]) -> tuple[str, ...]:
    """One warning per DELAYD_* variable that names no option (compared without the common prefix)."""
    known = [*OPTIONS, *(var[len(ENV_PREFIX):].lower() for var in sorted(NOT_OPTIONS))]
    return tuple(f"{var} is not a delayd option and is ignored"
                 f"{closest(var[len(ENV_PREFIX):].lower(), known, env_var)}"
                 for var in sorted(env) if var.startswith(ENV_PREFIX) and var not in _ENV and var not in NOT_OPTIONS)


def _coerce(name: str, value: Any, origin: str) -> Any:
    kind = _TYPES[name]
    try:
        if name == "url_signing_keys":
            return signing_keys(value)
        if kind == "tuple":
            if isinstance(value, str):
                value = [v.strip() for v in value.split(LIST_SEPARATORS.get(name, ",")) if v.strip()]
            if not isinstance(value, (list, tuple)):
                raise TypeError("a list is expected")
            return tuple(int(v) for v in value) if name == "priority_weights" else tuple(str(v) for v in value)
        if kind in ("int", "int | None"):
            if value in ("", None) and kind == "int | None":
                return None
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise TypeError("an integer is expected")
            return int(value)
        if kind == "bool":
            if isinstance(value, str) and value.strip().lower() in _BOOLS:
                return _BOOLS[value.strip().lower()]
            if not isinstance(value, bool):
                raise TypeError("true or false is expected")
            return value
        if kind in ("float", "float | None"):
            if value in ("", None) and kind == "float | None":
                return None
            if isinstance(value, bool):
                raise TypeError("a number is expected")
            return float(value)
        if kind in ("str", "str | None"):
            if not isinstance(value, str):
                raise TypeError("a string is expected")
            return (value or None) if kind == "str | None" else value
    except ConfigError as exc:
        raise ConfigError(f"{origin}: {exc}") from None
    except (TypeError, ValueError) as exc:
        shown = "(hidden)" if name in SECRETS else repr(value)
        raise ConfigError(f"{origin}: {name} = {shown} is not valid ({exc})") from None
    return value


def load(path: str | None = None, env: Mapping[str, str] | None = None, start_dir: str = "",
         **overrides: Any) -> Config:
    """Build the configuration: defaults < file < environment < `overrides` (flags); `start_dir`
    (default: the working directory) is where a relative file name, `state_dir`, `pidfile`, `log_file` and
    `pythonpath` entries start from."""
    env = os.environ if env is None else env
    start_dir = start_dir or current_dir()
    values: dict[str, Any] = {}
    path = path or env.get("DELAYD_CONFIG") or (str(SYSTEM_CONFIG) if SYSTEM_CONFIG.exists() else None)
    if path:
        path = absolute(path, start_dir) if start_dir else path
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        for name, value in data.items():
            if name not in OPTIONS:
                raise ConfigError(f"config file {path}: unknown option {name!r}{closest(name, list(OPTIONS))}")
            values[name] = _coerce(name, value, path)
        values["source"] = path
    for var, name in _ENV.items():
        if var in env:
            values[name] = _coerce(name, env[var], var)
    for name, value in overrides.items():
        if value is not None:
            values[name] = _coerce(name, value, "--" + name.replace("_", "-"))
    return Config(**values, start_dir=start_dir, explicit=frozenset(values),
                  warnings=unknown_variables(env)).validate()


@dataclass(frozen=True)
class Recipe:
    """How a configuration is built: the file named (None: DELAYD_CONFIG's, else the system's), the
    DELAYD_* variables, the directory relative paths start from, and the flags. Called, it builds
    the configuration again: a reload (SIGHUP) does with the start's recipe, and `delayd restart`
    starts on it (the master keeps it in its state directory: delayd.daemon.start_record)."""
    path: str | None
    env: Mapping[str, str]
    start_dir: str
    flags: Mapping[str, Any]

    def __call__(self) -> Config:
        return load(self.path, self.env, self.start_dir, **self.flags)

    def over(self, running: "Recipe") -> "Recipe":
        """This recipe on top of a running daemon's, as `delayd restart` builds its config: this one's
        file, variables and flags where it has them, else the running one's; the running one's start
        directory (so that call targets import from the same place)."""
        path = self.path or (None if "DELAYD_CONFIG" in self.env else running.path)
        flags = {**running.flags, **{name: value for name, value in self.flags.items() if value is not None}}
        return Recipe(path, {**running.env, **self.env}, running.start_dir, flags)


def loader(path: str | None = None, **overrides: Any) -> Recipe:
    """The recipe of this file, the DELAYD_* variables and working directory as they are now, and
    these flags (`overrides`): what a reload (SIGHUP) builds the config from again. Relative file
    names are made absolute here, so that the recipe reads the same files from anywhere."""
    start_dir = current_dir()
    env = {name: value for name, value in os.environ.items() if name.startswith(ENV_PREFIX)}
    for name in ("DELAYD_CONFIG", *map(env_var, PATH_OPTIONS)):
        if env.get(name) and start_dir:
            env[name] = absolute(env[name], start_dir)
    return Recipe(absolute(path, start_dir) if path and start_dir else path, env, start_dir, overrides)


def replace(config: Config, **changes: Any) -> Config:
    if config.lease_derived:
        changes.setdefault("lease", None)  # still follows task_timeout
    return dataclasses.replace(config, **changes).validate()
