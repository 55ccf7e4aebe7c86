"""Greedy generation over ``/v1/completions``: what every server can do, and all a server that refuses prompt
log-probs gives (generation metrics only)."""

from __future__ import annotations

from typing import Any

from qcheck.eval.runners.base import GenerateRequest, Generation
from qcheck.eval.runners.endpoint.wire import ScoringContext, completion_body, first_choice
from qcheck.eval.runners.http import EndpointError


def generate_one(ctx: ScoringContext, req: GenerateRequest, fmt: str) -> tuple[Generation, bool]:
    """(greedy continuation, whether its ids had to be re-derived from text that lost tokens)."""
    ids = tuple(req.prompt_ids)
    prompt: Any = list(ids)
    if fmt == "text":  # the server tokenises the text itself: counted when it differs, compared as text
        prompt = ctx.prompt_text(ids)
        ctx.note_prompt(ids, prompt)
    body = completion_body(ctx, prompt, req.max_new_tokens)
    if ctx.flavour in ("llama-cpp-python", "llama-server"):
        body.update({"repeat_penalty": 1.0, "top_k": 1, "min_p": 0})
    if ctx.flavour == "vllm":
        body["return_token_ids"] = True
    data = ctx.client.post("/v1/completions", body)
    choice = first_choice(data)
    text = choice.get("text")
    if not isinstance(text, str):
        raise EndpointError(f"endpoint {ctx.url}: the completion has no text")
    token_ids = choice.get("token_ids")
    lossy = False
    if isinstance(token_ids, list) and all(isinstance(t, int) and not isinstance(t, bool)
                                           and 0 <= t < ctx.reference.vocab_size for t in token_ids):
        new = list(token_ids)
    else:
        new = list(ctx.tok(text, add_special_tokens=False)["input_ids"])
        usage = data.get("usage") if isinstance(data, dict) else None
        count = usage.get("completion_tokens") if isinstance(usage, dict) else None
        # the text does not re-tokenise to as many tokens as the server generated (e.g. it dropped a partial
        # UTF-8 character): the ids below are not the engine's; a count that includes the end-of-sequence token
        # the text does not show is not a loss
        stopped_count = count - 1 if isinstance(count, int) and choice.get("finish_reason") == "stop" else None
        lossy = isinstance(count, int) and len(new) not in (count, stopped_count)
    if choice.get("finish_reason") == "stop" and req.stop_ids and len(new) < req.max_new_tokens and (
            not new or new[-1] not in req.stop_ids):
        new.append(req.stop_ids[0])  # the server stopped on end-of-sequence, which the reference's ids end with
    return Generation(token_ids=new[: req.max_new_tokens], text=text), lossy
