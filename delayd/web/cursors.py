r"""The task list's cursor as the HTTP API and the pages give it out and take it back: plain text whose every
well-formed value is a place in the list, so that docs/openapi.json can describe exactly the cursors the
server takes (a pattern), and the server answers 400 only for text of another shape.

A cursor is `STATUS` (the top of that status's part of the list) or `STATUS~SCORE~MEMBER`, after that entry
of its index: SCORE as Python writes the zset score, MEMBER the entry's name with `\` written `\\` and each
byte that is not UTF-8 `\xNN` (a name read from Redis holds such bytes as lone surrogates), so that the
cursor is text a URL carries and finds the very entry again. The list of every status is the parts in the
order of delayd.client.browse.SOURCES (running, delayed, failed, ok, deleted), so a cursor is a place in it;
the list of one status is its part, and a cursor of another status's part is before it (the list from its
top) or after it (nothing more).
"""
from __future__ import annotations

import math
import re
from typing import NamedTuple

from delayd.client import browse

STATUSES = tuple(status for status, _ in browse.SOURCES)
SCORE = r"-?(?:inf|[0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?)"  # Python's repr of a float or an int, as Redis reads it
MEMBER = r"(?:[^\\]|\\\\|\\x[89a-f][0-9a-f])*"
ESCAPE = re.compile(r"\\(?:\\|x([89a-f][0-9a-f]))")
MAX_LENGTH = 2048  # characters: a name is at most 1,025 (a topic, ':', an id), and the status and score fit
SHAPE = re.compile(rf"({'|'.join(STATUSES)})(?:~({SCORE})~({MEMBER}))?")


class BadCursor(browse.BadCursor):
    """A cursor of another shape (answered 400)."""

    def __init__(self, statuses: tuple[str, ...]):
        super().__init__(f"not one this server gave (STATUS or STATUS~SCORE~MEMBER, STATUS one of "
                         f"{', '.join(statuses)})")


class Place(NamedTuple):
    source: int                               # the index in browse.SOURCES of the status whose part it is in
    after: tuple[int | float, str] | None     # the (score, member) it follows; None: the top of that part


def place(text: str, statuses: tuple[str, ...] = STATUSES) -> Place:
    """The place a cursor names; BadCursor unless it has the shape, of one of `statuses`."""
    match = SHAPE.fullmatch(text) if len(text) <= MAX_LENGTH else None
    if match is None or match[1] not in statuses:
        raise BadCursor(statuses)
    source = STATUSES.index(match[1])
    if match[2] is None:
        return Place(source, None)
    score = float(match[2])
    member = ESCAPE.sub(lambda escape: chr(0xDC00 + int(escape[1], 16)) if escape[1] else "\\", match[3])
    return Place(source, (int(score) if score.is_integer() else score, member))


def for_client(where: Place) -> str:
    """The cursor delayd.client.browse takes for `where`."""
    return browse.encode_cursor(where.source, where.after)


def shown(cursor: str | None) -> str | None:
    """The cursor delayd.client.browse gave (None: nothing more), as the API and pages give it."""
    if cursor is None:
        return None
    source, after = browse.decode_cursor(cursor)
    if after is None:
        return STATUSES[source]
    score, member = after
    text = ("inf" if score > 0 else "-inf") if isinstance(score, float) and math.isinf(score) else repr(score)
    escaped = member.replace("\\", "\\\\").encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return f"{STATUSES[source]}~{text}~{escaped}"
