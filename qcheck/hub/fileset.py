"""``HubFileSet``: a Hub repo at one commit, seen through the ``FileSet`` protocol the local readers use.

The listing (names and sizes) comes from one model-info call (``/api/models/{repo}/revision/{rev}?blobs=true``,
what ``HfApi.model_info(files_metadata=True)`` sends), which also resolves a branch or tag to a commit; every
later read is pinned to that commit, so a push during the run cannot mix two versions. Files already in the local
Hugging Face cache for that commit are read from disk. ``prefetch`` starts header reads of many shards at once
on a thread pool, so a 163-shard model costs a few round trips rather than one per shard.
"""

from __future__ import annotations

import builtins  # the class has a method named list: annotations inside it name the builtin
import os
import re
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from pathlib import Path, PurePosixPath
from urllib.parse import quote

from qcheck.errors import InputError, RemoteError
from qcheck.hub.http import HubClient, HubPool, hub_endpoint
from qcheck.hub.source import HubFileSource
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.net import Call
from qcheck.source import ByteSource, FileEntry, LocalFileSet, LocalFileSource

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
#: small JSON side files worth fetching up front (what the readers and classifier look at)
SIDE_FILES = ("config.json", "model.safetensors.index.json", "hf_quant_config.json", "quantize_config.json",
              "quant_config.json", "quantization_config.json", "generation_config.json", "adapter_config.json")


