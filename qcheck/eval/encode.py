"""Tokenise task items once, with the reference's tokenizer, into the requests every runner scores.

Why here and only here: the reference and every candidate must score the *same token ids* (research
docs/research/evals.md §6.3); re-tokenising on the candidate side is the commonest source of spurious KL divergence.
Choice items are split the way lm-evaluation-harness ``_encode_pair`` does it: trailing spaces of the
context move into the continuation, ``context + continuation`` is encoded as a whole and cut at
``len(encode(context))``.

A ``text`` item longer than ``max_length`` tokens is scored in sliding windows, as llama-perplexity and the
Hugging Face strided-perplexity recipe do, instead of being cut: windows of ``max_length`` tokens, each
``stride`` tokens after the previous one (default half a window), each scoring only the tokens the previous
window did not reach (its last ``stride`` tokens: the second half at the default stride), so every token is
scored exactly once with at least ``max_length - stride`` tokens of context; the last window is aligned to the
item's end. ``windows="chunks"`` is llama-perplexity's own scheme instead, for numbers comparable with its
``--kl-divergence`` on the same text: windows that do not overlap, each scoring the tokens after its middle one (n_ctx - 1 - n_ctx/2), the first
token of each replaced by BOS when the tokenizer adds one, and the tokens after the last whole window left
unscored. Choice and generate items keep the left truncation of lm-evaluation-harness: a window over a
multiple-choice context or a prompt would score a different question.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from qcheck.errors import InputError
from qcheck.eval.runners.base import GenerateRequest, ScoreRequest
from qcheck.eval.tasks import TaskItem


@dataclass
class EncodedItem:
    item: TaskItem
    score: list[ScoreRequest] = field(default_factory=list)
    generate: GenerateRequest | None = None
    truncated: bool = False
    #: sliding windows a long text item was scored in (1: it fitted, or one chunk and an unscored tail)
    windows: int = 1
    #: a text item longer than ``max_length``: scored in windows or chunks, not whole
    windowed: bool = False


#: how long text items are windowed: overlapping sliding windows (every token scored once) or llama-perplexity's
#: non-overlapping chunks (each scores its second half)
WINDOW_MODES = ("sliding", "chunks")


def chunk_spans(n_tokens: int, max_length: int) -> list[tuple[int, int, int]]:
    """llama-perplexity's windows over ``n_tokens`` tokens: (begin, end, first scored position) of each whole
    ``max_length`` chunk; a remainder shorter than a chunk is not scored (as there). Like its ``first = n_ctx/2``
    with ``n_ctx - 1 - first`` predictions, a chunk scores the tokens after its middle one: positions
    ``max_length // 2 + 1`` to the end. An item that fits in one window is scored whole (llama-perplexity would
    refuse a text that short)."""
    if n_tokens <= max_length:
        return [(0, n_tokens, 1)]
    return [(b, b + max_length, b + max_length // 2 + 1) for b in range(0, n_tokens - max_length + 1, max_length)]


def chunk_scored(max_length: int) -> int:
    """Tokens one llama-perplexity chunk of ``max_length`` scores (``n_ctx - 1 - n_ctx/2``)."""
    return max_length - 1 - max_length // 2


def window_spans(n_tokens: int, max_length: int, stride: int) -> list[tuple[int, int, int]]:
    """(begin, end, first scored position) of each window over ``n_tokens`` tokens.

    The first window scores from position 1; every later one scores from where the previous one ended, with
    the window ending ``stride`` tokens further (the last one at ``n_tokens``)."""
    if n_tokens <= max_length:
        return [(0, n_tokens, 1)]
    spans = [(0, max_length, 1)]
    while spans[-1][1] < n_tokens:
        end = min(spans[-1][1] + stride, n_tokens)
        spans.append((end - max_length, end, spans[-1][1]))
    return spans


class Encoder:
    """Wraps a Hugging Face tokenizer: encodes items, decodes generations, and fingerprints the tokenizer."""

    def __init__(self, tokenizer: Any, max_length: int = 512, stride: int | None = None,
                 windows: str = "sliding"):
        if windows not in WINDOW_MODES:
            raise InputError(f"windows {windows!r} is not one of {', '.join(WINDOW_MODES)}")
        if max_length < 8:
            raise InputError(f"max length {max_length} is too small (at least 8 tokens)")
        stride = max_length // 2 if stride is None else stride
        if not 1 <= stride < max_length:
            raise InputError(f"stride {stride} must be between 1 and max length - 1 ({max_length - 1}): every "
                             "window needs at least one token of context")
        self.tok = tokenizer
        self.max_length = max_length
        self.stride = stride
        self.windows = windows
        #: tokens of long text items that chunks mode leaves unscored (after the last whole chunk)
        self.unscored_tokens = 0
        probe = tokenizer("a", add_special_tokens=True)["input_ids"]
        bare = tokenizer("a", add_special_tokens=False)["input_ids"]
        bos = getattr(tokenizer, "bos_token_id", None)
        self.add_bos = bool(bos is not None and len(probe) > len(bare) and probe[0] == bos)
        self.bos_token_id = bos
        eos = getattr(tokenizer, "eos_token_id", None)
        #: lm-eval's prefix token for an empty context: BOS if there is one, else EOS
        self.prefix_id = bos if bos is not None else eos
        self.eos_ids: tuple[int, ...] = (eos,) if isinstance(eos, int) else ()

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=True)["input_ids"])

    def decode(self, ids: list[int]) -> str:
        ids = [i for i in ids if i not in self.eos_ids]
        return self.tok.decode(ids, skip_special_tokens=True)

    def fingerprint(self) -> str:
        """A hash of the whole tokenizer (vocabulary, merges, normaliser, special tokens)."""
        h = hashlib.sha256()
        backend = getattr(self.tok, "backend_tokenizer", None)
        if backend is not None and hasattr(backend, "to_str"):
            h.update(backend.to_str().encode("utf-8"))
        else:
            for token, idx in sorted(self.tok.get_vocab().items()):
                h.update(f"{idx}\t{token}\n".encode())
        h.update(repr((self.add_bos, self.bos_token_id, self.eos_ids, type(self.tok).__name__)).encode())
        return h.hexdigest()

    def _with_prefix(self, ids: list[int]) -> list[int]:
        if ids and self.add_bos:
            return ids
        if self.prefix_id is None:
            return ids
        return [self.prefix_id, *ids]

    def encode_item(self, item: TaskItem) -> EncodedItem:
        enc = EncodedItem(item=item)
        if item.kind == "text":
            ids = self.encode(item.text or "")
            if not self.add_bos:
                ids = self._with_prefix(ids)
            if len(ids) < 2:
                raise InputError("text: encodes to fewer than 2 tokens, nothing to score", path=item.source)
            chunks = self.windows == "chunks"
            spans = chunk_spans(len(ids), self.max_length) if chunks else \
                window_spans(len(ids), self.max_length, self.stride)
            enc.windows = len(spans)
            enc.windowed = len(ids) > self.max_length
            if chunks and enc.windowed:  # the tail after the last whole chunk (one chunk and a tail included)
                self.unscored_tokens += len(ids) - spans[-1][1]
            for w, (begin, end, first) in enumerate(spans):
                window = ids[begin:end]
                if chunks and w > 0 and self.add_bos and self.bos_token_id is not None:
                    window[0] = self.bos_token_id  # llama-perplexity puts BOS at the start of every chunk
                enc.score.append(ScoreRequest(key=item.id if w == 0 else f"{item.id}@{w}",
                                              input_ids=tuple(window), start=first - begin))
        elif item.kind == "choice":
            context = item.context or ""
            n_spaces = len(context) - len(context.rstrip())
            for index, choice in enumerate(item.choices):
                ctx, cont = context, item.delimiter + choice
                if n_spaces:
                    ctx, cont = context[:-n_spaces], context[-n_spaces:] + cont
                if ctx:
                    ctx_ids = self._with_prefix(self.encode(ctx))
                    whole = self._with_prefix(self.encode(ctx + cont))
                    cont_ids = whole[len(ctx_ids):]
                else:
                    if self.prefix_id is None:
                        raise InputError("context: empty, and the tokenizer has neither BOS nor EOS to start from",
                                         path=item.source)
                    ctx_ids = [self.prefix_id]
                    cont_ids = list(self.tok(cont, add_special_tokens=False)["input_ids"])
                if not cont_ids:
                    raise InputError(f"choices[{index}]: encodes to no tokens after the context", path=item.source)
                ids = ctx_ids + cont_ids
                start = len(ctx_ids)
                if len(ids) > self.max_length:  # left-truncate the context, as lm-eval does
                    cut = len(ids) - self.max_length
                    if cut >= start:
                        raise InputError(f"choices[{index}]: the answer alone is longer than the "
                                         f"{self.max_length}-token limit", path=item.source)
                    ids, start, enc.truncated = ids[cut:], start - cut, True
                enc.score.append(ScoreRequest(key=f"{item.id}#{index}", input_ids=tuple(ids), start=start))
        else:
            ids = self.encode(item.prompt or "")
            if not self.add_bos:
                ids = self._with_prefix(ids)
            budget = self.max_length - item.max_new_tokens
            if budget < 1:
                raise InputError(f"max_new_tokens: {item.max_new_tokens} leaves no room for the prompt within "
                                 f"the {self.max_length}-token limit", path=item.source)
            if len(ids) > budget:
                ids, enc.truncated = ids[-budget:], True
            enc.generate = GenerateRequest(key=item.id, prompt_ids=tuple(ids), max_new_tokens=item.max_new_tokens,
                                           stop_ids=self.eos_ids)
        return enc
