"""SGLang's native ``/generate`` with ``input_ids``, ``return_logprob``, ``logprob_start_len: 0`` and
``top_logprobs_num: k``: ``meta_info.input_token_logprobs`` as ``[logprob, id]`` pairs."""

from __future__ import annotations

import math
from typing import Any

from qcheck.errors import InputError
from qcheck.eval.runners.base import ScoreRequest
from qcheck.eval.runners.endpoint.wire import (
    MAX_TOP_K,
    Misaligned,
    Row,
    ScoringContext,
    Unsupported,
    divergence_message,
    logprob,
)

MODE = "sglang"
TEXT_PROMPTS = False  # token ids only

def request(ctx: ScoringContext, prompt: Any) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {"input_ids": list(prompt), "return_logprob": True, "logprob_start_len": 0,
                            "top_logprobs_num": ctx.top_k, "sampling_params": {"max_new_tokens": 0, "temperature": 0}}
    if ctx.model:
        body["model"] = ctx.model
    return "/generate", body


def parse(ctx: ScoringContext, data: Any, req: ScoreRequest) -> list[Row]:
    if isinstance(data, list):
        data = data[0] if data else {}
    meta = data.get("meta_info") if isinstance(data, dict) else None
    if not isinstance(meta, dict) or not isinstance(meta.get("input_token_logprobs"), list):
        raise Unsupported("the response has no meta_info.input_token_logprobs")
    tok_lp = meta["input_token_logprobs"]
    top_lp = meta.get("input_top_logprobs")
    if not isinstance(top_lp, list):
        top_lp = [None] * len(tok_lp)
    ids = req.input_ids
    if len(tok_lp) != len(ids):
        raise InputError(f"the endpoint returned {len(tok_lp)} input positions for {len(ids)} tokens",
                         where=f"candidate {ctx.name}, request {req.key}")
    rows = []
    for p in range(req.start, len(ids)):
        entry = tok_lp[p]
        target = math.nan
        if isinstance(entry, list) and len(entry) >= 2 and entry[0] is not None:
            if entry[1] != ids[p]:
                got = [e[1] if isinstance(e, list) and len(e) > 1 and isinstance(e[1], int) else -1
                       for e in tok_lp]
                raise Misaligned(divergence_message(ids, got, p, ctx.strings()),
                                 where=f"candidate {ctx.name}, request {req.key}")
            target = logprob(entry[0], f"candidate {ctx.name}, request {req.key}, position {p}")
        tops = top_lp[p] if p < len(top_lp) else None
        tops = tops if isinstance(tops, list) else []
        where = f"candidate {ctx.name}, request {req.key}, position {p}"
        pairs = sorted(((int(t[1]), logprob(t[0], where)) for t in tops[: 4 * MAX_TOP_K]
                        if isinstance(t, list) and len(t) >= 2 and t[0] is not None and isinstance(t[1], int)
                        and 0 <= t[1] < ctx.reference.vocab_size), key=lambda t: -t[1])[: ctx.top_k]
        rows.append(Row(target, pairs, pairs[0][0] if pairs else -1))
    return rows
