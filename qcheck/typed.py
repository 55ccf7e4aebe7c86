"""The typed boundary for numbers and strings read from files: config.json, index files, GGUF metadata,
Hub listings.

JSON and GGUF let a file put anything where a count belongs: ``NaN``, ``Infinity``, ``1e308``, a string, a
list, a nested object, a string array where an integer array belongs. Everything qcheck computes with goes
through these functions first: a value that is not a plausible number of the kind asked for reads as absent
(``None``), so a malformed field gives "unknown" (or the caller's own clean error), never an OverflowError,
TypeError or ValueError deep inside an estimate.
"""

from __future__ import annotations

import math
from typing import Any

#: the largest integer a file may give for any count or size: exact in a float, far above any real model
MAX_INT = 2**53


def as_int(value: Any, *, minimum: int = -MAX_INT, maximum: int = MAX_INT) -> int | None:
    """An integer (``4``, ``4.0``, ``"4"``) within ``[minimum, maximum]``, else None (booleans, NaN, infinities,
    fractions, other strings, lists, objects, out-of-range values)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None
        value = int(value)
    elif isinstance(value, str):
        text = value.strip()
        if not text or len(text) > 20:
            return None
        try:
            value = int(text)
        except ValueError:
            return None
    if not isinstance(value, int):
        return None
    return value if minimum <= value <= maximum else None


def pos_int(value: Any, maximum: int = MAX_INT) -> int | None:
    """A positive integer (a count, a size, a dimension), else None."""
    return as_int(value, minimum=1, maximum=maximum)


def pos_ints(value: Any, maximum: int = MAX_INT) -> list[int] | None:
    """A non-empty list of positive integers (a per-layer GGUF array), else None."""
    if not isinstance(value, (list, tuple)) or not value:
        return None
    out = [pos_int(v, maximum) for v in value]
    return None if any(v is None for v in out) else [v for v in out if v is not None]


def as_float(value: Any, *, minimum: float = -1e18, maximum: float = 1e18) -> float | None:
    """A finite number within ``[minimum, maximum]``, else None (booleans and strings included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and minimum <= number <= maximum else None


def as_str(value: Any, limit: int = 4096) -> str | None:
    """A string (cut at ``limit``), else None; a list of strings is joined with spaces."""
    if isinstance(value, str):
        return value[:limit]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value[:64]):
        return " ".join(value[:64])[:limit]
    return None


def as_dict(value: Any) -> dict[str, Any]:
    """A JSON object as it is, else an empty one (a config table where a file put a list, a string or null)."""
    return value if isinstance(value, dict) else {}
