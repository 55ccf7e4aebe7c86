"""Parsed data files memoised on disk, keyed on their bytes: a cache that is never trusted over the files.

Parsing the matrix's TOML files was most of the time of a ``qcheck check``; parsing gguf-py's constants module (a
hundred enums) a good part of a ``qcheck inspect``. The parse of each file is kept as JSON in the user's cache
directory (``$QCHECK_CACHE_DIR``, else ``$XDG_CACHE_HOME/qcheck``, else ``~/.cache/qcheck``; entries in
``data/``), under a name made of what kind of parse it is and the SHA-256 of the file's bytes. The caller always
reads the file itself and hashes it, so an edited file is a new key and is parsed again: an entry can only ever
stand for the exact bytes it was made from, and the validation that follows a parse (the matrix schema) runs on
the cached value as on a fresh parse.

Safety: entries are plain JSON (no pickle, no marshal, no code), written to a temporary file and renamed into
place (``os.replace``: a reader sees the old entry, the new one or none, never half of one), read only from a
directory owned by this user and not writable by others, bounded in size, and checked on read (format, kind
and key must match; anything else is a miss). Whoever else can write the directory (a CI cache restored from
another job) cannot forge one: each entry starts with an HMAC-SHA256 tag made with this user's key, which is kept
outside every cache directory (``qcheck.cache_auth``), and an entry whose tag does not verify is a miss, never
parsed. Callers still validate what they get back as strictly as a fresh parse (``qcheck.readers.gguf_cache``). Every failure to read or write is a miss, never an error: the
cache can only make a run faster. ``QCHECK_CACHE=off`` turns it off (the benchmarks' cold runs, a read-only
home); ``qcheck`` never needs it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: bumped when the layout of an entry changes: older entries become misses (2: a tag line before the JSON)
FORMAT = 2
#: entries larger than this are not read (the biggest real one, transformers' architecture list, is ~0.2 MB)
MAX_ENTRY_BYTES = 32 * 1024 * 1024
#: entries kept per directory; past this the oldest are removed when a new one is written
MAX_ENTRIES = 512
_OFF = ("0", "off", "no", "false")


def cache_dir() -> Path | None:
    """The directory of data entries, or None when the cache is off."""
    if os.environ.get("QCHECK_CACHE", "").strip().lower() in _OFF:
        return None
    root = os.environ.get("QCHECK_CACHE_DIR")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "qcheck")
    return Path(root) / "data"


def key_of(kind: str, data: bytes) -> str:
    """The key of ``data`` parsed as ``kind``: SHA-256 over the kind, the entry format and the bytes."""
    h = hashlib.sha256(f"{kind}\0{FORMAT}\0".encode())
    h.update(data)
    return h.hexdigest()


def _entry_path(folder: Path, kind: str, key: str) -> Path:
    return folder / f"{kind}-{key}.json"


def _private(folder: Path) -> bool:
    """True when ``folder`` is a directory of this user that nobody else may write to (``cache_auth.private``)."""
    from qcheck import cache_auth

    return cache_auth.private(folder, directory=True) is None


def entry_context(kind: str, key: str) -> str:
    """What an entry's tag is bound to (``qcheck.cache_auth`` context): the format, the kind and the key."""
    return f"datacache/{FORMAT}:{kind}:{key}"


def load(kind: str, key: str) -> Any | None:
    """The value stored for (``kind``, ``key``), or None on any miss (a missing or unreadable entry, a tag that
    does not verify with this user's key, JSON of the wrong shape)."""
    folder = cache_dir()
    if folder is None or not _private(folder):
        return None
    from qcheck import cache_auth

    secret = cache_auth.user_key()
    if secret is None:
        return None
    try:  # a regular file of this user only (a planted FIFO never hangs the run), bounded
        raw = cache_auth.read_private(_entry_path(folder, kind, key), MAX_ENTRY_BYTES)
    except (OSError, ValueError):
        return None
    tag, newline, body = raw.partition(b"\n")
    if not newline or not cache_auth.verify(secret, entry_context(kind, key), body, tag.decode("ascii", "replace")):
        return None
    try:
        entry = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if (not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("kind") != kind
            or entry.get("key") != key or "value" not in entry):
        return None
    return entry["value"]


def store(kind: str, key: str, value: Any) -> None:
    """Keep ``value`` (plain JSON data) for (``kind``, ``key``), tagged with this user's key; silently nothing
    when that cannot be done (no key, an unwritable directory, a value that is not plain data)."""
    folder = cache_dir()
    if folder is None:
        return
    try:
        body = json.dumps({"format": FORMAT, "kind": kind, "key": key, "value": value}, separators=(",", ":"),
                          ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError):  # not plain data (a TOML date, say): not cached
        return
    from qcheck import cache_auth

    secret = cache_auth.user_key()
    if secret is None:
        return
    tag = cache_auth.sign(secret, entry_context(kind, key), body)
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not _private(folder):
            return
        import tempfile  # only when an entry is written (a warm run writes none)

        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(tag.encode("ascii") + b"\n" + body)
            os.replace(tmp, _entry_path(folder, kind, key))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _prune(folder)
    except OSError:
        return


def _prune(folder: Path) -> None:
    """Remove the oldest entries past ``MAX_ENTRIES`` (each edit of a data file leaves its old entry behind)."""
    with os.scandir(folder) as it:
        entries = [e for e in it if e.name.endswith(".json") and not e.name.startswith(".")]
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda e: e.stat().st_mtime)
    for entry in entries[:len(entries) - MAX_ENTRIES]:
        with contextlib.suppress(OSError):
            os.unlink(entry.path)


def cached_parse(kind: str, data: bytes, parse: Callable[[bytes], Any]) -> Any:
    """``parse(data)``, memoised under the key of ``data``: the one way callers use this module."""
    key = key_of(kind, data)
    value = load(kind, key)
    if value is None:
        value = parse(data)
        store(kind, key, value)
    return value
