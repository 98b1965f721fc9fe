"""Who the producer token is (delayd.web.auth), without a server: the fast tier's share of the
HTTP producer API (tests/web/test_producer_api.py runs it for real)."""
from __future__ import annotations

import pytest

from delayd import config as config_mod
from delayd.web.auth import Auth

WEB, PRODUCER = "web-token", "producer-token"


@pytest.mark.parametrize("web,producer,authorization,expected", [
    (WEB, PRODUCER, f"Bearer {WEB}", "bearer"),
    (WEB, PRODUCER, f"Bearer {PRODUCER}", "producer"),
    (WEB, PRODUCER, f"bearer  {PRODUCER} ", "producer"),
    (WEB, PRODUCER, "Bearer wrong", None),
    (WEB, PRODUCER, f"Basic {PRODUCER}", None),
    (WEB, "", f"Bearer {PRODUCER}", None),
    (WEB, PRODUCER, None, None),                          # no cookie either: log in
    ("", PRODUCER, None, "open"),                         # loopback without web_token, as before
    ("", PRODUCER, f"Bearer {PRODUCER}", "producer"),     # … but a producer sending its token is a producer
    ("", PRODUCER, "Bearer wrong", None),                 # … and a wrong token is refused (and counted)
    ("", "", "Bearer anything", "open"),                  # no token configured: as before
])
def test_identify(web, producer, authorization, expected):
    who = Auth(web, producer).identify(authorization, None)
    assert (who.how if who else None) == expected
    if who is not None:
        assert who.needs_csrf == (expected not in ("bearer", "producer")) and who.producer == (expected == "producer")


def test_the_producer_token_is_a_secret_that_must_differ_from_the_web_token():
    with pytest.raises(config_mod.ConfigError) as err:
        config_mod.load(None, env={"DELAYD_WEB_TOKEN": "same-s3cret", "DELAYD_PRODUCER_TOKEN": "same-s3cret"})
    assert "producer_token must differ" in str(err.value) and "s3cret" not in str(err.value)
    loaded = config_mod.load(None, env={"DELAYD_PRODUCER_TOKEN": "pr0ducer-s3cret"})
    assert loaded.producer_token == "pr0ducer-s3cret" and "s3cret" not in repr(loaded)
