"""How long a server asks us to wait, read from whatever it sent.

``Retry-After`` (RFC 9110 §10.2.3) is delta-seconds or an HTTP-date; servers also send fractions, negative
numbers, dates in the past, garbage and values of many digits. The Hub sends the IETF draft header
``RateLimit: "api";r=0;t=55`` (remaining 0, reset in 55 s) when a quota is exhausted. Anything that is not a
well-formed, non-negative wait reads as "the server said nothing" (the caller backs off on its own); a huge
wait is returned as it is, for the caller to refuse rather than sleep through.
"""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Mapping

#: ASCII digits only: ``str.isdigit`` and ``\d`` also accept '²' and other Unicode digits
_SECONDS = re.compile(r"[0-9]{1,300}(?:\.[0-9]{1,9})?")  # up to 300 digits: finite as a float
_RATELIMIT_R = re.compile(r"(?:^|;)\s*r\s*=\s*([0-9]{1,30})\s*(?:;|$)")
_RATELIMIT_T = re.compile(r"(?:^|;)\s*t\s*=\s*([0-9]{1,30})\s*(?:;|$)")
#: an HTTP-date is at most this long (IMF-fixdate is 29 characters): longer text is not parsed
_MAX_DATE = 64


def retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait as the server asks (``headers`` with lower-case names), or None when it asks nothing
    usable. An exhausted ``RateLimit`` wins over ``Retry-After``; a date in the past is 0."""
    reset = _ratelimit_reset(headers.get("ratelimit", ""))
    if reset is not None:
        return reset
    return parse_retry_after(headers.get("retry-after", ""), now)


def parse_retry_after(value: str, now: float | None = None) -> float | None:
    """One ``Retry-After`` value: delta-seconds (a fraction accepted) or an HTTP-date; None for anything else."""
    text = value.strip()
    if not text:
        return None
    if _SECONDS.fullmatch(text):
        return float(text)
    if len(text) > _MAX_DATE or not any(c.isalpha() for c in text):
        return None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:  # Python 3.10 returns None for text it cannot read
        return None
    if when.tzinfo is None:  # "-0000": UTC by RFC 5322
        import datetime

        when = when.replace(tzinfo=datetime.timezone.utc)
    try:
        delta = when.timestamp() - (time.time() if now is None else now)
    except (OverflowError, OSError, ValueError):
        return None
    return max(0.0, delta) if math.isfinite(delta) else None


def _ratelimit_reset(value: str) -> float | None:
    """``t`` of a ``RateLimit`` header whose ``r`` (remaining) is 0; None otherwise."""
    if not value or len(value) > 1024:
        return None
    remaining = _RATELIMIT_R.search(value)
    reset = _RATELIMIT_T.search(value)
    if remaining is None or reset is None or int(remaining.group(1)) != 0:
        return None
    return float(reset.group(1))


def backoff(attempt: int, first: float, cap: float) -> float:
    """The wait before attempt ``attempt + 1``: ``first`` doubled per attempt made, at most ``cap``."""
    return min(cap, first * 2.0 ** min(attempt - 1, 60))
