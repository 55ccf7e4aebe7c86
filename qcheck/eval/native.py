"""The one door to a native model loader: a file qcheck refuses never reaches llama.cpp (or any other parser of
GGUF written in C/C++).

Why: qcheck's own GGUF reader is the bounded, checked parser (docs/security.md); llama.cpp's ``gguf_init`` and
model loader are the surface it guards. ``qcheck inspect`` refusing a file while ``qcheck eval`` hands the same
bytes to llama.cpp would make that guard decorative. So every GGUF bound for a native loader is first a regular
file, then inspected by ``qcheck.inspect`` (an ``InputError`` there is the run's answer, exit 2), and its identity
(device, inode, size, modification and change times) is taken then and compared again just before the load: a
file replaced or rewritten between the two is refused too.

Callers: ``qcheck.eval.runners.llamacpp`` (llama-cpp-python). A GGUF given to transformers (``gguf_file=``, which
reads it with gguf-py's ``GGUFReader``) must pass through ``vet`` the same way; tests/test_redteam_eval.py fails
when a module calls a GGUF loader without it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Any

from qcheck.errors import InputError
from qcheck.limits import DEFAULT_LIMITS, Limits


@dataclass(frozen=True)
class Vetted:
    """A GGUF file qcheck inspected and accepted, with the identity it had then."""

    path: str
    #: the ``qcheck.model.Inspection`` of the file
    inspection: Any
    #: (device, inode, size, mtime, ctime) of each file the loader reads (the shards of a split GGUF)
    identity: tuple[tuple[int, ...], ...]
    files: tuple[str, ...] = ()


def _identity(paths: tuple[str, ...]) -> tuple[tuple[int, ...], ...]:
    out = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError as exc:
            raise InputError(f"cannot read the file: {exc.strerror or exc}", path=path) from None
        if not stat.S_ISREG(info.st_mode):
            raise InputError("not a regular file (a native loader only gets regular files)", path=path)
        out.append((info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns))
    return tuple(out)


def vet(path: str, limits: Limits = DEFAULT_LIMITS, *, container: str = "gguf") -> Vetted:
    """Inspect ``path`` as ``qcheck inspect`` does; raise the refusal (``InputError``, exit 2) if qcheck refuses it or
    it is not a regular ``container`` file. The returned record goes to ``still_vetted`` right before the load."""
    before = _identity((path,))
    from qcheck.inspect import inspect_path

    inspection = inspect_path(path, limits=limits)
    if inspection.container != container:
        raise InputError(f"not a {container.upper()} file (qcheck reads it as {inspection.container})", path=path)
    folder = os.path.dirname(path)
    shards = tuple(p for p in (os.path.join(folder, f.name) for f in inspection.files if f.kind == container)
                   if not os.path.samefile(p, path)) if len(inspection.files) > 1 else ()
    vetted = Vetted(path=path, inspection=inspection, identity=before + _identity(shards), files=(path, *shards))
    still_vetted(vetted)
    return vetted


def still_vetted(vetted: Vetted) -> str:
    """The path to hand to the native loader, after checking the file is still the one inspected."""
    if _identity(vetted.files or (vetted.path,)) != vetted.identity:
        raise InputError("the file changed after qcheck inspected it; not loaded", path=vetted.path)
    return vetted.path
