"""Authenticate what qcheck reads back from its own caches, with a key kept outside every cache directory.

A cache directory can be written by more than qcheck: a CI cache restored from another job (or another pull
request), a shared home, a tarball someone unpacked. Whoever can write it must not be able to make qcheck trust
an entry it did not write (an edited matrix rule flips a verdict). So every entry carries an HMAC-SHA256 tag made
with this user's key, and an entry whose tag does not verify is a miss.

The key: 32 random bytes in ``cache.key`` under qcheck's state directory (``$QCHECK_STATE_DIR``, else
``$XDG_STATE_HOME/qcheck``, else ``~/.local/state/qcheck``), never under a cache directory. The directory is
created 0700 and the file 0600, written whole through a temporary file and a hard link (two processes starting at
once agree on one key). It is used only when it is a regular file (not a symlink) owned by this user and not
readable or writable by group or others, in a directory of this user that nobody else may write; otherwise no key
is used: nothing is trusted and nothing is written (the cache only makes a run slower, never changes an answer).
Restoring a cache directory without the key file makes every entry a miss; a cache and its key restored
together are trusted, as the user who saved both trusted them.

API (``context`` binds a tag to one use: the kind and key of an entry, so a valid entry cannot be replayed
under another name)::

    tag = sign("datacache:matrix:<sha256>", payload)        # hex string, or None when no key can be had
    ok = verify("datacache:matrix:<sha256>", payload, tag)  # False when no key, or the tag does not match
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import stat
from pathlib import Path

__all__ = ["KEY_BYTES", "key_path", "sign", "verify"]

KEY_BYTES = 32
#: domain separation: a tag of this module can never be mistaken for another HMAC made with the same key
_DOMAIN = b"qcheck cache entry v1\0"
#: (key path, the key read there or None): looked for once per process and path
_cached: tuple[str, bytes | None] | None = None


def state_dir() -> Path:
    """qcheck's state directory (where the key lives): ``$QCHECK_STATE_DIR``, ``$XDG_STATE_HOME/qcheck`` or
    ``~/.local/state/qcheck``."""
    root = os.environ.get("QCHECK_STATE_DIR")
    if root:
        return Path(root)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "qcheck"


def key_path() -> Path:
    """Where the key is (or would be) kept."""
    return state_dir() / "cache.key"


def _owned_private(info: os.stat_result, mask: int) -> bool:
    getuid = getattr(os, "getuid", None)
    return (getuid is None or info.st_uid == getuid()) and not info.st_mode & mask


def _read_key(path: Path) -> bytes | None:
    """The key in ``path`` if the file is one this user alone controls, else None."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != KEY_BYTES or not _owned_private(info, 0o077):
            return None
        data = os.read(fd, KEY_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) == KEY_BYTES else None


def _create_key(folder: Path, path: Path) -> None:
    """Write a new random key to ``path`` whole (temporary file + hard link: never a half-written key, and the
    first of two racing processes wins)."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = folder.stat()
    if not stat.S_ISDIR(info.st_mode) or not _owned_private(info, stat.S_IWGRP | stat.S_IWOTH):
        return
    tmp = folder / f".cache.key.{os.getpid()}.{os.urandom(4).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(KEY_BYTES))
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _inside_a_cache(path: Path) -> bool:
    """Whether the key would sit inside a cache directory qcheck writes (then it protects nothing)."""
    key = os.path.realpath(path)
    roots = [os.environ.get("QCHECK_CACHE_DIR"), os.environ.get("XDG_CACHE_HOME"),
             os.path.join(os.path.expanduser("~"), ".cache")]
    for root in filter(None, roots):
        real = os.path.realpath(root)
        if key == real or key.startswith(real.rstrip(os.sep) + os.sep):
            return True
    return False


def _the_key() -> bytes | None:
    """This user's key, created on first use; None when it cannot be had safely (looked for once per process)."""
    global _cached
    path = key_path()
    if _cached is not None and _cached[0] == str(path):
        return _cached[1]
    key = None
    if not _inside_a_cache(path):
        key = _read_key(path)
        if key is None and not os.path.lexists(path):
            with contextlib.suppress(OSError):
                _create_key(path.parent, path)
            key = _read_key(path)
    _cached = (str(path), key)
    return key


def _tag(key: bytes, context: str, payload: bytes) -> str:
    h = hmac.new(key, _DOMAIN + context.encode("utf-8", "surrogatepass") + b"\0", hashlib.sha256)
    h.update(payload)
    return h.hexdigest()


def sign(context: str, payload: bytes) -> str | None:
    """The tag of ``payload`` for ``context`` (hex), or None when there is no usable key (then do not store)."""
    key = _the_key()
    return None if key is None else _tag(key, context, payload)


def verify(context: str, payload: bytes, tag: object) -> bool:
    """Whether ``tag`` is this user's tag of ``payload`` for ``context`` (constant-time comparison)."""
    if not isinstance(tag, str) or len(tag) != 64:
        return False
    key = _the_key()
    return key is not None and hmac.compare_digest(_tag(key, context, payload), tag)
