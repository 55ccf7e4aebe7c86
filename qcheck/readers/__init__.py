"""The one entry point for reading a checkpoint: a path, a directory or a Hub repo id -> ``Checkpoint``.

Files are recognised by their first bytes, not their names (a ``.bin`` may be a safetensors file, a
``.safetensors`` may be a Git LFS pointer): GGUF magic, the safetensors length + ``{``, a zip (torch's
pickle container), a Git LFS pointer, a raw pickle. The name only picks the more useful error message
when the bytes match nothing. Local directories and Hub repos go through the same ``FileSet`` code.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from qcheck.errors import InputError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.model import Checkpoint, Origin
from qcheck.readers.lfs import is_lfs_pointer, raise_for_pointer
from qcheck.source import FileSet, LocalFileSet

if TYPE_CHECKING:
    from qcheck.hub.target import looks_like_repo_id
    from qcheck.readers.directory import read_side_files

# The readers of each format (and the Hub client) are imported when a file of that kind is met: reading one GGUF
# file does not load the safetensors, pickle or Hub code.

SNIFF_BYTES = 64
#: bytes read to recognise a protocol 0/1 pickle (it has no magic: it must parse to STOP)
PICKLE_SNIFF_BYTES = 1 << 20

__all__ = ["LocalFileSet", "load_checkpoint", "load_checkpoints", "load_from_fileset", "looks_like_repo_id",
           "read_side_files", "sniff"]


def __getattr__(name: str) -> Any:
    if name == "looks_like_repo_id":
        from qcheck.hub.target import looks_like_repo_id

        return looks_like_repo_id
    if name == "read_side_files":
        from qcheck.readers.directory import read_side_files

        return read_side_files
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_checkpoint(target: str, limits: Limits = DEFAULT_LIMITS) -> Checkpoint:
    """Read the checkpoint at a local file or directory, or a Hub repo id, headers only.

    Running out of memory on a header within the limits (a bloated header under a small memory cap:
    ~1 KB per safetensors entry, ~0.5 KB per GGUF tensor) is an InputError naming the limits to lower,
    not an internal error.
    """
    try:
        return _load_checkpoint(target, limits)
    except MemoryError:
        raise InputError("ran out of memory reading the headers (a bloated header?); lower the bounds with "
                         "--limit max_tensors=N, max_safetensors_header=N or max_header_bytes=N, or give qcheck "
                         "more memory", path=target) from None


def _load_checkpoint(target: str, limits: Limits) -> Checkpoint:
    if not target:
        raise InputError("empty path")
    if os.path.isdir(target):
        return load_from_fileset(LocalFileSet(target), None, limits, path=target)
    if os.path.lexists(target):
        if not os.path.exists(target):
            raise InputError("broken symbolic link", path=target)
        if not os.path.isfile(target):
            raise InputError("not a regular file or directory", path=target)
        parent, name = os.path.split(target)
        return load_from_fileset(LocalFileSet(parent or "."), [name], limits, path=target)
    from qcheck.hub.target import hub_target

    hub = hub_target(target)
    if hub is not None:
        from qcheck.hub import resolve_target

        fileset, names = resolve_target(hub, limits)
        return load_from_fileset(fileset, names, limits, path=target, origin="hub")
    raise InputError("no such file or directory" + _not_a_repo_id(target), path=target)


def _not_a_repo_id(target: str) -> str:
    """Why an ``org/name``-shaped missing path is not a Hub repo id either ('' for other paths)."""
    from qcheck.hub.target import LOCAL_SUFFIXES, repo_id_problem

    repo = target.split("@", 1)[0].split(":", 1)[0]
    if target.startswith((".", "/", "~")) or repo.count("/") != 1 or repo.lower().endswith(LOCAL_SUFFIXES):
        return ""
    problem = repo_id_problem(repo)
    return f" (nor a Hub repo id: {problem})" if problem else ""


def load_checkpoints(target: str, limits: Limits = DEFAULT_LIMITS, *, all_models: bool = False) -> list[Checkpoint]:
    """Every checkpoint ``target`` names (``--all``): each GGUF model (file or split set) of a directory or Hub repo.

    Without ``all_models``, or when the target holds one model (a file, a safetensors directory, a directory with
    one GGUF set), this is ``[load_checkpoint(target)]``: the same Checkpoint, the same path. Each of several GGUF
    models gets its own path: ``DIR/FILE`` locally, ``org/name[@revision]:FILE`` on the Hub (the commit is in
    ``revision``).
    """
    try:
        return _load_checkpoints(target, limits, all_models)
    except MemoryError:
        raise InputError("ran out of memory reading the headers (a bloated header?); lower the bounds with "
                         "--limit max_tensors=N, max_safetensors_header=N or max_header_bytes=N, or give qcheck "
                         "more memory", path=target) from None


def _load_checkpoints(target: str, limits: Limits, all_models: bool) -> list[Checkpoint]:
    from qcheck.hub.target import hub_target
    from qcheck.readers.directory import INDEX_SUFFIX, gguf_groups

    if not all_models or (target and os.path.lexists(target) and not os.path.isdir(target)):
        return [_load_checkpoint(target, limits)]
    if target and os.path.isdir(target):
        local = LocalFileSet(target)
        top = [e.name for e in local.list() if "/" not in e.name]
        if any(n.endswith((".safetensors", INDEX_SUFFIX)) for n in top):
            return [_load_checkpoint(target, limits)]  # the safetensors model wins, as without --all
        groups = gguf_groups([n for n in top if n.lower().endswith(".gguf")])
        if len(groups) < 2:
            return [_load_checkpoint(target, limits)]
        return [load_from_fileset(local, members, limits, path=os.path.join(target, members[0]))
                for members in groups.values()]
    hub = hub_target(target) if target else None
    if hub is None:
        return [_load_checkpoint(target, limits)]  # raises the right "no such file" error
    from qcheck.hub import HubTarget, resolve_targets

    picks = resolve_targets(hub, limits, all_models=True)
    if len(picks) == 1:
        fileset, names = picks[0]
        return [load_from_fileset(fileset, names, limits, path=target, origin="hub")]
    out = []
    for fileset, names in picks:
        display = target if names is None else HubTarget(hub.repo_id, hub.revision, names[0]).display()
        out.append(load_from_fileset(fileset, names, limits, path=display, origin="hub"))
    return out


def load_from_fileset(fileset: FileSet, names: list[str] | None, limits: Limits = DEFAULT_LIMITS, *,
                      path: str | None = None, origin: Origin = "local") -> Checkpoint:
    """Shared logic for local directories and Hub repos: ``names`` None = the whole directory/repo; ``origin``
    is recorded on the Checkpoint so nothing downstream guesses it from the path."""
    display = path or fileset.root
    if names is None:
        from qcheck.readers.directory import load_model_dir

        checkpoint = load_model_dir(fileset, limits, path=display)
    else:
        checkpoint = _load_named(fileset, list(names), limits, display)
    checkpoint.path = display
    checkpoint.origin = origin
    if checkpoint.revision is None:
        checkpoint.revision = fileset.revision
    return checkpoint


def sniff(head: bytes) -> str:
    """The kind of file the first bytes announce: gguf, safetensors, zip, lfs-pointer, pickle or unknown."""
    if head.startswith(b"GGUF"):
        return "gguf"
    from qcheck.readers.pickle import EMPTY_ZIP_MAGIC, ZIP_MAGIC, looks_like_pickle
    from qcheck.readers.safetensors import looks_like_safetensors

    if looks_like_safetensors(head):
        return "safetensors"
    if head.startswith((ZIP_MAGIC, EMPTY_ZIP_MAGIC)):
        return "zip"
    if is_lfs_pointer(head):
        return "lfs-pointer"
    if looks_like_pickle(head):
        return "pickle"
    return "unknown"


def _load_named(fileset: FileSet, names: list[str], limits: Limits, display: str) -> Checkpoint:
    from qcheck.readers.directory import INDEX_SUFFIX, load_gguf_choice, load_pickles, load_safetensors_files

    if not names:
        raise InputError("no files to read", path=display)
    jsons = [n for n in names if n.lower().endswith(".json")]
    weights = [n for n in names if n not in jsons]
    index = next((n for n in jsons if n.endswith(INDEX_SUFFIX)), None)
    if not weights:
        if index is not None:
            return load_safetensors_files(fileset, [], limits, path=display, index_name=index)
        raise InputError(f"{', '.join(names)}: a JSON side file is not a checkpoint; pass the model directory",
                         path=display)
    kinds: dict[str, list[str]] = {}
    for name in weights:
        kinds.setdefault(_kind_of(fileset, name, limits), []).append(name)
    if len(kinds) > 1:
        detail = "; ".join(f"{kind}: {', '.join(members)}" for kind, members in sorted(kinds.items()))
        raise InputError(f"files of different formats given together ({detail}); pass one checkpoint", path=display)
    ((kind, members),) = kinds.items()
    if kind == "gguf":
        return load_gguf_choice(fileset, members, limits, path=display)
    if kind == "safetensors":
        checkpoint = load_safetensors_files(fileset, members, limits, path=display, index_name=index)
        sibling_index = _prefix(members[0]) + "model.safetensors.index.json"
        if index is None and sibling_index not in members and fileset.exists(sibling_index):
            checkpoint.warnings.append(f"{sibling_index} lists the shards of a larger model; only "
                                       f"{', '.join(members)} was read (pass the directory for the whole model)")
        return checkpoint
    # pickles: static scan only
    return load_pickles(fileset, members, limits, path=display)


def _kind_of(fileset: FileSet, name: str, limits: Limits) -> str:
    """Recognise one file by content; raise the most useful InputError when it is not a checkpoint."""
    # Not closed here: a Hub FileSet hands out one cached source per file, and closing it would drop
    # the header bytes already fetched; local sources close themselves when released.
    source = fileset.open(name)
    if source.size == 0:
        raise InputError("empty file (0 bytes)", path=source.name)
    head = source.read_at(0, SNIFF_BYTES)
    kind = sniff(head)
    if kind == "gguf":
        return kind
    from qcheck.readers.pickle import looks_like_pickle, zip_pickle_entries
    from qcheck.readers.safetensors import read_safetensors_header

    if (kind == "unknown" and not name.lower().endswith((".safetensors", ".gguf"))
            and looks_like_pickle(source.read_at(0, PICKLE_SNIFF_BYTES))):
        kind = "pickle"
    if kind == "lfs-pointer":
        raise_for_pointer(source)
    if kind == "zip":
        if not zip_pickle_entries(source, limits):
            raise InputError("not a checkpoint: a zip archive without data.pkl (not a PyTorch file)",
                             path=source.name)
        return "pickle"
    if kind != "unknown":
        return kind
    lower = name.lower()
    if lower.endswith(".safetensors"):
        read_safetensors_header(source, limits, file=name)  # raises the specific problem
    elif lower.endswith(".gguf"):
        return "gguf"  # the GGUF reader names the bad magic/version itself
    raise InputError(f"not a checkpoint: {_describe(head)}", path=source.name)


def _prefix(name: str) -> str:
    return name.rsplit("/", 1)[0] + "/" if "/" in name else ""


#: what a few common non-checkpoint files start with, to name them without showing their bytes
_KNOWN_MAGIC = ((b"\x89PNG", "a PNG image"), (b"\xff\xd8\xff", "a JPEG image"), (b"\x1f\x8b", "gzip data"),
                (b"\x7fELF", "an ELF executable"), (b"%PDF", "a PDF document"), (b"BZh", "bzip2 data"),
                (b"\xfd7zXZ", "xz data"), (b"\x28\xb5\x2f\xfd", "zstd data"), (b"\x93NUMPY", "a NumPy .npy array"),
                (b"\x89HDF", "an HDF5 file"), (b"ggjt", "a pre-GGUF GGML file"), (b"ggml", "a pre-GGUF GGML file"))


def _describe(head: bytes) -> str:
    """What the file seems to be, never its bytes: an unknown file may be a secret (a token, a key)
    that a policy or a symlink pointed at, and error lines end up in CI logs and reports."""
    for magic, label in _KNOWN_MAGIC:
        if head.startswith(magic):
            return f"it looks like {label}"
    if head.lstrip()[:1] in (b"{", b"["):
        return "it looks like JSON or text"
    if all(32 <= b < 127 or b in (9, 10, 13) for b in head):
        return "it looks like text"
    return "it is not a GGUF, safetensors, PyTorch zip or pickle file (contents not shown)"
