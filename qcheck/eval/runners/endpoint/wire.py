"""What the endpoint's wire protocols share: the runner context they read, the row they produce, the token
strings some servers key log-probs by, and the checks every server value goes through.

Each protocol (``prompt_logprobs``, ``sglang``, ``echo``, ``generate``) is one module with ``request(ctx, ...)``
(path and JSON body) and ``parse(ctx, data, req)``; ``qcheck.eval.runners.endpoint.EndpointRunner`` probes
which one a server speaks and drives it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from qcheck.errors import InputError
from qcheck.eval.runners.base import VocabInfo
from qcheck.eval.runners.http import HttpClient

MAX_TOP_K = 1000


class ScoringContext(Protocol):
    """What a protocol reads from the runner: the candidate, the reference's vocabulary, the options, the server."""

    name: str
    reference: VocabInfo
    model: str
    flavour: str
    tok: Any
    client: HttpClient
    string_mismatches: int
    shifted_echo: bool

    @property
    def top_k(self) -> int: ...

    @property
    def url(self) -> str: ...

    def strings(self) -> TokenStrings: ...

    def prompt_text(self, ids: tuple[int, ...]) -> str: ...

    def note_prompt(self, ids: tuple[int, ...], text: str) -> None: ...


class Unsupported(Exception):
    """A probe found that the server cannot do this mode (the reason is the message)."""


class Misaligned(InputError):
    """The server scored other token ids than the request's: this request cannot be compared (it is left out and
    counted in the coverage; ``detail`` says why), the rest of the run goes on."""


class TokenStrings:
    """Map the *strings* some servers key their top-k by (llama-cpp-python, OpenAI legacy echo) back to ids.

    A string is used only when exactly one id of the reference vocabulary decodes to it; ambiguous entries
    (partial UTF-8 bytes, special tokens) are left out of the top-k set, which keeps the bucketed KL a valid
    lower bound (a coarser partition), and a row whose top-1 is ambiguous counts as a top-1 disagreement.
    """

    def __init__(self, tokenizer: Any, vocab_size: int):
        self.tok = tokenizer
        special = set(getattr(tokenizer, "all_special_ids", []) or [])
        self.strings: list[str] = []
        counts: dict[str, list[int]] = {}
        for i in range(vocab_size):
            s = "" if i in special else self._decode_one(i)
            self.strings.append(s)
            counts.setdefault(s, []).append(i)
        self.unique = {s: ids[0] for s, ids in counts.items() if len(ids) == 1}

    def _decode_one(self, i: int) -> str:
        try:
            s = self.tok.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        except (TypeError, ValueError, OverflowError):
            return ""
        piece = self.tok.convert_ids_to_tokens(i)
        if isinstance(piece, str) and piece.startswith("▁") and not s.startswith(" "):
            s = " " + s  # SentencePiece: llama.cpp keeps the word-initial space inside a sentence
        return s.replace("\ufffd", "")

    def resolve(self, key: str) -> int | None:
        if key.startswith("token_id:"):
            try:
                return int(key[9:])
            except ValueError:
                return None
        return self.unique.get(key)


@dataclass
class Row:
    target: float  # NaN when the server did not return this position
    topk: list[tuple[int, float]]  # resolved (id, log-prob), most likely first
    greedy: int  # -1 when the top-1 could not be resolved to an id


def completion_body(ctx: ScoringContext, prompt: Any, max_tokens: int) -> dict[str, Any]:
    """The greedy ``/v1/completions`` body every OpenAI-style protocol starts from."""
    return {"model": ctx.model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "top_p": 1, "n": 1,
            "stream": False}


def first_choice(data: Any) -> dict[str, Any]:
    """``choices[0]`` of an OpenAI-style answer, or Unsupported."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise Unsupported("the response has no choices")
    return choices[0]


#: log-probs above this are invalid (float rounding of log 1 aside)
MAX_LOGPROB = 1e-3


def logprob(value: Any, where: str) -> float:
    """A server's log-prob as a float, or an InputError: NaN, infinities and positive values are never valid."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"the endpoint returned a log-prob that is not a number ({str(value)[:40]!r})", where=where)
    v = float(value)
    if math.isnan(v) or v > MAX_LOGPROB or v == math.inf:
        raise InputError(f"the endpoint returned an invalid log-prob {v!r}", where=where)
    return max(v, -1e4)


def int_key(key: Any) -> int | None:
    if isinstance(key, int):
        return key
    text = str(key)
    if text.startswith("token_id:"):
        text = text[9:]
    try:
        return int(text)
    except ValueError:
        return None


def lp_rank(val: Any) -> tuple[float | None, int | None]:
    if isinstance(val, (int, float)):
        return float(val), None
    if isinstance(val, dict) and isinstance(val.get("logprob"), (int, float)):
        rank = val.get("rank")
        return float(val["logprob"]), int(rank) if isinstance(rank, int) else None
    return None, None


def all_token_id_keys(tops: Sequence[Any]) -> bool:
    for top in tops:
        if isinstance(top, dict) and top:
            return all(str(k).startswith("token_id:") for k in top)
    return False


def first_divergence(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def divergence_message(expected: Sequence[int], got: Sequence[int], at: int, strings: TokenStrings) -> str:
    def show(seq: Sequence[Any]) -> str:
        part = list(seq[at:at + 3])
        return ", ".join(f"{t} {strings.strings[t]!r}" if isinstance(t, int) and 0 <= t < len(strings.strings)
                         else repr(t)[:20] for t in part) or "end"

    return (f"the endpoint scored other tokens than it was sent: first divergence at token {at} "
            f"of {len(expected)} (sent: {show(expected)}; endpoint: {show(got)})")
