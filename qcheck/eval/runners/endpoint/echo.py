"""The OpenAI legacy echo: ``/v1/completions`` with ``echo: true, logprobs: k`` (vLLM, Together,
llama-cpp-python's server); top-k keyed by token strings (or ``token_id:N``), re-aligned when
llama-cpp-python shifts the rows of a model without BOS."""

from __future__ import annotations

import math
from typing import Any

from qcheck.eval.runners.base import ScoreRequest
from qcheck.eval.runners.endpoint.wire import (
    MAX_TOP_K,
    Misaligned,
    Row,
    ScoringContext,
    Unsupported,
    all_token_id_keys,
    completion_body,
    first_choice,
    first_divergence,
    int_key,
    logprob,
)

MODE = "echo"
TEXT_PROMPTS = True

def request(ctx: ScoringContext, prompt: Any) -> tuple[str, dict[str, Any]]:
    body = completion_body(ctx, prompt, 1)
    body.update({"echo": True, "logprobs": ctx.top_k})
    if ctx.flavour == "vllm":
        body["return_tokens_as_token_ids"] = True  # keys "token_id:N": exact ids instead of strings
    if ctx.flavour == "llama-cpp-python":
        body.update({"repeat_penalty": 1.0, "top_k": 0, "min_p": 0})
    return "/v1/completions", body


def generated(data: Any, entries: int) -> int:
    """How many of the echo's ``entries`` follow the prompt: the completion's tokens (``usage``), which can be more
    than the ``max_tokens`` of 1 asked for (llama-cpp-python keeps generating until the text ends on a whole UTF-8
    character: 5 tokens seen for a partial character); 1 when the server does not say."""
    usage = data.get("usage") if isinstance(data, dict) else None
    count = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(count, int) and not isinstance(count, bool) and 0 <= count <= entries:
        return count
    return 1


