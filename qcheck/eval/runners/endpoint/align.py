"""A server that takes prompts only as text tokenises them itself, and may split them differently from the
reference's tokenizer: llama.cpp's ``default`` pre-tokenizer (GGUFs without ``tokenizer.ggml.pre``) cuts
punctuation runs apart, so ``" ="`` becomes ``" "``, ``"="``; whitespace runs, tabs and code are where they differ.

Why not refuse: the comparison only needs both sides to score the *same* token ids, not the reference tokenizer's.
So the request is re-expressed in the server's own ids (from its tokenize endpoint, or the ids its answer names),
the first scored token is found again where the server's tokens spell the text before it, and the reference is
scored on exactly those ids (``qcheck.eval.supplement``). Only a request whose scored text begins inside one of the
server's tokens (a token that straddles the boundary between context and continuation) cannot be re-expressed; it
is excluded and counted, never the whole run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from qcheck.eval.runners.base import ScoreRequest


@dataclass(frozen=True)
class TextPrompt:
    """What is sent for a request: the text, and the text before its first scored token."""

    text: str
    prefix: str


def decode(tok: Any, ids: Sequence[int]) -> str:
    """Token ids as the exact text they spell (special tokens as their strings, no clean-up of spaces)."""
    return str(tok.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False))


def lead(ids: Sequence[int], bos: int | None, server_adds_bos: bool | None) -> int:
    """1 when ``ids`` starts with a BOS that the server prepends itself (so it is not sent as text), else 0."""
    return 1 if ids and bos is not None and ids[0] == bos and server_adds_bos is not False else 0


def text_prompt(ids: Sequence[int], start: int, tok: Any, bos: int | None,
                server_adds_bos: bool | None) -> TextPrompt:
    """The text of ``ids`` (a leading BOS the server adds left out) and of its part before position ``start``."""
    skip = lead(ids, bos, server_adds_bos)
    return TextPrompt(text=decode(tok, ids[skip:]), prefix=decode(tok, ids[skip:start]) if start > skip else "")


def boundary(tok: Any, body: Sequence[int], prefix: str) -> int | None:
    """The number of ``body`` tokens that spell exactly ``prefix``, or None when ``prefix`` ends inside a token.

    Decoded length grows with the token count, so a binary search finds the first count reaching the prefix's
    length; the neighbours cover partial UTF-8 characters, which decode to a replacement character."""
    if not prefix:
        return 0
    lo, hi = 0, len(body)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(decode(tok, body[:mid])) < len(prefix):
            lo = mid + 1
        else:
            hi = mid
    for k in range(max(0, lo - 2), min(len(body), lo + 2) + 1):
        if decode(tok, body[:k]) == prefix:
            return k
    return None


def realign(req: ScoreRequest, prompt: TextPrompt, server_ids: Sequence[int], tok: Any, bos: int | None,
            vocab_size: int) -> ScoreRequest | str:
    """``req`` in the server's own token ids (``req`` itself when they are the reference's), or why it cannot be."""
    ids = [int(t) for t in server_ids]
    if tuple(ids) == tuple(req.input_ids):
        return req
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        return f"the server's tokenisation holds token id {bad}, outside the reference's {vocab_size}-token vocabulary"
    skip = 1 if ids and bos is not None and ids[0] == bos else 0
    k = boundary(tok, ids[skip:], prompt.prefix)
    if k is None:
        return ("the server's tokens straddle the boundary between the context and the scored text "
                f"(no run of its tokens spells the context {prompt.prefix[-30:]!r} exactly)")
    start = skip + k
    if start < 1:
        return "the server's tokens leave no token before the first scored one"
    if start >= len(ids):
        return "the server's tokens leave nothing to score"
    return substitute(req, ids, start)


def substitute(req: ScoreRequest, ids: Sequence[int], start: int) -> ScoreRequest:
    """``req`` re-expressed in other token ids; its key names the original and the ids (``KEY~digest``), so the
    reference's rows for it are cached apart from the original's."""
    ids = [int(t) for t in ids]
    digest = hashlib.sha256(repr((ids, int(start))).encode()).hexdigest()[:12]
    return ScoreRequest(key=f"{req.key}~{digest}", input_ids=tuple(ids), start=int(start))