def hub_cache_dir() -> str:
    """huggingface_hub's cache folder, from the environment now (``HF_HUB_CACHE``, ``HF_HOME``) or its default."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def _safe_name(name: str, where: str) -> str:
    p = PurePosixPath(name)
    if not name or p.is_absolute() or ".." in p.parts or "\\" in name or "\x00" in name:
        raise InputError(f"the repo listing has an unsafe file name {name!r}", path=where)
    return name


def _workers() -> int:
    raw = os.environ.get("QCHECK_HUB_WORKERS", "")
    return max(1, min(256, int(raw[:4]))) if raw.isascii() and raw.isdigit() else 64  # isdigit alone takes '²'


class HubFileSet:
    """Files of ``repo_id`` at ``revision`` (a commit sha). ``list`` shows top-level files, like a local directory."""

    def __init__(self, client: HubClient, repo_id: str, revision: str, files: dict[str, int | None], *,
                 requested_revision: str | None = None, limits: Limits = DEFAULT_LIMITS,
                 cache_dir: str | None = None):
        self.client = client
        self.repo_id = repo_id
        self.revision = revision
        self.requested_revision = requested_revision
        self.root = f"{repo_id}@{requested_revision}" if requested_revision else repo_id
        self.files = files
        self.limits = limits
        self.cache_dir = cache_dir
        self._sources: dict[str, ByteSource] = {}
        self._small: dict[str, Future[bytes]] = {}
        self._pool: HubPool | None = None
        self._snapshot: Path | bool | None = False  # False: not looked up yet; None: nothing cached

    # -- FileSet protocol --------------------------------------------------------------------------
    def list(self) -> list[FileEntry]:
        return [FileEntry(n, s) for n, s in sorted(self.files.items()) if "/" not in n]

    def all_files(self) -> builtins.list[FileEntry]:
        """Every file in the repo, sub-folders included."""
        return [FileEntry(n, s) for n, s in sorted(self.files.items())]

    def exists(self, name: str) -> bool:
        return name in self.files

    def url(self, name: str) -> str:
        """``{endpoint}/{repo}/resolve/{commit}/{file}``: what ``huggingface_hub.hf_hub_url`` builds."""
        return f"{self.client.endpoint}/{self.repo_id}/resolve/{self.revision}/{quote(name)}"

    def open(self, name: str) -> ByteSource:
        if name in self._sources:
            return self._sources[name]
        if name not in self.files:
            from qcheck.hub.errors import NotFoundError

            raise NotFoundError(f"file {name!r} not found in {self.repo_id}@{self.revision[:12]}")
        cached = self._cached_path(name)
        source: ByteSource
        if cached is not None:
            source = _KeepOpenLocal(cached, display=f"{self.repo_id}@{self.revision[:12]}:{name}")
        else:
            source = HubFileSource(self.client, repo_id=self.repo_id, revision=self.revision, filename=name,
                                   url=self.url(name), size=self.files.get(name), limits=self.limits)
        return self._sources.setdefault(name, source)

    def read_small(self, name: str, max_bytes: int) -> bytes:
        fut = self._small.get(name)
        if fut is None:
            return self._read_small(name, max_bytes)
        budget = self.client.budget
        try:  # the worker may be stalled by the server: wait no longer than the run's deadline
            data = fut.result(timeout=max(0.0, budget.remaining()))
        except FutureTimeout:
            raise budget.deadline_error(name, self.repo_id, self.client.endpoint) from None
        if len(data) > max_bytes:
            raise InputError(f"file is over the {max_bytes}-byte limit for side files",
                             path=f"{self.repo_id}:{name}")
        return data

    def _read_small(self, name: str, max_bytes: int) -> bytes:
        where = f"{self.repo_id}:{name}"
        if name not in self.files:
            from qcheck.hub.errors import NotFoundError

            raise NotFoundError(f"file {name!r} not found in {self.repo_id}@{self.revision[:12]}")
        size = self.files.get(name)
        if size is not None and size > max_bytes:
            raise InputError(f"file is {size} bytes, over the {max_bytes}-byte limit for side files", path=where)
        cached = self._cached_path(name)
        if cached is not None:
            with LocalFileSource(cached, display=where) as src:
                if src.size is not None and src.size > max_bytes:
                    raise InputError(f"file is {src.size} bytes, over the {max_bytes}-byte limit", path=where)
                return src.read_at(0, max_bytes + 1)
        resp = self.client.request("GET", self.url(name), Call(max_bytes=max_bytes + 1), repo_id=self.repo_id,
                                   what=name, revision=self.revision)
        if len(resp.body) > max_bytes:
            raise InputError(f"file is over the {max_bytes}-byte limit for side files", path=where)
        return resp.body

    # -- local cache ---------------------------------------------------------------------------------
    def _cached_path(self, name: str) -> str | None:
        folder = self._snapshot_dir()
        if folder is None:
            return None
        path = folder.joinpath(*PurePosixPath(name).parts)
        try:
            if path.is_file() and (self.files.get(name) is None or path.stat().st_size == self.files[name]):
                return str(path)
        except OSError:
            return None
        return None

    def _snapshot_dir(self) -> Path | None:
        """This commit's folder in the local cache, looked up once: without one, no file is cached (one ``stat``
        per run, not one per shard)."""
        if self._snapshot is False:
            folder = None
            if self.cache_dir is not None:
                folder = (Path(self.cache_dir) / f"models--{self.repo_id.replace('/', '--')}" / "snapshots"
                          / self.revision)
                try:
                    folder = folder if folder.is_dir() else None
                except OSError:
                    folder = None
            self._snapshot = folder
        return self._snapshot if isinstance(self._snapshot, Path) else None

    # -- concurrency ---------------------------------------------------------------------------------
    def _executor(self) -> HubPool:
        if self._pool is None:
            self._pool = HubPool(_workers())
        return self._pool

    def prefetch_small(self, names: builtins.list[str], max_bytes: int | None = None) -> None:
        """Start fetching small side files (those that exist) in the background; ``read_small`` waits for them."""
        limit = max_bytes or self.limits.max_json_bytes
        for name in names:
            if name in self.files and name not in self._small:
                self._small[name] = self._executor().submit(partial(self._read_small, name, limit))

    def prefetch_headers(self, names: builtins.list[str]) -> builtins.list[Future[None]]:
        """Start reading the headers of many files at once: whole safetensors headers, GGUF first chunks."""
        futures = []
        for name in names:
            src = self.open(name)
            if not isinstance(src, HubFileSource):
                continue
            task = src.prefetch_safetensors_header if name.lower().endswith(".safetensors") else src.prefetch
            futures.append(self._executor().submit(partial(_quiet, task)))
        return futures

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def stats(self) -> dict[str, dict[str, int]]:
        """Requests and bytes per file so far (for tests, ``bench/`` and ``--verbose``)."""
        return {k: {"requests": v.requests, "bytes": v.bytes} for k, v in self.client.stats.items()}


def _quiet(task) -> None:
    """Run a prefetch; its errors are dropped because the reader's own read repeats it and reports it properly."""
    try:
        task()
    except (RemoteError, InputError):
        pass


class _KeepOpenLocal(LocalFileSource):
    """A cached local file handed out more than once: ``close`` is deferred to garbage collection."""

    def close(self) -> None:
        pass

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            LocalFileSource.close(self)
        except Exception:
            pass


class CachedFileSet(LocalFileSet):
    """A repo snapshot in the local Hugging Face cache (``HF_HUB_OFFLINE=1``): a local directory with a commit."""

    def __init__(self, path: str, repo_id: str, revision: str, requested_revision: str | None):
        super().__init__(path)
        self.repo_id = repo_id
        self.revision = revision
        self.requested_revision = requested_revision
        self.root = f"{repo_id}@{requested_revision}" if requested_revision else repo_id

    def all_files(self) -> list[FileEntry]:
        out = []
        base = Path(self.path)
        for dirpath, _dirs, names in os.walk(base, followlinks=False):
            for n in names:
                p = Path(dirpath) / n
                try:
                    if p.is_file():
                        out.append(FileEntry(p.relative_to(base).as_posix(), p.stat().st_size))
                except OSError:
                    continue
        return sorted(out, key=lambda e: e.name)

    def prefetch_small(self, names: list[str], max_bytes: int | None = None) -> None:
        return None

    def prefetch_headers(self, names: list[str]) -> list[Future[None]]:
        return []

    def close(self) -> None:
        return None


