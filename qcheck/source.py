"""Byte sources: where header bytes come from (a local file, or HTTP range reads on the Hub).

Readers never open files themselves; they get a ``FileSet`` (a local directory or a Hub repo at a
revision) and ask it for ``ByteSource`` objects and small JSON files. One parser, two sources.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol, runtime_checkable

from qcheck.errors import InputError


@runtime_checkable
class ByteSource(Protocol):
    """Random-access bytes of one file. ``read_at`` may return fewer bytes only at end of file."""

    name: str
    size: int | None

    def read_at(self, offset: int, length: int) -> bytes: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class FileEntry:
    """One file of a FileSet: its path and size."""

    name: str  # POSIX path relative to the file set's root
    size: int | None


class FileSet(Protocol):
    """A set of files under one root: a local directory or a Hub repo at one revision."""

    root: str  # for messages: a path or "org/name@revision"

    @property
    def revision(self) -> str | None: ...  # the commit of a Hub repo; None for a directory

    def list(self) -> list[FileEntry]: ...

    def open(self, name: str) -> ByteSource: ...

    def read_small(self, name: str, max_bytes: int) -> bytes:
        """The whole of a small file (a JSON side file); more than ``max_bytes`` is an InputError."""
        ...

    def exists(self, name: str) -> bool: ...


#: POSIX ``st_ctime`` moves on every write and cannot be set by a user; on Windows it is the creation time
CHANGE_TIME_TRACKS_WRITES = os.name != "nt"


def read_at_most(fd: int, max_bytes: int) -> bytes:
    """What ``fd`` holds, read until its end or ``max_bytes + 1`` bytes (one byte more than allowed tells the caller
    the file is too large, or grew while read, without reading the rest)."""
    chunks: list[bytes] = []
    got = 0
    while got <= max_bytes:
        data = os.read(fd, min(1 << 20, max_bytes + 1 - got))
        if not data:
            break
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)


def read_regular_file(path: str | os.PathLike[str], max_bytes: int, what: str, display: str | None = None) -> bytes:
    """The bytes of a small regular file (a manifest, a Modelfile) named by someone else: a device (``/dev/zero``),
    a FIFO (which would block the open or the read for ever) or a socket is refused, and so is a file of more than
    ``max_bytes`` (checked on the open file, then by reading at most ``max_bytes + 1``)."""
    name = display or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise InputError(f"cannot read the {what}: {exc.strerror or exc}", path=name) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"the {what} is not a regular file ({file_kind(st.st_mode)}): not read", path=name)
        if st.st_size > max_bytes:
            raise InputError(f"{st.st_size} bytes is too large for a {what} (at most {max_bytes})", path=name)
        data = read_at_most(fd, max_bytes)
        if len(data) > max_bytes:
            raise InputError(f"more than {max_bytes} bytes: too large for a {what}", path=name)
        return data
    except OSError as exc:
        raise InputError(f"cannot read the {what}: {exc.strerror or exc}", path=name) from None
    finally:
        os.close(fd)


#: names a reader opens when they are in a model directory: side files, indexes and weights (see ``LocalFileSet``)
READ_SUFFIXES = (".json", ".safetensors", ".gguf", ".bin", ".pt", ".pth", ".ckpt", ".pkl")


def file_kind(mode: int) -> str:
    """What a non-regular file is, for messages."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


def regular_file(path: str | os.PathLike[str], display: str | None = None) -> bool:
    """Whether ``path`` exists (False when there is nothing at all), as a regular file once links are followed;
    anything else there (a FIFO, a device, a socket, a broken link, a link loop) is an ``InputError``, never read
    as absent and never opened (a FIFO would block, ``/dev/zero`` never ends)."""
    if not os.path.lexists(path):
        return False
    name = display or str(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        what = "a broken symbolic link" if isinstance(exc, FileNotFoundError) else (exc.strerror or str(exc)).lower()
        raise InputError(f"unreadable: {what}", path=name) from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"not a regular file ({file_kind(info.st_mode)}); qcheck reads regular files only", path=name)
    return True