def prompt_ids(ctx: ScoringContext, data: Any) -> list[int] | None:
    """The prompt's token ids as the server echoed them (its own tokenisation of a text prompt), when every
    echoed token names exactly one id (``token_id:N`` keys, or a string only one token decodes to); a BOS the
    reference adds is put first when the echo leaves it out. None when any token cannot be named."""
    try:
        choice = first_choice(data)
    except Unsupported:
        return None
    lp = choice.get("logprobs")
    tokens = lp.get("tokens") if isinstance(lp, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        return None
    strings = ctx.strings()
    ids = [strings.resolve(t) for t in tokens[:max(0, len(tokens) - generated(data, len(tokens)))]]
    if not ids or any(i is None for i in ids):
        return None
    bos = ctx.reference.bos_token_id
    named = [int(i) for i in ids if i is not None]
    return [bos, *named] if ctx.reference.add_bos and bos is not None and named[0] != bos else named


def parse(ctx: ScoringContext, data: Any, req: ScoreRequest) -> list[Row]:
    choice = first_choice(data)
    lp = choice.get("logprobs")
    if not isinstance(lp, dict) or not isinstance(lp.get("token_logprobs"), list):
        raise Unsupported("the response has no echoed logprobs")
    tokens = lp.get("tokens") or []
    token_lps = lp["token_logprobs"]
    tops = lp.get("top_logprobs")
    if not isinstance(tops, list):
        tops = [None] * len(token_lps)
    n_gen = generated(data, len(token_lps))
    if not isinstance(tokens, list):
        tokens = []
    ids = req.input_ids
    n_echo = len(token_lps) - n_gen
    offset = len(ids) - n_echo
    bos = ctx.reference.bos_token_id
    if n_gen >= 1 and ids and ids[0] != bos and _echo_is_shifted(ctx, ids, tokens, token_lps):
        return _parse_shifted_echo(ctx, req, tops)
    if not (offset == 0 or (offset == 1 and ids and ids[0] == bos)):
        # the server saw a different token sequence: show where, from the echoed token strings
        known = ctx.strings()
        expected = [known.strings[i] for i in ids[(1 if ids and ids[0] == bos else 0):]]
        got = [str(t) for t in tokens[:n_echo]]
        at = first_divergence(expected, got) or 0
        raise Misaligned(f"the endpoint echoed {n_echo} prompt tokens for {len(ids)} sent; first "
                         f"divergence at token {at}: sent {expected[at:at + 3]!r}, endpoint {got[at:at + 3]!r}",
                         where=f"candidate {ctx.name}, request {req.key}")
    strings = ctx.strings() if not all_token_id_keys(tops) else None
    rows = []
    for p in range(req.start, len(ids)):
        e = p - offset
        value = token_lps[e] if 0 <= e < len(token_lps) else None
        where = f"candidate {ctx.name}, request {req.key}, position {p}"
        target = math.nan if value is None else logprob(value, where)
        top = tops[e] if 0 <= e < len(tops) else None
        if strings is not None and 0 <= e < len(tokens) and isinstance(tokens[e], str):
            named = strings.resolve(tokens[e])
            if named is not None and named != ids[p]:
                # the server renders this token as another token's string: its top-k strings cannot be
                # trusted here, so keep only what is known by position (a coarser, still valid, partition)
                ctx.string_mismatches += 1
                top = None
        resolved: dict[int, float] = {}
        ambiguous = not isinstance(top, dict) or not top  # no (trusted) top-k: the argmax is unknown
        if isinstance(top, dict):
            for key, val in list(top.items())[: 4 * MAX_TOP_K]:
                if val is None:
                    continue
                val = logprob(val, where)
                tid = strings.resolve(str(key)) if strings is not None else int_key(key)
                if tid is None or not 0 <= tid < ctx.reference.vocab_size:
                    ambiguous = True  # its id is unknown, and a string shared by several tokens hides values
                    continue
                resolved[tid] = float(val)
        if not math.isnan(target):
            resolved[int(ids[p])] = target  # known by position, whatever its string
        pairs = sorted(resolved.items(), key=lambda t: -t[1])
        rows.append(Row(target, pairs[: ctx.top_k + 1], _greedy(pairs, ambiguous)))
    return rows



def _echo_is_shifted(ctx: ScoringContext, ids: tuple[int, ...], tokens: list[Any], token_lps: list[Any]) -> bool:
    """llama-cpp-python's echo when the model adds no BOS (Qwen-style tokenizers): one entry per prompt token
    and none for the generated one, and entry j holds the logits *after* token j (its echo code drops a
    leading BOS and assumes there was one). Recognised by the entries' strings being exactly the prompt's."""
    if len(token_lps) != len(ids) or len(tokens) != len(ids):
        return False
    strings = ctx.strings().strings
    return all(isinstance(t, str) and t == strings[i] for t, i in zip(tokens, ids, strict=True)
               if strings[i])  # special tokens render as "" here: their strings prove nothing



def _parse_shifted_echo(ctx: ScoringContext, req: ScoreRequest, tops: list[Any]) -> list[Row]:
    """Rows from a shifted echo: position p (predicting ``ids[p]``) is entry p-1's top-k, keyed by strings;
    the token's log-prob is known only when the server listed it there (entry j also lists token j's
    string with its value in that same row, which is a valid entry of the distribution, so it is kept).
    The entries' own ``token_logprobs`` belong to no position and are never used."""
    ctx.shifted_echo = True
    strings = ctx.strings()
    ids = req.input_ids
    rows = []
    for p in range(req.start, len(ids)):
        where = f"candidate {ctx.name}, request {req.key}, position {p}"
        top = tops[p - 1] if 0 <= p - 1 < len(tops) else None
        resolved: dict[int, float] = {}
        ambiguous = not isinstance(top, dict) or not top
        if isinstance(top, dict):
            for key, val in list(top.items())[: 4 * MAX_TOP_K + 1]:
                if val is None:
                    continue
                tid = strings.resolve(str(key))
                if tid is None or not 0 <= tid < ctx.reference.vocab_size:
                    ambiguous = True
                    continue
                resolved[tid] = logprob(val, where)
        target = resolved.get(int(ids[p]), math.nan)
        pairs = sorted(resolved.items(), key=lambda t: -t[1])
        rows.append(Row(target, pairs[: ctx.top_k + 1], _greedy(pairs, ambiguous)))
    return rows


def _greedy(pairs: list[tuple[int, float]], ambiguous: bool) -> int:
    """The argmax token id from resolved (id, log-prob) pairs sorted best first, or -1 when unknown: the top
    resolved token is the argmax unless an unresolved one could outweigh it, which is impossible when nothing
    was unresolved, or when its probability exceeds all the mass the resolved ones leave."""
    if not pairs:
        return -1
    rest = 1.0 - sum(math.exp(v) for _, v in pairs)
    return pairs[0][0] if not ambiguous or math.exp(pairs[0][1]) >= rest else -1