def cached_snapshot(repo_id: str, revision: str | None, cache_dir: str | None = None) -> CachedFileSet:
    """The cached snapshot of ``repo_id`` at ``revision`` (branch, tag or commit), or a RemoteError saying so."""
    cache = Path(cache_dir or hub_cache_dir())
    repo_dir = cache / f"models--{repo_id.replace('/', '--')}"
    ref = revision or "main"
    commit = ref if COMMIT_RE.match(ref) else None
    if commit is None:
        ref_file = repo_dir / "refs" / ref
        try:
            commit = ref_file.read_text(encoding="utf-8").strip()
        except OSError:
            commit = None
    if commit is None or not COMMIT_RE.match(commit) or not (repo_dir / "snapshots" / commit).is_dir():
        raise RemoteError(f"HF_HUB_OFFLINE is set and {repo_id}@{ref} is not in the local Hugging Face cache "
                          f"({cache}); unset HF_HUB_OFFLINE: qcheck reads only the headers, by range requests (no weights "
                          "downloaded)")
    return CachedFileSet(str(repo_dir / "snapshots" / commit), repo_id, commit, revision)


def _parse_listing(body: bytes, where: str, revision: str | None, limits: Limits
                   ) -> tuple[str, list[tuple[str, int | None]]]:
    """The commit and (file, size) pairs of a model-info answer, typed field by field: the answer comes from
    whatever ``HF_ENDPOINT`` points at, so nesting is bounded by qcheck's JSON parser and every field the
    listing uses is checked (a mistyped or deeply nested answer is one RemoteError/InputError line)."""
    from qcheck.readers.jsonfile import loads_document
    from qcheck.typed import as_int

    try:
        data = loads_document(body, name="repo info", limits=limits, path=where)
    except InputError as exc:
        raise RemoteError(f"the Hub answered something that is not model info: {exc}") from None
    sha = data.get("sha")
    if "id" not in data:
        raise RemoteError(f"{where}: the Hub answered something that is not model info")
    if not isinstance(sha, str) or not COMMIT_RE.match(sha):
        raise RemoteError(f"{where}: the Hub did not report a commit for revision {revision or 'main'}")
    raw = data.get("siblings") or []
    if not isinstance(raw, list):
        raise RemoteError(f"{where}: siblings is not a list")
    if len(raw) > limits.max_tensors:
        raise InputError(f"repo lists {len(raw)} files, over the limit {limits.max_tensors}", path=where)
    out: list[tuple[str, int | None]] = []
    for entry in raw:
        name = entry.get("rfilename") if isinstance(entry, dict) else None
        if not isinstance(name, str):
            raise RemoteError(f"{where}: a listed file has no name (rfilename)")
        lfs = entry.get("lfs")
        size_raw = entry.get("size")
        if size_raw is None and isinstance(lfs, dict):
            size_raw = lfs.get("size")
        size = as_int(size_raw, minimum=0, maximum=1 << 62)
        if size_raw is not None and size is None:
            raise InputError(f"repo info gives file {name!r} a bad size {size_raw!r}"[:300], path=where)
        out.append((name, size))
    return sha, out


def fetch_listing(client: HubClient, repo_id: str, revision: str | None, limits: Limits
                  ) -> tuple[str, dict[str, int | None]]:
    """One model-info call: the commit the revision points to, and every file with its size."""
    endpoint = client.endpoint or hub_endpoint()
    url = (f"{endpoint}/api/models/{repo_id}" if revision is None
           else f"{endpoint}/api/models/{repo_id}/revision/{quote(revision, safe='')}")
    resp = client.request("GET", url, Call(max_bytes=limits.max_json_bytes + 1, params={"blobs": "true"}),
                          repo_id=repo_id, what="repo info", revision=revision)
    where = f"{repo_id} (repo info)"
    if len(resp.body) > limits.max_json_bytes:
        raise InputError(f"repo info is over {limits.max_json_bytes} bytes (limit max_json_bytes)", path=where)
    sha, siblings = _parse_listing(resp.body, where, revision, limits)
    if len(siblings) > limits.max_tensors:
        raise InputError(f"repo lists {len(siblings)} files, over the limit {limits.max_tensors}", path=where)
    files: dict[str, int | None] = {}
    for name, size in siblings:
        files[_safe_name(name, where)] = size
    return sha, files
