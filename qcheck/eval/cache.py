"""The on-disk cache of the reference model's per-token log-probabilities.

Why: the reference is the expensive, unquantised model; it is run once per (model, tasks, tokenizer,
settings) and every candidate, in this run or a later one, is compared item by item against the stored
rows. The file is written incrementally while the reference runs and read back one request at a time, so
memory never holds ``tokens x vocab`` for the whole task set.

Layout: ``<cache_dir>/ref-<key>/`` with ``meta.json`` (what was cached, written last: its presence marks
a complete entry), ``index.json`` (request key -> offset, rows) and ``rows.bin``: one fixed-size
little-endian record per scored position, a request's rows contiguous. Fixed-size rows let the reference
write a request in blocks of rows as it computes them and a candidate read back any block of rows, so
neither side ever holds ``tokens x vocab`` for a whole long item (format 2; format 1 kept one record per
request).
A directory is written as ``.partial-*`` and renamed into place when complete, so an interrupted run never
leaves an entry that looks valid.

Trust (docs/security.md "The eval cache"): an entry is used only for the key it is filed under, and only when
``auth.json`` holds the SHA-256 of each of its files and an HMAC-SHA256 over those digests and the entry's name made
with this user's cache key (``qcheck.cache_auth``, kept outside the cache folder), when the entry folder and its files
are this user's, not writable by others, and regular files (never a link, a FIFO, a device). Anything else is
``RejectedEntry``: the reference is computed again and the entry replaced. Writing the cache folder is therefore not
enough to plant rows; copying an entry under another key, or from another user's cache, fails too.

Two encodings (``kind`` in the report):

``full-u16`` (default)
    Every row keeps the full vocabulary as 16-bit quantised log-probs, the layout of llama.cpp's
    ``--kl-divergence-base`` file (docs/research/evals.md §1.2): per row a float32 ``scale`` and float32
    ``min_log_prob`` and ``V`` uint16 codes, ``log p = scale * q + min_log_prob``. We use a 24-nat window
    below the row's top log-prob where llama.cpp uses 16: every log-prob within the window is stored to
    within ±24/131070 = ±1.83e-4 nats; log-probs below it are raised to the floor (their total mass is at
    most ``V * e^-24``, 4.9e-6 for a 128k vocabulary). Decoded rows are renormalised, so the KL divergence
    of an identical candidate is ~1e-8, never negative. Size: ``2 * V + 16`` bytes per scored token.
``topk``
    (``--cache-topk K``) The reference's top-K ids (int32) and log-probs (float32) and the tail mass
    ``1 - Σ top-K``; KL divergence against it is the bucketed lower bound (docs/research/evals.md §5.7).
    Size: ``8 * K + 8`` bytes per scored token.

Both keep, per row, the exact float32 log-prob of the actual next token and the argmax id, so NLL, Δp,
perplexity and top-1 agreement are exact in either encoding.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qcheck import cache_auth
from qcheck.errors import InputError
from qcheck.eval.runners.base import Generation, TokenScores
from qcheck.eval.runners.http import RunState

FORMAT_VERSION = 2
WINDOW_NATS = 24.0
KIND_FULL = "full-u16"
KIND_TOPK = "topk"
#: a top-k row shorter than K (an endpoint returned fewer entries) is padded with this id, which no metric counts,
#: and this log-probability
PAD_ID = -1
PAD_LOGPROB = -1e4
#: what an entry's tag is made for (``qcheck.cache_auth.sign``)
PURPOSE = "qcheck eval reference cache entry/1"
#: the files of an entry, each covered by the tag; ``auth.json`` holds the tag
FILES = ("meta.json", "index.json", "generations.json", "rows.bin")
AUTH = "auth.json"
#: largest JSON file of an entry read back (an index of 100k items in windows, their generations)
MAX_JSON_BYTES = 1 << 30


class RejectedEntry(Exception):
    """A cache entry exists but is not used: not this user's, altered, planted, or unreadable (the message says
    which, one line). The reference is computed again and the entry replaced."""


def row_dtype(kind: str, vocab_size: int, topk: int | None) -> np.dtype:
    """The numpy record of one cached row: target log-prob, argmax, then the encoded row."""
    head = [("target", "<f4"), ("argmax", "<i4")]
    if kind == KIND_FULL:
        return np.dtype([*head, ("scale", "<f4"), ("floor", "<f4"), ("codes", "<u2", (vocab_size,))])
    k = int(topk or 1)
    return np.dtype([*head, ("ids", "<i4", (k,)), ("vals", "<f4", (k,))])


def default_cache_dir() -> Path:
    """``$QCHECK_CACHE_DIR``, else ``$XDG_CACHE_HOME/qcheck``, else ``~/.cache/qcheck``; entries live in ``eval/``."""
    env = os.environ.get("QCHECK_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "qcheck"


def entry_key() -> tuple[bytes, str | None]:
    """The key entries are signed and verified with: this user's (``qcheck.cache_auth``), else a random one for this
    run only (entries of earlier runs are then never used), with why."""
    try:
        return cache_auth.load_key(), None
    except cache_auth.KeyUnavailable as exc:
        return secrets.token_bytes(cache_auth.KEY_BYTES), f"{exc}; reference cache entries are not reused"


def _user_key() -> bytes:
    try:
        return cache_auth.load_key()
    except cache_auth.KeyUnavailable as exc:
        raise InputError(str(exc)) from None


def _payload(entry: str, digests: dict[str, str]) -> bytes:
    return json.dumps({"entry": entry, "files": digests}, sort_keys=True, separators=(",", ":")).encode()


def _create_private(path: Path) -> int:
    """A new file only this user may read or write (whatever the umask), opened for writing."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) |
                   getattr(os, "O_BINARY", 0), 0o600)


