"""Tokenisation shared by reference and candidates: lm-eval's context/continuation split, BOS handling,
truncation, and the tokenizer fingerprint that keys the cache (a real BPE tokenizer trained in-test)."""

from __future__ import annotations

import functools

import pytest

from qcheck.errors import InputError
from qcheck.eval.encode import Encoder, chunk_scored, chunk_spans, window_spans
from qcheck.eval.tasks import TaskItem


@functools.lru_cache(maxsize=2)
def tokenizer(with_bos: bool):
    from support.tiny_llama import build_tokenizer

    tok = build_tokenizer(512)
    if not with_bos:  # a GPT-2 style tokenizer: no BOS is added
        from tokenizers import processors

        tok.backend_tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def item(**kw) -> TaskItem:
    base = {"id": "x", "task": "t", "doc": "x", "source": "mem:1"}
    return TaskItem(**{**base, **kw})


def test_choice_split_follows_lm_eval():
    enc = Encoder(tokenizer(True))
    assert enc.add_bos and enc.bos_token_id == tokenizer(True).bos_token_id
    it = item(kind="choice", context="Question: What is 12 + 30? Answer: ", choices=("42", "forty-two"), answer=0)
    e = enc.encode_item(it)
    assert [r.key for r in e.score] == ["x#0", "x#1"]
    for req, choice in zip(e.score, it.choices, strict=True):
        # lm-eval: continuation = delimiter + choice; the context's trailing space moves into it
        # ("Answer: " + " 42" -> "Answer:" + "  42"); the split is at len(encode(context))
        ctx_ids = enc.encode("Question: What is 12 + 30? Answer:")
        whole = enc.encode("Question: What is 12 + 30? Answer:" + "  " + choice)
        assert req.input_ids[: req.start] == tuple(ctx_ids)
        assert req.input_ids[req.start:] == tuple(whole[len(ctx_ids):])
        assert req.input_ids[0] == enc.bos_token_id
        assert enc.decode(list(req.targets)).strip() == choice


def test_text_and_generate_requests_and_truncation():
    enc = Encoder(tokenizer(True), max_length=16)
    text = "The quick brown fox jumps over the lazy dog. " * 5
    long = enc.encode_item(item(kind="text", text=text))
    # a long text item is not truncated: sliding windows of 16 tokens, stride 8, each scoring only new tokens
    ids = enc.encode(text)
    assert not long.truncated and long.windows == len(long.score) > 2
    assert all(len(r.input_ids) == 16 for r in long.score)
    assert long.score[0].start == 1 and all(r.start == 8 for r in long.score[1:-1])
    assert [r.key for r in long.score[:2]] == ["x", "x@1"]
    scored = [t for r in long.score for t in r.targets]
    assert scored == ids[1:]  # every token after the first exactly once, in order
    pos = 1  # each window holds the real tokens before its scored ones
    for r in long.score:
        assert r.input_ids[:r.start] == tuple(ids[pos - r.start:pos])
        pos += r.n_rows
    gen = enc.encode_item(item(kind="generate", prompt="word " * 30, expected="x", max_new_tokens=6))
    assert gen.truncated and len(gen.generate.prompt_ids) == 10  # left-truncated to leave room for 6 tokens
    assert gen.generate.stop_ids == (tokenizer(True).eos_token_id,)
    with pytest.raises(InputError, match="mem:1: max_new_tokens: 20 leaves no room"):
        enc.encode_item(item(kind="generate", prompt="p", expected="x", max_new_tokens=20))
    # a long context is cut from the left, the answer survives
    ch = enc.encode_item(item(kind="choice", context="context words " * 20, choices=("yes", "no"), answer=0))
    assert ch.truncated and all(len(r.input_ids) <= 16 and r.n_rows >= 1 for r in ch.score)


