"""Git LFS pointer files: what a clone without ``git lfs pull`` leaves where the weights should be.

A pointer is a small text file (spec: https://github.com/git-lfs/git-lfs/blob/main/docs/spec.md,
"Pointers must be less than 1024 bytes"): ``version <url>``, then sorted ``key value`` lines with
at least ``oid sha256:<64 hex>`` and ``size <bytes>``. Recognising one lets qcheck say "run git lfs
pull" instead of "not a checkpoint".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from qcheck.errors import InputError, LfsPointerError
from qcheck.source import ByteSource

#: the pointer spec caps pointer files below this size
MAX_POINTER_BYTES = 1024
#: the current spec URL and the pre-release one the spec says readers should also accept
_VERSIONS = (b"version https://git-lfs.github.com/spec/v1", b"version https://hawser.github.com/spec/v1")
_OID = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class LfsPointer:
    """A Git LFS pointer file's fields."""

    version: str
    oid: str  # "sha256:<hex>"
    size: int  # bytes of the real file


def is_lfs_pointer(head: bytes) -> bool:
    """True when ``head`` (the first bytes of a file) starts like a Git LFS pointer."""
    return any(head.startswith(v + b"\n") or head.startswith(v + b"\r\n") for v in _VERSIONS)


def parse_lfs_pointer(data: bytes, *, path: str | None = None) -> LfsPointer:
    """Parse a whole pointer file; a malformed pointer is an InputError naming the line."""
    if len(data) >= MAX_POINTER_BYTES:
        raise InputError(f"{len(data)}-byte file starts like a Git LFS pointer but pointers are under "
                         f"{MAX_POINTER_BYTES} bytes", path=path)
    if not is_lfs_pointer(data):
        raise InputError("not a Git LFS pointer", path=path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("Git LFS pointer is not UTF-8 text", path=path) from None
    fields: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line:
            continue
        key, sep, value = line.partition(" ")
        if not sep or not key:
            raise InputError(f"Git LFS pointer line {number} is not 'key value'", path=path)
        fields[key] = value
    oid = fields.get("oid", "")
    if not _OID.fullmatch(oid):
        raise InputError("Git LFS pointer has no valid 'oid sha256:<64 hex digits>' line", path=path)
    size_text = fields.get("size", "")
    if not (size_text.isascii() and size_text.isdigit()) or len(size_text) > 20:  # isdigit alone accepts '²'
        raise InputError("Git LFS pointer has no valid 'size <bytes>' line", path=path)
    return LfsPointer(version=fields["version"], oid=oid, size=int(size_text))


def raise_for_pointer(source: ByteSource) -> None:
    """Raise ``LfsPointerError`` for a pointer file (or InputError for a malformed one)."""
    data = source.read_at(0, MAX_POINTER_BYTES)
    pointer = parse_lfs_pointer(data, path=source.name)
    raise LfsPointerError(f"Git LFS pointer ({pointer.size} bytes of weights not pulled): run git lfs pull",
                          path=source.name)