def cache_key(parts: dict[str, Any]) -> str:
    """A stable hash of everything that determines the reference's numbers."""
    blob = json.dumps({"format": FORMAT_VERSION, **parts}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class RefRows:
    """The reference at the scored positions of one request, as decoded from the cache."""

    target_logprobs: np.ndarray  # (n,) float32, exact
    argmax: np.ndarray  # (n,) int64
    full: np.ndarray | None = None  # (n, V) float32 log-probs, renormalised
    probs: np.ndarray | None = None  # (n, V) float32 exp(full), when decoded from full rows
    topk_ids: np.ndarray | None = None  # (n, K) int64
    topk_logprobs: np.ndarray | None = None  # (n, K) float32

    @property
    def n_rows(self) -> int:
        return int(self.target_logprobs.shape[0])


def encode_full_u16(logprobs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quantise (n, V) log-probs to (scale, min_log_prob, uint16 codes) per row (24-nat window)."""
    lp = np.asarray(logprobs, dtype=np.float32)
    top = lp.max(axis=1)
    floor = np.maximum(lp.min(axis=1), top - WINDOW_NATS)
    scale = (top - floor) / 65535.0
    scale = np.where(scale > 0, scale, np.float32(1e-12)).astype(np.float32)
    q = np.rint((lp - floor[:, None]) / scale[:, None])
    codes = np.clip(q, 0, 65535).astype(np.uint16)
    return scale, floor.astype(np.float32), codes


def decode_full_u16(scale: np.ndarray, floor: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of ``encode_full_u16``, renormalised so each row is a proper distribution.

    Returns (log-probs, probs), both float32 (n, V). The row's offset (``floor``) cancels in the
    renormalisation, so ``x = (q − 65535)·scale`` (≤ 0, the top code is 65535) is exponentiated directly:
    seven passes over the row, the probabilities come for free, and the KL divergence needs them.
    """
    del floor  # cancels: log p = x − log Σ exp(x) for any per-row offset
    x = codes.astype(np.float32)
    x -= np.float32(65535.0)
    x *= scale[:, None]
    probs = np.exp(x)
    z = probs.sum(axis=1, keepdims=True)
    probs *= np.float32(1.0) / z
    x -= np.log(z)
    return x, probs


@dataclass
class CacheInfo:
    """What the report says about the cache: ``hit`` when the reference was read, not computed."""

    hit: bool
    kind: str
    path: str | None
    key: str
    topk: int | None = None
    persistent: bool = True
    requests_written: int = 0
    requests_read: int = 0
    bytes: int = 0
    precision: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"hit": self.hit, "kind": self.kind, "path": self.path if self.persistent else None,
                "key": self.key, "topk": self.topk, "persistent": self.persistent,
                "requests_written": self.requests_written, "requests_read": self.requests_read,
                "bytes": self.bytes, "precision": self.precision, **self.extra}


def precision_note(kind: str, topk: int | None) -> str:
    if kind == KIND_FULL:
        return (f"full vocabulary, uint16 log-probs over a {WINDOW_NATS:g}-nat window (±{WINDOW_NATS / 131070:.2e} "
                "nats), renormalised; target log-probs exact float32")
    return f"reference top-{topk} + tail mass; KL divergence is a lower bound; target log-probs exact float32"


@dataclass(frozen=True)
class CacheHome:
    """The folder of this run's cache entries and the key they are signed with (``qcheck.eval.cache``, "Trust")."""

    root: Path
    auth_key: bytes
    #: why entries of earlier runs cannot be reused (no usable cache key), None when they can
    problem: str | None = None
    persistent: bool = True
    #: where endpoint results of this run are kept (``qcheck.eval.runners.http.RunState``; None: not kept)
    endpoint_run: RunState | None = None


class CacheWriter:
    """Appends reference rows for one cache entry; ``commit()`` makes the entry visible atomically."""

    def __init__(self, root: Path, key: str, kind: str, vocab_size: int, topk: int | None, meta: dict[str, Any], *,
                 auth_key: bytes | None = None):
        """``auth_key`` signs the entry (``entry_key()``; None: this user's key, created if needed)."""
        if kind not in (KIND_FULL, KIND_TOPK):
            raise ValueError(kind)
        if kind == KIND_TOPK and (topk is None or not 1 <= topk <= vocab_size):
            raise InputError(f"--cache-topk must be between 1 and the vocabulary size {vocab_size}")
        self.root = Path(root)
        self.key = key
        self.kind = kind
        self.vocab_size = vocab_size
        self.topk = topk
        self.meta = meta
        self.auth_key = auth_key if auth_key is not None else _user_key()
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.tmpdir = Path(tempfile.mkdtemp(prefix=f".partial-{key[:16]}-", dir=self.root))
            self._fh = os.fdopen(_create_private(self.tmpdir / "rows.bin"), "wb")
        except OSError as exc:
            raise InputError(f"cannot create the cache directory: {exc.strerror or exc}", path=str(self.root)) from None
        self._rows_hash = hashlib.sha256()
        self.index: dict[str, list[int]] = {}
        self.generations: dict[str, dict[str, Any]] = {}
        self.offset = 0
        self._dtype = row_dtype(kind, vocab_size, topk)
        self._last: str | None = None

    def add_scores(self, key: str, scores: TokenScores) -> None:
        """Store reference rows (full float32 rows in, encoded per ``kind``). Calls with the same ``key`` in a
        row append the next block of that request's rows; a key may not be reopened after another one."""
        if scores.full is None:
            raise ValueError("the reference runner must return full-vocabulary rows")
        full = np.asarray(scores.full, dtype=np.float32)
        if full.shape[1] != self.vocab_size:
            raise InputError(f"reference returned {full.shape[1]} log-probs per row, expected {self.vocab_size}",
                             where=f"request {key}")
        n = full.shape[0]
        rec = np.empty(n, dtype=self._dtype)
        rec["target"] = np.asarray(scores.target_logprobs, dtype=np.float32)
        rec["argmax"] = np.asarray(scores.greedy_ids, dtype=np.int64)
        if self.kind == KIND_FULL:
            for i in range(0, n, 64):  # 64 rows at a time: the float temporaries stay ~64 x V
                rec["scale"][i:i + 64], rec["floor"][i:i + 64], rec["codes"][i:i + 64] = encode_full_u16(full[i:i + 64])
        else:
            k = int(self.topk or 1)
            ids = np.argpartition(-full, k - 1, axis=1)[:, :k] if k < full.shape[1] else np.tile(
                np.arange(full.shape[1]), (n, 1))
            vals = np.take_along_axis(full, ids, axis=1)
            order = np.argsort(-vals, axis=1, kind="stable")
            rec["ids"] = np.take_along_axis(ids, order, axis=1)
            rec["vals"] = np.take_along_axis(vals, order, axis=1)
        self._write(rec.tobytes())
        if key == self._last and key in self.index:
            self.index[key][1] += n
        elif key in self.index:
            raise ValueError(f"request {key!r} was already written")
        else:
            self.index[key] = [self.offset, n]
        self._last = key
        self.offset += rec.nbytes

    def add_topk(self, key: str, scores: TokenScores) -> None:
        """Store rows that arrive as top-k already (an endpoint reference): padded to K with id -1, which the
        metrics leave out of the top-k set; a NaN target (a position the server did not return) stays NaN."""
        if self.kind != KIND_TOPK or scores.topk_ids is None or scores.topk_logprobs is None:
            raise ValueError("add_topk needs a top-k entry and top-k rows")
        ids, vals = padded_topk(scores, int(self.topk or 1))
        if ids.size and int(ids.max()) >= self.vocab_size:
            raise InputError(f"reference returned token id {int(ids.max())} outside the vocabulary of {self.vocab_size}",
                             where=f"request {key}")
        n = scores.n_rows
        rec = np.empty(n, dtype=self._dtype)
        rec["target"] = np.asarray(scores.target_logprobs, dtype=np.float32)
        rec["argmax"] = np.asarray(scores.greedy_ids, dtype=np.int64)
        rec["ids"] = ids
        rec["vals"] = vals
        if key in self.index:
            raise ValueError(f"request {key!r} was already written")
        self._write(rec.tobytes())
        self.index[key] = [self.offset, n]
        self._last = key
        self.offset += rec.nbytes

    def _write(self, data: bytes) -> None:
        self._fh.write(data)
        self._rows_hash.update(data)

    def add_generation(self, key: str, generation: Generation) -> None:
        self.generations[key] = {"token_ids": [int(t) for t in generation.token_ids], "text": generation.text}

    def commit(self) -> Path:
        """Write index, meta and the tag, rename the directory into place (replacing an entry already there, which
        this run found unusable or a concurrent run wrote: the rows just computed are the ones read); returns it."""
        self._fh.close()
        meta = {**self.meta, "format": FORMAT_VERSION, "key": self.key, "kind": self.kind,
                "vocab_size": self.vocab_size, "topk": self.topk, "bytes": self.offset}
        digests = {"rows.bin": self._rows_hash.hexdigest()}
        for name, value in (("index.json", self.index), ("generations.json", self.generations), ("meta.json", meta)):
            data = json.dumps(value, indent=1 if name == "meta.json" else None).encode("utf-8")
            digests[name] = hashlib.sha256(data).hexdigest()
            with os.fdopen(_create_private(self.tmpdir / name), "wb") as fh:
                fh.write(data)
        final = self.root / f"ref-{self.key}"
        tag = cache_auth.sign(self.auth_key, PURPOSE, _payload(final.name, digests))
        with os.fdopen(_create_private(self.tmpdir / AUTH), "wb") as fh:
            fh.write(json.dumps({"format": 1, "files": digests, "mac": tag}, indent=1).encode("utf-8"))
        try:
            os.replace(self.tmpdir, final)
        except OSError:
            stale = self.root / f".stale-{self.key[:16]}-{secrets.token_hex(4)}"
            try:
                os.replace(final, stale)
            except OSError:  # a file (or nothing any more) in the way
                if os.path.lexists(final) and not os.path.isdir(final):
                    os.unlink(final)
            os.replace(self.tmpdir, final)
            shutil.rmtree(stale, ignore_errors=True)
        return final

    def abort(self) -> None:
        try:
            self._fh.close()
        finally:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


class CacheReader:
    """Reads one committed cache entry, one request at a time (positioned reads, no memory map), after checking it
    (module docstring, "Trust"); ``RejectedEntry`` when it may not be used."""

    def __init__(self, directory: Path, auth_key: bytes | None = None):
        """``auth_key`` verifies the entry's tag (None: this user's cache key)."""
        self.dir = Path(directory)
        self._fd = -1
        problem = cache_auth.private(self.dir, directory=True)
        if problem:
            raise RejectedEntry(problem)
        digests = self._verified_digests(auth_key if auth_key is not None else _user_key())
        loaded = {}
        for name in ("meta.json", "index.json", "generations.json"):
            try:
                data = cache_auth.read_private(self.dir / name, MAX_JSON_BYTES)
            except (OSError, ValueError) as exc:
                raise RejectedEntry(f"{name}: {getattr(exc, 'strerror', None) or exc}") from None
            if hashlib.sha256(data).hexdigest() != digests[name]:
                raise RejectedEntry(f"{name} is not what the entry was signed with (altered)")
            try:
                loaded[name] = json.loads(data)
            except (ValueError, RecursionError):
                raise RejectedEntry(f"{name} is not JSON") from None
        self.meta: dict[str, Any] = loaded["meta.json"]
        self.index: dict[str, list[int]] = loaded["index.json"]
        self.generations: dict[str, dict[str, Any]] = loaded["generations.json"]
        self._check_layout()
        self._dtype = row_dtype(self.kind, self.vocab_size, self.topk)
        self._fd, self.size = _open_rows(self.dir / "rows.bin", digests["rows.bin"])
        self.reads = 0

    def _verified_digests(self, auth_key: bytes) -> dict[str, str]:
        """The files' digests from ``auth.json``, once its tag verifies with ``auth_key``."""
        try:
            auth = json.loads(cache_auth.read_private(self.dir / AUTH, 64 * 1024))
        except (OSError, ValueError, RecursionError) as exc:
            raise RejectedEntry(f"{AUTH}: {getattr(exc, 'strerror', None) or exc}") from None
        digests = auth.get("files") if isinstance(auth, dict) else None
        if not (isinstance(digests, dict) and set(digests) == set(FILES)
                and all(isinstance(v, str) for v in digests.values())):
            raise RejectedEntry(f"{AUTH} does not list the entry's files")
        if not cache_auth.verify(auth_key, PURPOSE, _payload(self.dir.name, digests), auth.get("mac")):
            raise RejectedEntry("its tag does not verify with this user's cache key (written by another user or "
                                "machine, planted, or copied from another entry)")
        return digests

    def _check_layout(self) -> None:
        """Shapes of meta, index and generations (a signed entry of an older qcheck could still differ)."""
        meta = self.meta if isinstance(self.meta, dict) else {}
        kind = meta.get("kind")
        vocab = meta.get("vocab_size")
        self.vocab_size = vocab if isinstance(vocab, int) and not isinstance(vocab, bool) else 0
        self.topk = meta.get("topk")
        if kind not in (KIND_FULL, KIND_TOPK) or not 0 < self.vocab_size <= 1 << 24 or \
                meta.get("format") != FORMAT_VERSION:
            raise RejectedEntry("unknown layout")
        self.kind: str = kind
        if self.kind == KIND_TOPK and not (isinstance(self.topk, int) and 0 < self.topk <= self.vocab_size):
            raise RejectedEntry("unknown layout")
        if not isinstance(self.index, dict) or not all(
                isinstance(v, list) and len(v) == 2 and all(type(x) is int for x in v) for v in self.index.values()):
            raise RejectedEntry("index.json: unknown layout")
        if not isinstance(self.generations, dict) or not all(
                isinstance(g, dict) and isinstance(g.get("token_ids"), list)
                and all(type(t) is int for t in g["token_ids"]) and isinstance(g.get("text"), (str, type(None)))
                for g in self.generations.values()):
            raise RejectedEntry("generations.json: unknown layout")

    @staticmethod
    def open_if_complete(root: Path, key: str, auth_key: bytes | None = None) -> CacheReader | None:
        """The entry for ``key`` when there is one (None), checked (``RejectedEntry`` when it may not be used)."""
        directory = Path(root) / f"ref-{key}"
        if not os.path.lexists(directory):
            return None
        return CacheReader(directory, auth_key)

    def n_rows(self, key: str) -> int:
        """Rows stored for ``key`` (0 when absent)."""
        entry = self.index.get(key)
        return int(entry[1]) if entry else 0

    def rows(self, key: str, start: int = 0, stop: int | None = None) -> RefRows:
        """Rows ``start:stop`` of request ``key`` (default all), read with one positioned read."""
        if key not in self.index:
            raise InputError(f"request {key!r} is missing from the reference cache; delete it or use --no-cache",
                             path=str(self.dir))
        offset, n = (int(v) for v in self.index[key])
        stop = n if stop is None else stop
        width = self._dtype.itemsize
        if offset < 0 or n <= 0 or offset % width or offset + n * width > self.size:
            raise InputError(f"request {key!r} points outside rows.bin (offset {offset}); the cache is corrupt",
                             path=str(self.dir))
        if not 0 <= start < stop <= n:
            raise InputError(f"request {key!r}: rows {start}:{stop} requested, the cache holds {n}; the cache does "
                             "not match these tasks", path=str(self.dir))
        length = (stop - start) * width
        data = os.pread(self._fd, length, offset + start * width)
        if len(data) != length:
            raise InputError(f"short read for request {key!r}; the cache is corrupt", path=str(self.dir))
        self.reads += 1
        rec = np.frombuffer(data, dtype=self._dtype)
        target = rec["target"].astype(np.float32)
        argmax = rec["argmax"].astype(np.int64)
        if self.kind == KIND_FULL:
            full, probs = decode_full_u16(rec["scale"], rec["floor"], rec["codes"])
            return RefRows(target, argmax, full=full, probs=probs)
        ids = rec["ids"].astype(np.int64)
        vals = rec["vals"].astype(np.float32)
        return RefRows(target, argmax, topk_ids=ids, topk_logprobs=vals)

    def generation(self, key: str) -> Generation:
        entry = self.generations.get(key)
        if entry is None:
            raise InputError(f"generation {key!r} is missing from the reference cache", path=str(self.dir))
        return Generation(token_ids=list(entry["token_ids"]), text=entry.get("text"))

    def close(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)
            self._fd = -1


def open_entry(home: CacheHome, key: str, notes: list[str]) -> CacheReader | None:
    """The checked cache entry for ``key``, or None (absent, or not usable: ``notes`` then says why)."""
    if not home.persistent:
        return None
    try:
        return CacheReader.open_if_complete(home.root, key, home.auth_key)
    except RejectedEntry as exc:
        notes.append(f"reference cache entry ref-{key[:12]} not used ({exc}); computed again and replaced")
        return None


def committed(final: Path, auth_key: bytes) -> CacheReader:
    """The entry this run just wrote, read back through the same checks."""
    try:
        return CacheReader(final, auth_key)
    except RejectedEntry as exc:
        raise InputError(f"the reference cache entry just written cannot be read back: {exc}",
                         path=str(final)) from None


def _open_rows(path: Path, digest: str) -> tuple[int, int]:
    """(descriptor, size) of ``rows.bin`` (``qcheck.cache_auth.open_private``: a FIFO never hangs the run) when its
    SHA-256 is ``digest``; hashed through the descriptor that is read later."""
    try:
        fd, info = cache_auth.open_private(path)
    except (OSError, ValueError) as exc:
        raise RejectedEntry(f"rows.bin: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        h = hashlib.sha256()
        offset = 0
        while offset < info.st_size:
            chunk = os.pread(fd, min(1 << 22, info.st_size - offset), offset)
            if not chunk:
                break
            h.update(chunk)
            offset += len(chunk)
        if offset != info.st_size or h.hexdigest() != digest:
            raise RejectedEntry("rows.bin is not what the entry was signed with (altered)")
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def padded_topk(scores: TokenScores, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, log-probs) of shape (n, k): the rows' own entries first, padded with ``PAD_ID`` / ``PAD_LOGPROB``."""
    assert scores.topk_ids is not None and scores.topk_logprobs is not None
    n, width = scores.topk_ids.shape
    ids = np.full((n, k), PAD_ID, dtype=np.int64)
    lps = np.full((n, k), PAD_LOGPROB, dtype=np.float32)
    w = min(width, k)
    ids[:, :w] = scores.topk_ids[:, :w]
    lps[:, :w] = scores.topk_logprobs[:, :w]
    return ids, lps