class LocalFileSource:
    """A local file read with positioned reads; never memory-maps, never reads more than asked."""

    def __init__(self, path: str | os.PathLike[str], display: str | None = None):
        self.path = Path(path)
        self.name = display or str(path)
        try:
            # never blocks: a FIFO opened for reading waits for a writer, and is refused just below
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0))
        except IsADirectoryError:
            raise InputError("is a directory, expected a file", path=self.name) from None
        except FileNotFoundError:
            raise InputError("no such file", path=self.name) from None
        except PermissionError:
            raise InputError("permission denied", path=self.name) from None
        except OSError as exc:
            raise InputError(f"cannot open: {exc.strerror or exc}", path=self.name) from None
        info = os.fstat(self._fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(self._fd)
            self._fd = -1
            raise InputError(f"not a regular file ({file_kind(info.st_mode)}); qcheck reads regular files only",
                             path=self.name)
        self.size: int | None = info.st_size  # the ByteSource field (None only for remote files)

    def read_at(self, offset: int, length: int) -> bytes:
        if offset < 0 or length < 0:
            raise InputError(f"negative read at offset {offset}", path=self.name)
        size = self.size or 0
        if length == 0 or offset >= size:
            return b""
        length = min(length, size - offset)
        try:
            if hasattr(os, "pread"):
                return os.pread(self._fd, length, offset)
            os.lseek(self._fd, offset, os.SEEK_SET)  # pragma: no cover - Windows
            return os.read(self._fd, length)  # pragma: no cover
        except OSError as exc:
            raise InputError(f"read failed at offset {offset}: {exc.strerror or exc}", path=self.name) from None

    def identity(self) -> tuple[int, int, int, int, int] | None:
        """(size, mtime ns, ctime ns, inode, device) of the open file: what changes when its bytes do (the change
        time cannot be set back by a user), so a cache can tell a file it has seen without reading it. None where
        ``st_ctime`` is not a change time (Windows: the creation time), so nothing is trusted without reading."""
        if not CHANGE_TIME_TRACKS_WRITES:
            return None
        try:
            st = os.fstat(self._fd)
        except OSError:
            return None
        return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> LocalFileSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass


class LocalFileSet:
    """A local directory. Names are relative POSIX paths; a name escaping the root is an InputError. A file a reader
    would read (``READ_SUFFIXES``, or a name asked for by ``exists``) that is not a regular file is an InputError too:
    it is never skipped as if absent."""

    def __init__(self, root: str | os.PathLike[str]):
        self.path = Path(root)
        self.root = str(root)
        self.revision: str | None = None  # a directory has no revision (the FileSet protocol field)

    def _resolve(self, name: str) -> Path:
        rel = PurePosixPath(name)
        if rel.is_absolute() or ".." in rel.parts or name.startswith(("/", "\\")) or "\\" in name or ":" in name:
            raise InputError(f"file name {name!r} escapes the model directory", path=self.root)
        return self.path.joinpath(*rel.parts)

    def list(self) -> list[FileEntry]:
        entries: list[FileEntry] = []
        try:
            children = sorted(self.path.iterdir())
        except OSError as exc:
            raise InputError(f"cannot list directory: {exc.strerror or exc}", path=self.root) from None
        for child in children:
            if child.name.lower().endswith(READ_SUFFIXES) and not child.is_dir():
                regular_file(child, display=str(self.path / child.name))
            try:
                if child.is_file():
                    entries.append(FileEntry(child.name, child.stat().st_size))
            except OSError:
                continue
        return entries

    def exists(self, name: str) -> bool:
        return regular_file(self._resolve(name), display=str(self.path / name))

    def open(self, name: str) -> LocalFileSource:
        return LocalFileSource(self._resolve(name), display=str(self.path / name))

    def read_small(self, name: str, max_bytes: int) -> bytes:
        with self.open(name) as src:
            if src.size is not None and src.size > max_bytes:
                raise InputError(f"file is {src.size} bytes, over the {max_bytes}-byte limit for side files",
                                 path=src.name)
            return src.read_at(0, max_bytes + 1)[: max_bytes + 1]
