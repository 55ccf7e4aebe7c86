"""vLLM's ``prompt_logprobs``: ``/v1/completions`` with the prompt and ``prompt_logprobs: k``; entries keyed by
token id, one per prompt position, checked against the returned ``prompt_token_ids``."""

from __future__ import annotations

import math
from typing import Any

from qcheck.errors import InputError
from qcheck.eval.runners.base import ScoreRequest
from qcheck.eval.runners.endpoint.wire import (
    Misaligned,
    Row,
    ScoringContext,
    Unsupported,
    completion_body,
    divergence_message,
    first_choice,
    first_divergence,
    int_key,
    logprob,
    lp_rank,
)

MODE = "prompt_logprobs"
TEXT_PROMPTS = True

def request(ctx: ScoringContext, prompt: Any) -> tuple[str, dict[str, Any]]:
    body = completion_body(ctx, prompt, 1)
    body["prompt_logprobs"] = ctx.top_k
    return "/v1/completions", body


def prompt_ids(ctx: ScoringContext, data: Any) -> list[int] | None:
    """The prompt's token ids as the server reports them (``prompt_token_ids``: its own tokenisation of a text
    prompt), or None."""
    try:
        choice = first_choice(data)
    except Unsupported:
        return None
    ids = choice.get("prompt_token_ids") or (data.get("prompt_token_ids") if isinstance(data, dict) else None)
    if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        return None
    return [int(t) for t in ids]


def parse(ctx: ScoringContext, data: Any, req: ScoreRequest) -> list[Row]:
    choice = first_choice(data)
    plp = choice.get("prompt_logprobs")
    if not isinstance(plp, list):
        raise Unsupported("the response has no prompt_logprobs")
    ids = req.input_ids
    returned_ids = choice.get("prompt_token_ids") or (data.get("prompt_token_ids") if isinstance(data, dict)
                                                      else None)
    if isinstance(returned_ids, list) and list(returned_ids) != list(ids):
        at = first_divergence(ids, returned_ids)
        raise Misaligned(divergence_message(ids, returned_ids, at or 0, ctx.strings()),
                         where=f"candidate {ctx.name}, request {req.key}")
    if len(plp) != len(ids):
        raise InputError(f"the endpoint returned {len(plp)} prompt positions for {len(ids)} tokens",
                         where=f"candidate {ctx.name}, request {req.key}")
    rows = []
    for p in range(req.start, len(ids)):
        entry = plp[p]
        if not isinstance(entry, dict):
            rows.append(Row(math.nan, [], -1))
            continue
        pairs: list[tuple[int, float, int]] = []
        target = math.nan
        for key, val in entry.items():
            tid = int_key(key)
            lp, rank = lp_rank(val)
            if tid is None or lp is None or not 0 <= tid < ctx.reference.vocab_size:
                continue
            lp = logprob(lp, f"candidate {ctx.name}, request {req.key}, position {p}")
            if tid == ids[p]:
                target = lp
            if rank is None or rank <= ctx.top_k:
                pairs.append((tid, lp, rank or 0))
        pairs.sort(key=lambda t: -t[1])
        rows.append(Row(target, [(t, v) for t, v, _ in pairs[: ctx.top_k]],
                         pairs[0][0] if pairs else -1))
    return rows
