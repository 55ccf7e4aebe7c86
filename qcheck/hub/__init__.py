"""Inspect checkpoints on the Hugging Face Hub without downloading them.

``resolve_target("org/name@rev:Q4_K_M", limits)`` resolves the revision to a commit, lists the repo, picks the
files that make the checkpoint and starts reading their headers concurrently; the returned ``FileSet`` is read by
the same readers as a local directory (one parser, two sources). Nothing here imports torch or numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from qcheck.errors import AmbiguousTargetError
from qcheck.hub.target import HubTarget, hub_target, looks_like_repo_id, origin_of, parse_target
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.source import FileSet

if TYPE_CHECKING:
    from qcheck.hub.errors import GatedRepoError, NetworkError, NotFoundError, RateLimitedError, redact
    from qcheck.hub.select import GgufChoice, gguf_choices

#: names imported when first used: a local check that only parses a target name does not load the HTTP stack
_LAZY = {"GatedRepoError": "errors", "NetworkError": "errors", "NotFoundError": "errors",
         "RateLimitedError": "errors", "redact": "errors", "GgufChoice": "select", "gguf_choices": "select"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"qcheck.hub.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'qcheck.hub' has no attribute {name!r}")

__all__ = [
    "AmbiguousTargetError", "GatedRepoError", "GgufChoice", "HubTarget", "NetworkError", "NotFoundError",
    "RateLimitedError", "gguf_choices", "hub_target", "looks_like_repo_id", "open_repo", "origin_of", "parse_target",
    "redact",
    "resolve_target", "resolve_targets",
]


def open_repo(target: HubTarget | str, limits: Limits = DEFAULT_LIMITS, *, retries: int | None = None) -> FileSet:
    """The repo at the target's revision as a FileSet: a ``HubFileSet`` pinned to a commit, or the cached snapshot
    when ``HF_HUB_OFFLINE`` is set. ``retries`` overrides ``QCHECK_HUB_RETRIES`` for this repo's requests (an
    optional read, such as the smaller quants an option looks for, makes one attempt: no wait, no retry notice)."""
    from qcheck.hub.fileset import HubFileSet, cached_snapshot, fetch_listing, hub_cache_dir
    from qcheck.hub.http import HubClient, hub_offline

    t = parse_target(target) if isinstance(target, str) else target
    if t.revision == "*":
        from qcheck.errors import UsageError

        raise UsageError(f"{t.display()}: '@*' (every branch) is for the which-quant-fits table: qcheck check "
                         f"{t.repo_id}@* --gpu G; name one branch here ({t.repo_id}@main)")
    if hub_offline():
        return cached_snapshot(t.repo_id, t.revision)
    client = HubClient.from_env(retries=retries)
    commit, files = fetch_listing(client, t.repo_id, t.revision, limits)
    return HubFileSet(client, t.repo_id, commit, files, requested_revision=t.revision, limits=limits,
                      cache_dir=hub_cache_dir())


def _files_of(fs: FileSet) -> dict[str, int | None]:
    entries = fs.all_files() if hasattr(fs, "all_files") else fs.list()
    return {e.name: e.size for e in entries}


def resolve_targets(target: HubTarget | str, limits: Limits = DEFAULT_LIMITS, *, all_models: bool = False
                    ) -> list[tuple[FileSet, list[str] | None]]:
    """Every checkpoint the target names: ``(fileset, names)`` pairs, ``names`` None meaning "the model directory".

    Several only for a GGUF repo with ``all_models`` (``--all``) or a quant selector matching several models.
    Header reads of the chosen files start in the background before this returns.
    """
    from qcheck.hub.fileset import SIDE_FILES
    from qcheck.hub.select import pick

    t = parse_target(target) if isinstance(target, str) else target
    fs = open_repo(t, limits)
    files = _files_of(fs)
    label = t.repo_id + (f"@{t.revision}" if t.revision else "")
    picks = pick(files, t.selector, label, all_models=all_models)
    prefetch_small = getattr(fs, "prefetch_small", None)
    prefetch_headers = getattr(fs, "prefetch_headers", None)
    if prefetch_small is not None and prefetch_headers is not None:
        prefetch_small([n for n in SIDE_FILES if n in files])
        for names in picks:
            if names is None:
                prefetch_headers(_safetensors_shards(files, limits))
            else:
                prefetch_headers([n for n in names if n.lower().endswith((".gguf", ".safetensors"))])
    return [(fs, names) for names in picks]


def resolve_target(target: HubTarget | str, limits: Limits = DEFAULT_LIMITS) -> tuple[FileSet, list[str] | None]:
    """The one checkpoint a Hub target names (see ``resolve_targets``); several GGUF models without a quant selector
    are an ``AmbiguousTargetError`` (a UsageError, exit 2) whose message lists them."""
    return resolve_targets(target, limits)[0]


def _safetensors_shards(files: dict[str, int | None], limits: Limits) -> list[str]:
    """Every top-level .safetensors file: the listing already names the shards, so no index round trip is spent
    before their headers start loading (an extra file such as ``consolidated.safetensors`` costs one 100 kB read)."""
    return sorted(n for n in files if "/" not in n and n.lower().endswith(".safetensors"))[: limits.max_shards]
