"""Configuration: every option has its DELAYD_ variable, unknown ones are warned about, the lease default."""
from __future__ import annotations

import pytest
from daemon_helper import delayd

from delayd import config as config_mod

SAMPLE_VALUES = {"str": "x", "str | None": "redis://127.0.0.1:1/0", "int": "7", "int | None": "9464",
                 "float": "45", "float | None": "400", "tuple": "delayd.examples", "bool": "1"}


@pytest.mark.parametrize("name", config_mod.OPTIONS)
def test_every_option_has_its_variable(name):
    kind = config_mod._TYPES[name]
    value = {"priority_weights": "4,2,1", "log_level": "debug", "log_format": "json",
             "prefix": "p:", "metrics_bind": "::1", "allowed_modules": "delayd", "redis_socket_mode": "770",
             "url_signing_secret": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
             "url_signing_keys": "acme=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
             "web_forwarded_allow_ips": "10.0.0.0/8",
             "web_trace_url": "https://jaeger.example/trace/{trace_id}"}.get(name, SAMPLE_VALUES[kind])
    env = {f"DELAYD_{name.upper()}": value}
    loaded = config_mod.load(None, env=env)
    assert name in loaded.explicit
    assert getattr(loaded, name) != getattr(config_mod.Config(), name), f"DELAYD_{name.upper()} was not read"
    assert not loaded.warnings


def test_the_six_that_had_no_variable():
    env = {"DELAYD_HEARTBEAT_TIMEOUT": "5", "DELAYD_URL_TIMEOUT": "3", "DELAYD_MAX_RESPONSE_BYTES": "100",
           "DELAYD_PARAMS_LIMIT": "200", "DELAYD_PRIORITY_WEIGHTS": "3,2,1", "DELAYD_METRICS_BIND": "0.0.0.0"}
    c = config_mod.load(None, env=env)
    assert (c.heartbeat_timeout, c.url_timeout, c.max_response_bytes, c.params_limit, c.priority_weights,
            c.metrics_bind) == (5.0, 3.0, 100, 200, (3, 2, 1), "0.0.0.0")


def test_unknown_variable_is_a_warning_naming_the_closest_option():
    c = config_mod.load(None, env={"DELAYD_QUEUS": "3", "DELAYD_HEARTBEAT": "3", "DELAYD_XYZZY": "1",
                                   "DELAYD_PROC": "master", "DELAYD_CONFIG": "", "OTHER": "1"})
    assert c.queues == config_mod.Config().queues
    assert len(c.warnings) == 3, c.warnings
    by_var = {w.split()[0]: w for w in c.warnings}
    assert "did you mean DELAYD_QUEUES?" in by_var["DELAYD_QUEUS"]
    assert "did you mean DELAYD_HEARTBEAT_TIMEOUT?" in by_var["DELAYD_HEARTBEAT"]
    assert "did you mean" not in by_var["DELAYD_XYZZY"]


def test_unknown_file_key_names_the_closest_option(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("queus = 3\n")
    with pytest.raises(config_mod.ConfigError, match="did you mean queues"):
        config_mod.load(str(path), env={})


@pytest.mark.system
def test_the_cli_prints_the_warning(redis_url):
    out = delayd("stats", DELAYD_QUEUS="3")
    assert out.stderr.strip() == ("delayd: warning: DELAYD_QUEUS is not a delayd option and is ignored "
                                  "(did you mean DELAYD_QUEUES?)")


def test_default_lease_follows_the_task_timeout():
    assert config_mod.load(None, env={}).lease == 60.0
    long = config_mod.load(None, env={"DELAYD_TASK_TIMEOUT": "300"})
    assert long.lease == 360.0 and long.lease_derived
    assert config_mod.load(None, env={"DELAYD_TASK_TIMEOUT": "10"}).lease == 40.0
    assert config_mod.replace(long, task_timeout=1000).lease == 1200.0  # still follows it
    assert config_mod.load(None, env={"DELAYD_LEASE": "", "DELAYD_TASK_TIMEOUT": "300"}).lease == 360.0


def test_an_explicit_lease_not_longer_than_the_timeout_is_refused():
    with pytest.raises(config_mod.ConfigError, match="lease"):
        config_mod.load(None, env={"DELAYD_TASK_TIMEOUT": "300", "DELAYD_LEASE": "300"})
    explicit = config_mod.load(None, env={"DELAYD_TASK_TIMEOUT": "300", "DELAYD_LEASE": "301"})
    assert explicit.lease == 301.0 and not explicit.lease_derived
    with pytest.raises(config_mod.ConfigError, match="lease"):
        config_mod.replace(explicit, task_timeout=400)


def test_params_limit_stays_under_what_the_add_script_takes():
    """add.lua refuses a spec over 1 MiB whatever the client allows: a bigger params_limit would let
    tasks pass the client's check and fail in Redis."""
    assert config_mod.load(None, env={"DELAYD_PARAMS_LIMIT": str(960 * 1024)}).params_limit == 960 * 1024
    for value in ("0", str(960 * 1024 + 1), "2000000"):
        with pytest.raises(config_mod.ConfigError, match="params_limit must be > 0 and <= 983040 .*1 MiB"):
            config_mod.load(None, env={"DELAYD_PARAMS_LIMIT": value})


@pytest.mark.parametrize("secret", ["not base64!", "whsec_***", "whsec_", "===="])
def test_a_signing_secret_that_is_not_base64_is_refused_without_being_quoted(secret):
    with pytest.raises(config_mod.ConfigError) as err:
        config_mod.load(None, env={"DELAYD_URL_SIGNING_SECRET": secret})
    assert "url_signing_secret" in str(err.value)
    assert secret.removeprefix("whsec_") not in str(err.value) or not secret.removeprefix("whsec_")


def test_the_signing_secret_is_not_in_the_config_repr():
    loaded = config_mod.load(None, env={"DELAYD_URL_SIGNING_SECRET": "whsec_c2VjcmV0LXNpZ25pbmcta2V5"})
    assert "c2VjcmV0" not in repr(loaded)


@pytest.mark.system
def test_start_help_lists_every_option_with_its_variable_and_never_a_configured_secret():
    """`delayd start --help` (and restart, reload) list the options from the Config table itself."""
    secret, token = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "t0ken-never-shown"
    env = {"PATH": "/usr/bin:/bin", "DELAYD_URL_SIGNING_SECRET": secret, "DELAYD_WEB_TOKEN": token}
    for verb in ("start", "restart", "reload"):
        out = delayd(verb, "--help", env=env).stdout
        listed = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and
                  not line.startswith("   ") and len(line.split()) >= 3 and line.split()[1].startswith("DELAYD_")}
        assert set(listed) == set(config_mod.OPTIONS), (verb, set(config_mod.OPTIONS) ^ set(listed))
        for name, line in listed.items():
            assert line.split()[1] == config_mod.env_var(name)
        assert "url_host_concurrency  DELAYD_URL_HOST_CONCURRENCY  (default 16)" in out
        assert "attempts_kept  DELAYD_ATTEMPTS_KEPT  (default 10)" in out
        assert secret not in out and secret.removeprefix("whsec_") not in out and token not in out


