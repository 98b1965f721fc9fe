"""What a URL's answer means: the outcome of the run (SPEC section 2) and Retry-After."""
from __future__ import annotations

import email.utils
import time

from delayd.targets.handlers import Outcome, clip

RETRY_AFTER_STATUSES = (429, 503)


def retry_after(value: str | None, cap: float, now: float | None = None) -> float:
    """Seconds a Retry-After header asks to wait (delta-seconds or an HTTP date), in [0, cap];
    0 when absent or anything else (the header is then ignored)."""
    if not value:
        return 0.0
    value = value.strip()
    if value.isascii() and value.isdigit():  # (str.isdigit alone takes "²" and "٣")
        seconds = float(value)
    else:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - (time.time() if now is None else now)
        except (TypeError, ValueError, IndexError, OverflowError, OSError):
            return 0.0
    return min(max(seconds, 0.0), cap)


def classify(status: int, body: bytes, over: bool, cap: int, location: str = "",
             retry_after_s: float = 0.0) -> Outcome:
    """The outcome of an answer: 2xx `success` ok, 2xx `fail` failed, anything else retry."""
    text = body.decode("utf-8", "replace")
    excerpt = clip(text) or "(empty answer)"
    if 200 <= status < 300:
        if over:
            return Outcome("retry", f"HTTP {status}: answer larger than {cap} bytes "
                                    f"(max_response_bytes), not success or fail: {excerpt}", status)
        answer = text.strip().lstrip("\ufeff").strip().lower()
        if answer == "success":
            return Outcome("ok", "", status, answer=excerpt)
        if answer == "fail":
            return Outcome("failed", f"HTTP {status}: the URL answered fail", status)
        return Outcome("retry", f"HTTP {status}: answer is not success or fail: {excerpt}", status)
    if 300 <= status < 400:
        return Outcome("retry", f"HTTP {status}: redirect to {clip(location) or '(no location)'} "
                                f"not followed: {excerpt}", status)
    if retry_after_s:
        return Outcome("retry", f"HTTP {status}: Retry-After {retry_after_s:g} s: {excerpt}", status,
                       wait=retry_after_s)
    return Outcome("retry", f"HTTP {status}: {excerpt}", status)
