"""A spec's JSON as both of its readers read it alike: the add script's (Redis's cjson) and the daemon's
(Python's json, delayd.model.record). They differ on what JSON leaves open or does not have: cjson reads
hex, `nan` and `inf` and makes an integer past a double's range infinite, Python reads NaN, Infinity, lone
surrogates and integers of any size, and both keep the last of a name given twice. What one would read
otherwise than the other is refused by both (docs/protocol.md section 7; the add script's side is
lua/_gate_json.lua's check_json; tests/store/test_json_agreement.py holds them to it)."""
from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DIGITS = 308  # an integer of more digits may be past a double's range (about 1.8e308)
_LONG_INTEGER = re.compile(r"\d{%d}" % (MAX_DIGITS + 1))
_LETTER_ESCAPE = re.compile(r"\\u00[4-7]")  # an escaped ASCII letter (or _): a field's name spelled otherwise
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no number of JSON's")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"{text[:20]} is beyond a double's range (about 1.8e308)")
    return value


def _within_double(text: str) -> int:
    value = int(text)
    if len(text) > MAX_DIGITS:
        try:
            float(value)  # (rounds as C's strtod, cjson's reader, does: past the largest double, infinity)
        except OverflowError:
            raise ValueError(f"an integer of {len(text.lstrip('-'))} digits is beyond a double's range "
                             "(about 1.8e308)") from None
    return value


class _Twice(dict):
    """An object that gave a name twice (`name`, the first)."""

    name = ""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    twice, seen = _Twice(obj), set()
    for name, _ in pairs:
        if name in seen:
            twice.name = name
            break
        seen.add(name)
    return twice


_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)
_LONG_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite, parse_int=_within_double)
_PAIRS_DECODER = json.JSONDecoder(object_pairs_hook=_pairs)


def loads_spec(text: str) -> dict[str, Any]:
    """A record's spec decoded; ValueError for a spec the add script would not read as this reads it: not an
    object, NaN or Infinity, a number past a double's range, a lone surrogate (cjson refuses one), a field
    named twice, a field given as null (cjson's null is no absent field)."""
    spec = (_LONG_DECODER if len(text) > MAX_DIGITS else _DECODER).decode(text)
    if not isinstance(spec, dict):
        raise ValueError("spec is not a JSON object")
    if "\\u" in text and _SURROGATE_ESCAPE.search(text) and not _utf8(spec):
        raise ValueError("spec holds a lone surrogate (\\ud800-\\udfff not in a pair), which is no text")
    if any(text.count(f'"{name}"') > 1 for name in spec) or "\\u00" in text and _LETTER_ESCAPE.search(text):
        twice = _PAIRS_DECODER.decode(text)
        if isinstance(twice, _Twice):
            raise ValueError(f"spec names the field {twice.name!r} twice")
    if None in spec.values():
        raise ValueError(f"spec field {next(name for name, value in spec.items() if value is None)!r} is null")
    return spec


def _utf8(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return False
    return True


def beyond_double(encoded: str) -> bool:
    """Whether JSON text `encoded` (a producer's own: its floats are finite) holds an integer past a
    double's range, which the add script's cjson reads as infinite."""
    if len(encoded) <= MAX_DIGITS or not _LONG_INTEGER.search(encoded):
        return False
    try:
        _LONG_DECODER.decode(encoded)
    except ValueError:
        return True
    return False
