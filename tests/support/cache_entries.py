"""Read and plant data-cache entries (``qcheck.datacache``) in tests: the tag line, then the JSON.

``write(path, entry)`` signs with this run's key (``qcheck.cache_auth``), as qcheck itself would: a test that damages
an entry this way checks the validation behind the tag (what an entry holds is still checked as strictly as a
fresh parse); ``signed=False`` plants an entry whoever can write the cache directory could make, without the key.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from qcheck import cache_auth, datacache


def read(path: Path) -> dict[str, Any]:
    """The JSON of an entry (its tag line skipped)."""
    _tag, _, body = path.read_bytes().partition(b"\n")
    return json.loads(body)  # type: ignore[no-any-return]


def write(path: Path, entry: dict[str, Any] | str, *, signed: bool = True) -> None:
    """Write ``entry`` (a dict, or raw text) as the entry at ``path``, tagged with this run's key (``signed``) or
    with a tag made without it."""
    body = (entry if isinstance(entry, str) else json.dumps(entry)).encode("utf-8")
    kind, key = path.stem.rsplit("-", 1)
    tag = cache_auth.sign(cache_auth.load_key(), datacache.entry_context(kind, key), body) if signed else "0" * 64
    path.write_bytes(tag.encode("ascii") + b"\n" + body)
