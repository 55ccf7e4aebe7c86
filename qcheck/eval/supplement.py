"""The reference scored on token ids a candidate's server chose, cached beside the reference's own entry.

Why: a server that takes prompts only as text tokenises them itself (``qcheck.eval.runners.endpoint.align``); its
rows are for its own token ids. Comparing them with the reference's rows for the reference tokenizer's ids would
compare different sequences, so the reference is scored once more on exactly the server's ids, and only for the
requests where they differ. The rows go into a second cache entry keyed by the reference's entry and those
requests, so a later run against the same server reuses them. The local reference is loaded again for it (after
the previous candidate was freed: still one model at a time); an endpoint reference is asked for the same ids.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qcheck.eval.cache import (
    KIND_FULL,
    CacheHome,
    CacheReader,
    CacheWriter,
    RefRows,
    cache_key,
    committed,
    open_entry,
)
from qcheck.eval.runners.base import ScoreRequest, VocabInfo, score_blocks


class RowSource:
    """The reference's rows by request key: its own cache entry first, then the supplement."""

    def __init__(self, main: CacheReader, extra: CacheReader | None = None):
        self.main = main
        self.extra = extra

    def has(self, key: str) -> bool:
        return key in self.main.index or (self.extra is not None and key in self.extra.index)

    def rows(self, key: str, start: int = 0, stop: int | None = None) -> RefRows:
        if key in self.main.index or self.extra is None:
            return self.main.rows(key, start, stop)
        return self.extra.rows(key, start, stop)

    def close(self) -> None:
        if self.extra is not None:
            self.main.reads += self.extra.reads
            self.extra.close()
            self.extra = None


@dataclass
class Rescorer:
    """What scoring the reference again needs: how it was loaded (a local model) or reached (an endpoint), and
    the cache entry the supplement belongs to."""

    home: CacheHome
    base_key: str
    kind: str
    topk: int | None
    vocab: VocabInfo
    #: (path, dtype, device, max_memory, adapter merged) of a local reference
    local: tuple[str, str, str, dict[str | int, str] | None, bool] | None = None
    #: the EndpointRunner of an endpoint reference
    endpoint: Any = None

    def rows_for(self, main: CacheReader, requests: Sequence[ScoreRequest], text_keys: set[str], progress: Any,
                 log: Any) -> tuple[RowSource, dict[str, str]]:
        """A row source covering ``requests``, and the keys the reference could not be scored on (with why);
        ``text_keys`` are the keys of text items' requests."""
        missing = [r for r in requests if r.key not in main.index]
        if not missing:
            return RowSource(main), {}
        digest = hashlib.sha256(repr(sorted((r.key, r.input_ids, r.start) for r in missing)).encode()).hexdigest()
        key = cache_key({"supplement_of": self.base_key, "requests": digest})
        notes: list[str] = []
        reader = open_entry(self.home, key, notes)
        for note in notes:
            log(note)
        if reader is None:
            log(f"scoring the reference on {len(missing)} request(s) in a server's own token ids")
            progress.start("reference (server tokenisation)", len(missing))
            try:
                reader = committed(self._compute(key, missing, text_keys, progress), self.home.auth_key)
            finally:
                progress.stop()
        excluded = {r.key: str(reader.meta.get("excluded", {}).get(r.key, "the reference could not score it"))
                    for r in missing if r.key not in reader.index}
        return RowSource(main, reader), excluded

    def _compute(self, key: str, requests: list[ScoreRequest], text_keys: set[str], progress: Any) -> Path:
        meta: dict[str, Any] = {"supplement_of": self.base_key, "created_by": "qcheck eval", "excluded": {}}
        writer = CacheWriter(self.home.root, key, self.kind, self.vocab.vocab_size,
                             None if self.kind == KIND_FULL else self.topk, meta, auth_key=self.home.auth_key)
        try:
            if self.endpoint is not None:
                self._from_endpoint(writer, requests, text_keys, progress)
            else:
                self._from_model(writer, requests, progress)
            return writer.commit()
        except BaseException:
            writer.abort()
            raise

    def _from_model(self, writer: CacheWriter, requests: list[ScoreRequest], progress: Any) -> None:
        from qcheck.eval.runners.reference import TransformersRunner, load_reference

        assert self.local is not None
        path, dtype, device, max_memory, adapter = self.local
        model, _, input_device = load_reference(path, dtype, device, max_memory, adapter)
        runner = TransformersRunner(model, self.vocab, name="reference", device=input_device)
        del model
        try:
            for index, start, scores in score_blocks(runner, requests):
                writer.add_scores(requests[index].key, scores)
                if start + scores.n_rows == requests[index].n_rows:
                    progress.advance()
        finally:
            runner.close()

    def _from_endpoint(self, writer: CacheWriter, requests: list[ScoreRequest], text_keys: set[str],
                       progress: Any) -> None:
        from qcheck.eval.remote_reference import full_rows

        runner = self.endpoint
        runner.prefetch_scores(requests, text_keys)
        for req in requests:
            scored = runner.scored_as(req)
            if scored is not req:
                writer.meta["excluded"][req.key] = ("the reference endpoint scores these token ids differently: "
                                                    + (scored if isinstance(scored, str) else "its own tokenisation"))
            else:
                scores = next(iter(runner.score([req])))
                if self.kind == KIND_FULL:
                    full = full_rows(scores, self.vocab.vocab_size, f"reference endpoint, request {req.key}")
                    if full is None:
                        writer.meta["excluded"][req.key] = "the reference endpoint returned fewer than full rows"
                    else:
                        writer.add_scores(req.key, full)
                else:
                    writer.add_topk(req.key, scores)
            progress.advance()
