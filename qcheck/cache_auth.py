"""Authenticating what qcheck reads back from its caches: a per-user secret key, kept outside every cache folder,
and an HMAC-SHA256 tag over what an entry holds.

Why: a cache folder can be written by more than its user: a CI cache restored from another job or branch, a shared
``$QCHECK_CACHE_DIR``, a repository-local ``.qcheck-cache``. Anyone who can write it could otherwise plant an entry
under a key they can compute (the key of an entry only names what it is *for*), and qcheck would report the planted
numbers. With a tag made with a key only this user can read, writing the cache folder is not enough to forge an
entry: a planted, altered or foreign entry fails ``verify`` and is recomputed.

The key: 32 random bytes, hex, in ``$QCHECK_CACHE_KEY_FILE``, else ``$XDG_CONFIG_HOME/qcheck/cache-key``, else
``~/.config/qcheck/cache-key``; created on first use with mode 0600 (its folder 0700), and used only when it is a
regular file (not a link) owned by this user that nobody else may read or write. To reuse cache entries across
machines (a CI cache), give each the same key (a CI secret written to that file with mode 0600); never store the
key in the cache folder itself.

A key that would sit inside a cache folder qcheck writes (``$QCHECK_CACHE_DIR``, ``$XDG_CACHE_HOME``,
``~/.cache``) protects nothing and is refused. The eval reference cache (``qcheck.eval.cache``) and the data cache
of parsed files (``qcheck.datacache``) both sign with this one key, each for its own purpose.

Public API: ``key_file()``, ``load_key(create=True) -> bytes`` (raises ``KeyUnavailable``), ``user_key() -> bytes |
None`` (``load_key`` once per process, None when unavailable), ``sign(key, purpose, payload) -> str``, ``verify(key, purpose, payload, tag) -> bool``, ``private(path, directory=...) -> str | None``
(why a path may not be trusted, or None), ``open_private(path) -> (fd, stat)``, ``read_private(path, max_bytes) ->
bytes``.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import stat
from pathlib import Path

from qcheck.source import read_at_most

#: bytes of key material
KEY_BYTES = 32
_ENV = "QCHECK_CACHE_KEY_FILE"
#: file modes mean nothing on Windows (every file reads as 0o666 there): owner and mode checks are POSIX only
_POSIX = os.name == "posix"


class KeyUnavailable(Exception):
    """The key cannot be read or created, or may not be trusted; the message says why (one line)."""


def key_file() -> Path:
    """Where the key lives (see the module docstring)."""
    explicit = os.environ.get(_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "qcheck" / "cache-key"


def _shared(info: os.stat_result, bits: int = stat.S_IWGRP | stat.S_IWOTH) -> bool:
    """Whether another user owns the file or has ``bits`` on it (POSIX; never on Windows)."""
    return _POSIX and (info.st_uid != os.getuid() or bool(info.st_mode & bits))


def private(path: Path, *, directory: bool) -> str | None:
    """Why ``path`` may not be trusted (not there, a link, another kind of file, another owner, writable by group or
    others), or None when it is this user's own directory (``directory``) or regular file."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror or exc}"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link"
    if directory != stat.S_ISDIR(info.st_mode) or not (directory or stat.S_ISREG(info.st_mode)):
        return f"{path} is not a {'directory' if directory else 'regular file'}"
    if _shared(info):
        return f"{path} belongs to another user or is writable by group or others"
    return None


