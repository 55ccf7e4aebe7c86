"""Tiny Llama checkpoints whose greedy decoding is set by their weights: a token-to-next-token table.

Why: generation metrics (length, termination, repetition, JSON validity) must be tested on models that really
generate, through every backend (transformers, llama.cpp, an HTTP server), with outputs known in advance. A
random model's greedy output is arbitrary; these are exact.

How: every attention and MLP block writes zero into the residual stream (``o_proj`` and ``down_proj`` are zero),
so the final hidden state is the current token's embedding. Embeddings are one-hot (hidden size >= vocabulary),
the final RMSNorm scales them to sqrt(hidden), and row ``u`` of ``lm_head`` holds ``MARGIN / sqrt(hidden)`` at
column ``t`` exactly when ``next(t) == u``. So the logits after token ``t`` are ``MARGIN`` for ``next(t)`` and 0
elsewhere, whatever the context: greedy decoding follows the table. The tokenizer is the tests' byte-level BPE
(``support.tiny_llama.build_tokenizer``), so every model built here shares one vocabulary and BOS/EOS.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

#: logit gap between the table's next token and every other token
MARGIN = 40.0
#: BPE vocabulary target of the forced models (the byte alphabet and three specials take 259)
VOCAB = 300


@functools.lru_cache(maxsize=1)
def tokenizer() -> Any:
    from support.tiny_llama import build_tokenizer

    return build_tokenizer(VOCAB)


def token(text: str) -> int:
    """The id of the one token ``text`` encodes to (without BOS); an error if it is not a single token."""
    ids = tokenizer()(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"{text!r} is {len(ids)} tokens, not one")
    return int(ids[0])


def eos() -> int:
    return int(tokenizer().eos_token_id)


def make_forced_llama(path: str | Path, table: dict[int, int], default: int) -> Path:
    """Save a LlamaForCausalLM (safetensors, float32) and the shared tokenizer into ``path``: after token ``t``
    greedy decoding picks ``table.get(t, default)``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from support.tiny_llama import save_quietly

    tok = tokenizer()
    vocab = len(tok)
    hidden = -(-vocab // 64) * 64
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                param.zero_()  # every block adds nothing: the residual stream is the token's embedding
            elif name.endswith("norm.weight"):
                param.fill_(1.0)
        model.model.embed_tokens.weight.copy_(torch.eye(vocab, hidden))
        head = torch.zeros(vocab, hidden)
        scale = MARGIN / hidden ** 0.5
        for t in range(vocab):
            head[table.get(t, default), t] = scale
        model.lm_head.weight.copy_(head)
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    return save_quietly(model, tok, out)


def fixed_output(path: str | Path, text: str, *, terminate: bool = True) -> Path:
    """A model that answers every prompt with ``text`` (whose tokens must all differ), then end-of-sequence
    (``terminate``) or the first token again (a loop)."""
    ids = [token(ch) for ch in _pieces(text)]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{text!r}: a token repeats, so a next-token table cannot spell it")
    table = dict(zip(ids, [*ids[1:], eos() if terminate else ids[0]], strict=True))
    return make_forced_llama(path, table, default=ids[0])


def _pieces(text: str) -> list[str]:
    """``text`` split into the single tokens the shared tokenizer has for it (longest first)."""
    vocab = {tokenizer().decode([i]) for i in range(len(tokenizer()))}
    out, i = [], 0
    while i < len(text):
        for j in range(len(text), i, -1):
            if text[i:j] in vocab and len(tokenizer()(text[i:j], add_special_tokens=False)["input_ids"]) == 1:
                out.append(text[i:j])
                i = j
                break
        else:
            raise ValueError(f"{text[i]!r} is not a token")
    return out
