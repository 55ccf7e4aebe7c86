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
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from qcheck.errors import InputError
from qcheck.eval.runners.base import Generation, TokenScores

FORMAT_VERSION = 2
WINDOW_NATS = 24.0
KIND_FULL = "full-u16"
KIND_TOPK = "topk"
#: a top-k row shorter than K (an endpoint returned fewer entries) is padded with this id, which no metric counts,
#: and this log-probability
PAD_ID = -1
PAD_LOGPROB = -1e4


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


class CacheWriter:
    """Appends reference rows for one cache entry; ``commit()`` makes the entry visible atomically."""

    def __init__(self, root: Path, key: str, kind: str, vocab_size: int, topk: int | None, meta: dict[str, Any]):
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
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self.tmpdir = Path(tempfile.mkdtemp(prefix=f".partial-{key[:16]}-", dir=self.root))
        except OSError as exc:
            raise InputError(f"cannot create the cache directory: {exc.strerror or exc}", path=str(self.root)) from None
        self._fh = open(self.tmpdir / "rows.bin", "wb")  # noqa: SIM115 - closed in commit/abort
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
        self._fh.write(rec.tobytes())
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
        self._fh.write(rec.tobytes())
        self.index[key] = [self.offset, n]
        self._last = key
        self.offset += rec.nbytes

    def add_generation(self, key: str, generation: Generation) -> None:
        self.generations[key] = {"token_ids": [int(t) for t in generation.token_ids], "text": generation.text}

    def commit(self) -> Path:
        """Write index and meta, rename the directory into place; returns the final directory."""
        self._fh.close()
        meta = {**self.meta, "format": FORMAT_VERSION, "key": self.key, "kind": self.kind,
                "vocab_size": self.vocab_size, "topk": self.topk, "bytes": self.offset}
        (self.tmpdir / "index.json").write_text(json.dumps(self.index), encoding="utf-8")
        (self.tmpdir / "generations.json").write_text(json.dumps(self.generations), encoding="utf-8")
        (self.tmpdir / "meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
        final = self.root / f"ref-{self.key}"
        try:
            os.replace(self.tmpdir, final)
        except OSError:
            # another run committed the same entry first (or an old one is in the way): keep theirs if complete
            if not (final / "meta.json").is_file():
                shutil.rmtree(final, ignore_errors=True)
                os.replace(self.tmpdir, final)
            else:
                shutil.rmtree(self.tmpdir, ignore_errors=True)
        return final

    def abort(self) -> None:
        try:
            self._fh.close()
        finally:
            shutil.rmtree(self.tmpdir, ignore_errors=True)


class CacheReader:
    """Reads one committed cache entry, one request at a time (positioned reads, no memory map)."""

    def __init__(self, directory: Path):
        self.dir = Path(directory)
        try:
            self.meta = json.loads((self.dir / "meta.json").read_text(encoding="utf-8"))
            self.index: dict[str, list[int]] = json.loads((self.dir / "index.json").read_text(encoding="utf-8"))
            self.generations: dict[str, dict[str, Any]] = json.loads(
                (self.dir / "generations.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputError(f"reference cache entry is unreadable ({exc}); delete it or use --no-cache",
                             path=str(self.dir)) from None
        self.kind = self.meta.get("kind")
        self.vocab_size = int(self.meta.get("vocab_size", 0))
        self.topk = self.meta.get("topk")
        if self.kind not in (KIND_FULL, KIND_TOPK) or self.vocab_size <= 0:
            raise InputError("reference cache entry has an unknown layout; delete it", path=str(self.dir))
        if self.kind == KIND_TOPK and not (isinstance(self.topk, int) and 0 < self.topk <= self.vocab_size):
            raise InputError("reference cache entry has an unknown layout; delete it", path=str(self.dir))
        self._dtype = row_dtype(self.kind, self.vocab_size, self.topk)
        self.size = (self.dir / "rows.bin").stat().st_size
        self._fd = os.open(self.dir / "rows.bin", os.O_RDONLY | getattr(os, "O_BINARY", 0))
        self.reads = 0

    @staticmethod
    def open_if_complete(root: Path, key: str) -> CacheReader | None:
        directory = Path(root) / f"ref-{key}"
        if not (directory / "meta.json").is_file():
            return None
        return CacheReader(directory)

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
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


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