def test_window_spans_by_hand():
    # 20 tokens, windows of 8, stride 4: [0,8) scores 1..7, [4,12) scores 8..11, ... the last one ends at 20
    assert window_spans(20, 8, 4) == [(0, 8, 1), (4, 12, 8), (8, 16, 12), (12, 20, 16)]
    # 18 tokens: the last window is aligned to the end and scores only the 2 tokens left (6 of context)
    assert window_spans(18, 8, 4) == [(0, 8, 1), (4, 12, 8), (8, 16, 12), (10, 18, 16)]
    assert window_spans(8, 8, 4) == [(0, 8, 1)]
    assert window_spans(9, 8, 7) == [(0, 8, 1), (1, 9, 8)]
    with pytest.raises(InputError, match="stride 16 must be between 1 and max length - 1"):
        Encoder(tokenizer(True), max_length=16, stride=16)


def test_chunk_spans_are_llama_perplexitys_windows():
    # 20 tokens, chunks of 8: [0,8) and [8,16) each score the 3 tokens after their middle (llama-perplexity's
    # n_ctx - 1 - n_ctx/2 predictions from first = n_ctx/2); the 4 tokens after 16 are not scored
    assert chunk_spans(20, 8) == [(0, 8, 5), (8, 16, 13)] and chunk_scored(8) == 3
    assert chunk_spans(16, 8) == [(0, 8, 5), (8, 16, 13)]
    assert chunk_spans(9, 7) == [(0, 7, 4)] and chunk_scored(7) == 3  # odd: first = 3, 7 - 1 - 3 predictions
    assert chunk_scored(512) == 255
    assert chunk_spans(8, 8) == [(0, 8, 1)]  # an item that fits is scored whole, as in sliding mode
    with pytest.raises(InputError, match="windows 'overlap' is not one of sliding, chunks"):
        Encoder(tokenizer(True), windows="overlap")


@pytest.mark.parametrize("adds_bos", [True, False])
def test_chunks_mode_scores_second_halves_and_starts_each_chunk_like_llama_perplexity(adds_bos):
    tok = tokenizer(adds_bos)
    enc = Encoder(tok, max_length=16, windows="chunks")
    text = "word " * 40
    ids = tuple(enc.encode(text)) if adds_bos else (enc.prefix_id, *enc.encode(text))
    long = enc.encode_item(item(kind="text", text=text))
    n = len(ids)
    assert long.windows == n // 16 >= 2 and enc.unscored_tokens == n - 16 * (n // 16)
    for w, r in enumerate(long.score):
        assert len(r.input_ids) == 16 and r.start == 9 and r.n_rows == 7
        assert r.input_ids[1:] == ids[16 * w + 1:16 * (w + 1)]
        # llama-perplexity writes BOS over the first token of every chunk when the model adds BOS
        assert r.input_ids[0] == (tok.bos_token_id if adds_bos else ids[16 * w])


def test_chunks_mode_counts_the_tail_of_a_text_with_one_whole_chunk():
    """Between one and two windows long: one chunk is scored and the rest is unscored, and the item counts as
    windowed (it is not scored whole)."""
    tok = tokenizer(True)
    enc = Encoder(tok, max_length=16, windows="chunks")
    text = next(t for t in ("word " * k for k in range(1, 40)) if 16 < len(enc.encode(t)) < 32)
    n = len(enc.encode(text))
    long = enc.encode_item(item(kind="text", text=text))
    assert long.windows == 1 and long.windowed and enc.unscored_tokens == n - 16
    assert [(r.start, r.n_rows) for r in long.score] == [(9, 7)]


def test_tokenizer_without_bos_gets_lm_evals_prefix_token():
    tok = tokenizer(False)
    enc = Encoder(tok)
    assert not enc.add_bos
    assert enc.prefix_id == tok.bos_token_id  # the vocabulary still has a BOS token: lm-eval's prefix token
    text = enc.encode_item(item(kind="text", text="hello world"))
    assert text.score[0].input_ids[0] == enc.prefix_id and text.score[0].start == 1
    ch = enc.encode_item(item(kind="choice", context="", choices=("Paris", "Rome"), answer=0))
    assert ch.score[0].input_ids[0] == enc.prefix_id and ch.score[0].start == 1
    # different BOS behaviour = a different tokenizer for the cache key
    assert enc.fingerprint() != Encoder(tokenizer(True)).fingerprint()
    assert Encoder(tokenizer(True)).fingerprint() == Encoder(tokenizer(True)).fingerprint()