def open_private(path: Path) -> tuple[int, os.stat_result]:
    """(descriptor, status) of a regular file of this user that others may not write: opened without following links
    and without blocking (a FIFO or a device never hangs the caller) and checked on the open descriptor. Raises
    ``OSError`` or ``ValueError`` (saying why) otherwise; the caller closes the descriptor."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ValueError(f"{path} is not a regular file")
        if _shared(info):
            raise ValueError(f"{path} belongs to another user or is writable by group or others")
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def read_private(path: Path, max_bytes: int) -> bytes:
    """The bytes of ``open_private(path)``, at most ``max_bytes`` (``ValueError`` beyond)."""
    fd, info = open_private(path)
    try:
        if info.st_size > max_bytes:
            raise ValueError(f"{path} is {info.st_size} bytes, over {max_bytes}")
        data = read_at_most(fd, max_bytes)
        if len(data) > max_bytes:
            raise ValueError(f"{path} grew past {max_bytes} bytes while read")
        return data
    finally:
        os.close(fd)


def _inside_a_cache(path: Path) -> bool:
    """Whether the key would sit inside a cache folder qcheck writes (whoever restores the cache has the key)."""
    key = os.path.realpath(path)
    roots = [os.environ.get("QCHECK_CACHE_DIR"), os.environ.get("XDG_CACHE_HOME"),
             os.path.join(os.path.expanduser("~"), ".cache")]
    for root in filter(None, roots):
        real = os.path.realpath(root)
        if key == real or key.startswith(real.rstrip(os.sep) + os.sep):
            return True
    return False


def load_key(*, create: bool = True) -> bytes:
    """This user's cache key, created on first use; ``KeyUnavailable`` when it cannot be read, created or trusted."""
    path = key_file()
    if _inside_a_cache(path):
        raise KeyUnavailable(f"cache key {path} is inside a cache folder (keep it outside: {_ENV})")
    if create and not os.path.lexists(path):
        _create(path)
    try:
        text = read_private(path, 4096)
    except (OSError, ValueError) as exc:
        raise KeyUnavailable(f"cache key {path}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        info = os.lstat(path)
    except OSError as exc:  # pragma: no cover - removed between the read and this check
        raise KeyUnavailable(f"cache key {path}: {exc.strerror or exc}") from None
    if _shared(info, stat.S_IRWXG | stat.S_IRWXO):
        raise KeyUnavailable(f"cache key {path} may be read by group or others (chmod 600 it)")
    try:
        key = bytes.fromhex(text.decode("ascii").strip())
    except ValueError:
        raise KeyUnavailable(f"cache key {path} is not {KEY_BYTES * 2} hexadecimal digits") from None
    if len(key) < KEY_BYTES:
        raise KeyUnavailable(f"cache key {path} holds {len(key)} bytes, fewer than {KEY_BYTES}")
    return key


#: (key file, the key read there or None): ``user_key`` looks once per process and key file
_USER_KEY: dict[str, bytes | None] = {}


def user_key() -> bytes | None:
    """``load_key()``, or None when no key can be had (then nothing is trusted and nothing is signed: a cache only
    makes a run faster). Looked for once per process and key file (a warm run reads the key once, not per entry)."""
    path = str(key_file())
    if path not in _USER_KEY:
        try:
            _USER_KEY[path] = load_key()
        except KeyUnavailable:
            _USER_KEY[path] = None
    return _USER_KEY[path]


def _create(path: Path) -> None:
    """Write a new random key with mode 0600, atomically: a concurrent run sees no key or the whole of one."""
    import secrets

    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(secrets.token_hex(KEY_BYTES) + "\n")
            with contextlib.suppress(FileExistsError):  # another run made one first: theirs is used
                os.link(tmp, path)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    except OSError as exc:
        raise KeyUnavailable(f"cannot create the cache key {path}: {exc.strerror or exc}") from None


def sign(key: bytes, purpose: str, payload: bytes) -> str:
    """The HMAC-SHA256 (hex) of ``payload`` for ``purpose`` (a tag made for one purpose never verifies for another)."""
    return hmac.new(key, purpose.encode("utf-8") + b"\0" + payload, hashlib.sha256).hexdigest()


def verify(key: bytes, purpose: str, payload: bytes, tag: object) -> bool:
    """Whether ``tag`` is ``sign(key, purpose, payload)`` (compared in constant time)."""
    return isinstance(tag, str) and hmac.compare_digest(sign(key, purpose, payload), tag)