def test_pythonpath_is_colon_separated_and_counts_from_the_start_directory():
    c = config_mod.load(None, env={"DELAYD_PYTHONPATH": "lib:/srv/shared:lib/../lib:"}, start_dir="/srv/app")
    assert c.pythonpath == ("lib", "/srv/shared", "lib/../lib")
    assert c.import_path == ("/srv/app", "/srv/app/lib", "/srv/shared")  # the start directory first, once each
    assert config_mod.replace(c, queues=3).import_path == c.import_path  # a reload's copy keeps the start directory
    in_state = config_mod.load(None, env={"DELAYD_STATE_DIR": "/srv/app/"}, start_dir="/srv/app")
    assert in_state.import_path == ()  # systemd's WorkingDirectory, where the embedded Redis writes files


NEW, OLD = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2VjcmV0LXNpZ25pbmcta2V5"


def test_signing_keys_from_the_variable_and_from_the_file_newest_secret_first(tmp_path):
    env = {"DELAYD_URL_SIGNING_KEYS": f" acme={NEW} {OLD} , globex={OLD}"}
    assert config_mod.load(None, env=env).url_signing_keys == (("acme", (NEW, OLD)), ("globex", (OLD,)))
    path = tmp_path / "c.toml"
    path.write_text(f'url_signing_keys = {{ acme = ["{NEW}", "{OLD}"], "shop.eu:2" = "{OLD}" }}\n')
    assert config_mod.load(str(path), env={}).url_signing_keys == (("acme", (NEW, OLD)), ("shop.eu:2", (OLD,)))
    path.write_text(f'queues = 1\n[url_signing_keys]\nacme = "{NEW}"\n')
    assert config_mod.load(str(path), env={}).url_signing_keys == (("acme", (NEW,)),)


@pytest.mark.parametrize("value, error", [
    (f"acme={NEW},acme={OLD}", "key 'acme' is given twice"),
    (f"acme={NEW}!", "secret 1 of key 'acme' must be base64"),
    (f"acme={NEW} {OLD}x*", "secret 2 of key 'acme' must be base64"),
    ("acme=", "key 'acme' needs a secret"),
    (NEW, "must be name=secret"),
    (f"a b={NEW}", "signing_key must be 1-128 letters"),
    (f"é={NEW}", "signing_key must be 1-128 letters"),
])
def test_bad_signing_keys_are_refused_naming_the_key_never_a_secret(value, error):
    with pytest.raises(config_mod.ConfigError) as err:
        config_mod.load(None, env={"DELAYD_URL_SIGNING_KEYS": value})
    message = str(err.value)
    assert message.startswith("DELAYD_URL_SIGNING_KEYS: ") and error in message and "\n" not in message
    for secret in (NEW, OLD):
        assert secret.removeprefix("whsec_")[:8] not in message


def test_signing_keys_are_not_in_the_config_repr():
    loaded = config_mod.load(None, env={"DELAYD_URL_SIGNING_KEYS": f"acme={NEW}"})
    assert NEW.removeprefix("whsec_")[:8] not in repr(loaded) and "acme" not in repr(loaded)
