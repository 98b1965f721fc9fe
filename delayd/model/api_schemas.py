"""The OpenAPI schemas of the values a task's fields and the dashboard's host actions take: docs/openapi.json's
components of those names, written by scripts/build-clients (the fields' own schemas, in delayd.model.fields,
refer to them). Each says as exactly as JSON Schema can what the check it stands for takes (Task.new,
delayd.model.schedule, delayd.client.base.to_ms, delayd.model.origin): every text a pattern matches is taken,
and where a check takes more than a pattern can say (a number with an exponent, a cron range or name, a
bracketed IPv6 host) the description names it. tests/web/test_openapi_patterns.py holds each pattern to its
check; a pattern's `$` is the end of the text (ECMA 262), and `\\s` is spelled out (Python, JavaScript and the
Rust regex of schemathesis' validator read it otherwise).
"""
from __future__ import annotations

from typing import Any

from delayd.model.fields import MAX_NAME, TARGET, TEN_YEARS
from delayd.model.schedule import zone_names

SPACE = r"[\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"  # str.isspace(), str.split()
FLOAT_SPACE = r"[\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"  # what float() strips
HOST = r"[!\"$&-.0-9;-=>A-Z\\^-~]+"  # printable ASCII but # % / : ? @ [ ] (no host name holds a percent-escape)
USER = r"[!\"$-.0-9:-=>@-Z\\^-~]*@"  # printable ASCII but # / ? [ ]
PORT = (r"(:((?!0+(?![0-9]))([0-9]{1,4}|0[0-9]{4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]"
        r"|6553[0-5]))?)?")  # 1 to 65535 in at most five digits, or none after the colon
URL_TEXT = r"[^\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"  # no space or control
SECONDS = r"(0*[0-9]{1,10}(\.[0-9]*)?|0*[0-9]{11}(\.[0-9]{0,4})?|\.[0-9]+)"  # below 1e11
ISO_8601 = (r"(197[1-9]|19[89][0-9]|[2-4][0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"
            r"([T ]([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\.[0-9]{1,6})?)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?)?")
GAP = r"(0*[0-9]{1,8}(\.[0-9]*)?|\.[0-9]+)"  # seconds, below ten years


def _cron_field(value: str, step: str) -> str:
    return rf"(\*(/({step}))?|({value})(,({value}))*)"


# minute, hour, day of the month (1-28: every month has it), month, day of the week
CRON_FIELDS = (_cron_field(r"[0-5]?[0-9]", r"[1-9]|[1-5][0-9]"),
               _cron_field(r"[01]?[0-9]|2[0-3]", r"[1-9]|1[0-9]|2[0-3]"),
               _cron_field(r"0?[1-9]|1[0-9]|2[0-8]", r"[1-9]|[12][0-9]|30"),
               _cron_field(r"0?[1-9]|1[0-2]", r"[1-9]|1[01]"),
               _cron_field(r"[0-7]", r"[1-6]"))


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema`, or null: what add() takes as None (left out)."""
    return {"anyOf": [schema, {"type": "null"}]}


def components() -> dict[str, dict[str, Any]]:
    """The schemas, by component name."""
    return {
        "NameText": {"type": "string", "minLength": 1, "maxLength": MAX_NAME, "pattern": r"^[^\x00-\x20\x7f]+$",
                     "description": "A topic (or a push list): 1-512 characters, none of them a space or a control "
                                    "character (valid UTF-8)."},
        "IdText": {"type": "string", "minLength": 1, "maxLength": MAX_NAME, "pattern": r"^[^\x00-\x20\x7f:]+$",
                   "description": "An id: as a topic, without `:` (the key is `topic:id`)."},
        "Name": {"oneOf": [ref("NameText"), {"type": "integer"}],
                 "description": "A topic or a push list; an integer is its decimal text (at most 512 characters)."},
        "Id": {"oneOf": [ref("IdText"), {"type": "integer"}],
               "description": "An id within its topic; an integer is its decimal text (at most 512 characters)."},
        "Target": {"type": "string", "pattern": TARGET.replace("(?:", "("),
                   "description": "`package.module:function` (dotted identifiers on both sides). A server with "
                                  "allowed_modules set also refuses one outside them."},
        "Url": {"type": "string", "pattern": rf"^[Hh][Tt][Tt][Pp][Ss]?://({USER})?{HOST}{PORT}([/?#]{URL_TEXT}*)?$",
                "description": "An http(s) URL: a host of printable ASCII (an international name in its xn-- form), a "
                               "port from 1 to 65535 if any, no spaces or control characters anywhere (percent-encode "
                               "them). Also taken: a [bracketed] IPv6 host, a host with `%`, user info of other "
                               "than ASCII."},
        "Time": {"type": "string",
                 "pattern": rf"^({FLOAT_SPACE}*(-(0+\.?0*|\.0+)|{SECONDS}){FLOAT_SPACE}*|{ISO_8601})$",
                 "description": "Unix seconds (0 to 1e11, decimal) or an ISO 8601 time from 1971 (without an "
                                "offset: the server's local time). Also taken: any time that Python's "
                                "`datetime.fromisoformat` reads and a number with an exponent, within that range."},
        "Cron": {"type": "string", "pattern": rf"^{SPACE}*" + rf"{SPACE}+".join(CRON_FIELDS) + rf"{SPACE}*$",
                 "description": "Five fields, `minute hour day-of-month month day-of-week`: each `*`, `*/STEP` or a "
                                "list of values (days of the month 1-28). Also taken: what cronsim reads besides "
                                "(ranges `1-5`, names `MON`/`JAN`, days 29-31, `L`, `W`, `#`), unless it never "
                                "matches."},
        "Zone": {"type": "string", "enum": sorted(zone_names()),
                 "description": "An IANA time zone name (the tz database the server has)."},
        "Gap": {"oneOf": [{"type": "number", "minimum": 0, "maximum": TEN_YEARS},
                          {"type": "string", "pattern": rf"^{FLOAT_SPACE}*{GAP}{FLOAT_SPACE}*$"}],
                "description": "Seconds, a number or its decimal text (up to ten years)."},
        "Intervals": {"oneOf": [{"type": "number", "minimum": 0, "maximum": TEN_YEARS},
                                {"type": "array", "minItems": 1, "maxItems": 1000, "items": ref("Gap")},
                                {"type": "string",
                                 "pattern": rf"^{SPACE}*{GAP}({SPACE}*,{SPACE}*{GAP}){{0,999}}{SPACE}*$"}],
                      "description": "The schedule: the gaps in seconds before each run until success (up to ten "
                                     "years each, at most 1,000), e.g. `10`, `[0, 30, 60]` or `\"0,30,60\"`. Also "
                                     "taken: decimal text with an exponent."},
        "Origin": {"type": "string", "pattern": rf"^{SPACE}*([Hh][Tt][Tt][Pp][Ss]?://)?{HOST}{PORT}/?{SPACE}*$",
                   "description": "A URL host as `delayd hosts` names it: `scheme://host[:port]` (http or https), or a "
                                  "bare `host[:port]` for both its http and https origins (without `%`)."},
    }
