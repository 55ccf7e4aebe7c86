"""The candidate-runner protocol: how any model (reference, simulated, llama.cpp, an HTTP endpoint) is asked
for token log-probabilities and greedy generations by ``qcheck eval``.

Why a protocol: the harness owns tokenisation, the reference distribution, metrics and statistics; a runner
only turns *token ids* into numbers. Every runner therefore scores exactly the same token ids as the
reference (no re-tokenisation on the candidate side), and metrics can be computed item by item against the
cached reference without holding ``tokens x vocab`` for the whole task set.

Contract
--------
A runner has:

``name`` / ``backend``
    Display name (``"q4"``) and backend label (``"transformers"``, ``"simulated:gguf"``,
    ``"llama.cpp"``, ``"openai:vllm"``), both copied into the JSON report.
``capabilities``
    A :class:`Capabilities`: ``has_full_logprobs`` (full-vocabulary rows), ``has_prompt_logprobs``
    (teacher-forced log-probs at prompt positions: needed for ``text`` and ``choice`` items),
    ``can_generate`` (greedy decoding for ``generate`` items) and ``top_k`` (the largest k a top-k runner
    returns). The harness skips what a runner cannot do and says so in the report's notes.
``vocab()``
    A :class:`VocabInfo` (vocabulary size, BOS id, whether BOS is added). The harness compares it with the
    reference's and stops with exit 2 on a mismatch, because a shifted vocabulary makes every metric wrong.
``score(requests)``
    Takes a sequence of :class:`ScoreRequest` (the token ids of one item: one for a ``text`` item, one per
    choice of a ``choice`` item) and yields one :class:`TokenScores` per request, in order. Row ``j`` of a
    result is the next-token distribution at position ``start + j - 1``, i.e. it predicts
    ``input_ids[start + j]`` from ``input_ids[:start + j]``; there are ``len(input_ids) - start`` rows.
    A row is either a full-vocabulary log-prob row (``full``, float32, shape ``(n, V)``) or the top-k of
    the candidate (``topk_ids`` / ``topk_logprobs``, shape ``(n, k)``, sorted descending). ``target_logprobs``
    (log-prob of the actual next token) is always present: without it nothing teacher-forced can be scored.
    Runners must return *raw* log-probs (log-softmax of the logits; no temperature, penalties or grammar).
``generate(requests)``
    Takes :class:`GenerateRequest` (prompt ids, token budget, stop ids) and yields one :class:`Generation`
    per request, decoded greedily (argmax at every step). ``token_ids`` excludes the prompt and includes a
    stop token if one was produced; ``text`` may be ``None`` (the harness decodes ``token_ids`` with the
    shared tokenizer).
``close()``
    Frees the model (the harness runs candidates one after another to bound memory).

Metrics handle both row kinds: full rows give exact KL divergence; top-k rows give the bucketed lower bound
of docs/research/evals.md §5.7 (labelled as a lower bound in the report). See ``qcheck.eval.metrics``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class Capabilities:
    """What a runner can return; the harness adapts the metrics to it."""

    has_full_logprobs: bool
    has_prompt_logprobs: bool
    can_generate: bool
    #: the largest k of a top-k runner (None for full-vocabulary runners)
    top_k: int | None = None


@dataclass(frozen=True)
class VocabInfo:
    """The token space a runner scores in; must equal the reference's."""

    vocab_size: int
    bos_token_id: int | None
    add_bos: bool
    eos_token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class ScoreRequest:
    """Teacher-forced scoring of ``input_ids[start:]`` given everything before it.

    ``key`` is unique within a run (``"<item id>"`` or ``"<item id>#<choice index>"``).
    """

    key: str
    input_ids: tuple[int, ...]
    start: int

    @property
    def n_rows(self) -> int:
        return len(self.input_ids) - self.start

    @property
    def targets(self) -> tuple[int, ...]:
        return self.input_ids[self.start:]


@dataclass
class TokenScores:
    """Per scored position of one request: full rows or top-k, plus the actual token's log-prob.

    ``greedy_ids`` (the argmax token per row) is derived when not given: ``full.argmax`` or
    ``topk_ids[:, 0]``.
    """

    target_logprobs: np.ndarray  # (n,) float32
    full: np.ndarray | None = None  # (n, V) float32 log-probs
    topk_ids: np.ndarray | None = None  # (n, k) int64, most likely first
    topk_logprobs: np.ndarray | None = None  # (n, k) float32
    greedy_ids: np.ndarray | None = None  # (n,) int64

    def __post_init__(self) -> None:
        n = int(self.target_logprobs.shape[0])
        if self.full is None and self.topk_ids is None:
            raise ValueError("TokenScores needs full rows or top-k rows")
        if self.full is not None and self.full.shape[0] != n:
            raise ValueError(f"full rows: {self.full.shape[0]} rows for {n} targets")
        if self.topk_ids is not None:
            if self.topk_logprobs is None or self.topk_logprobs.shape != self.topk_ids.shape:
                raise ValueError("top-k ids and log-probs must have the same shape")
            if self.topk_ids.shape[0] != n:
                raise ValueError(f"top-k rows: {self.topk_ids.shape[0]} rows for {n} targets")
        if self.greedy_ids is None:
            if self.full is not None:
                self.greedy_ids = self.full.argmax(axis=-1).astype(np.int64)
            else:
                self.greedy_ids = np.asarray(self.topk_ids)[:, 0].astype(np.int64)

    @property
    def n_rows(self) -> int:
        return int(self.target_logprobs.shape[0])

    @property
    def is_full(self) -> bool:
        return self.full is not None


@dataclass(frozen=True)
class GenerateRequest:
    """Greedy decoding from ``prompt_ids`` for at most ``max_new_tokens`` tokens, stopping at ``stop_ids``."""

    key: str
    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    stop_ids: tuple[int, ...] = ()


@dataclass
class Generation:
    """A greedy continuation: the new token ids (no prompt), and the text if the runner decoded it."""

    token_ids: list[int]
    text: str | None = None


@runtime_checkable
class CandidateRunner(Protocol):
    """Anything ``qcheck eval`` can compare with the reference (see the module docstring)."""

    name: str
    backend: str
    capabilities: Capabilities

    def vocab(self) -> VocabInfo: ...

    def score(self, requests: Sequence[ScoreRequest]) -> Iterator[TokenScores]: ...

    def generate(self, requests: Sequence[GenerateRequest]) -> Iterator[Generation]: ...

    def close(self) -> None: ...


def check_same_vocab(reference: VocabInfo, candidate: VocabInfo, candidate_name: str) -> None:
    """Stop the run (exit 2) when the candidate scores in a different token space than the reference."""
    from qcheck.errors import InputError

    if reference.vocab_size != candidate.vocab_size:
        raise InputError(
            f"vocabulary size {candidate.vocab_size} differs from the reference's {reference.vocab_size}; "
            "the two models do not share token ids, so log-probs cannot be compared",
            where=f"candidate {candidate_name}")
    if (reference.add_bos, reference.bos_token_id if reference.add_bos else None) != (
            candidate.add_bos, candidate.bos_token_id if candidate.add_bos else None):
        raise InputError(
            f"BOS handling differs (reference add_bos={reference.add_bos} bos={reference.bos_token_id}, "
            f"candidate add_bos={candidate.add_bos} bos={candidate.bos_token_id}); mismatched BOS gives "
            "spurious KL divergence", where=f"candidate {candidate_name}")


def score_blocks(runner: Any, requests: Sequence[ScoreRequest]) -> Iterator[tuple[int, int, TokenScores]]:
    """(request index, first row, TokenScores) blocks: the runner's own ``score_blocks`` when it has one (rows
    of a long request in bounded blocks), else each request's whole rows from ``score``."""
    if hasattr(runner, "score_blocks"):
        yield from runner.score_blocks(requests)
        return
    for index, scores in enumerate(runner.score(requests)):
        yield index, 0, scores
