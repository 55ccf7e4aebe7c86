"""The output layer in row blocks and batched forwards give the same numbers as one whole-request forward.

Real tiny transformers models of three architectures (Llama with an untied head, Gemma 2 with final-logit
soft-capping and tied embeddings, Qwen2 with tied embeddings) at two vocabulary sizes; the oracle is the
model's own ``forward(logits_to_keep=n)`` + ``log_softmax``, request by request, as the runner did before.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from qcheck.eval.cache import KIND_FULL, KIND_TOPK, CacheReader, CacheWriter  # noqa: E402
from qcheck.eval.runners.base import ScoreRequest, VocabInfo  # noqa: E402
from qcheck.eval.runners.reference import TransformersRunner, batches, rows_per_block  # noqa: E402


def _model(arch: str, vocab: int) -> object:
    torch.manual_seed(1)
    common = {"vocab_size": vocab, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}
    if arch == "llama":
        config = transformers.LlamaConfig(**common, tie_word_embeddings=False, initializer_range=0.2)
        return transformers.LlamaForCausalLM(config).eval()
    if arch == "gemma2":
        config = transformers.Gemma2Config(**common, head_dim=16, final_logit_softcapping=3.0,
                                           attn_logit_softcapping=50.0, sliding_window=8, initializer_range=0.2,
                                           tie_word_embeddings=True)
        model = transformers.Gemma2ForCausalLM(config).eval()
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
        return model
    config = transformers.Qwen2Config(**common, tie_word_embeddings=True, initializer_range=0.2)
    model = transformers.Qwen2ForCausalLM(config).eval()
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    return model


def _requests(vocab: int) -> list[ScoreRequest]:
    rng = np.random.default_rng(3)
    out = []
    for i, (length, start) in enumerate([(23, 1), (9, 4), (40, 1), (12, 7), (2, 1), (31, 30)]):
        ids = tuple(int(t) for t in rng.integers(0, vocab, size=length))
        out.append(ScoreRequest(key=f"r{i}", input_ids=ids, start=start))
    return out


def _oracle(model: object, req: ScoreRequest) -> tuple[np.ndarray, np.ndarray]:
    with torch.inference_mode():
        ids = torch.tensor([req.input_ids[:-1]])
        logits = model(input_ids=ids, use_cache=False, logits_to_keep=req.n_rows).logits[0, -req.n_rows:].float()
        lp = torch.log_softmax(logits, dim=-1)
    return lp.numpy(), lp.argmax(-1).numpy()


ARCHS = ("llama", "gemma2", "qwen2")


@pytest.mark.parametrize("vocab", [97, 1000])
@pytest.mark.parametrize("arch", ARCHS)
def test_blocked_batched_rows_equal_whole_request_rows(arch: str, vocab: int) -> None:
    model = _model(arch, vocab)
    info = VocabInfo(vocab_size=vocab, bos_token_id=None, add_bos=False)
    reqs = _requests(vocab)
    oracle = [_oracle(model, r) for r in reqs]
    # 5 rows per block (at the 1000 vocabulary) and every request batched with its neighbours ...
    blocked = TransformersRunner(model, info, "blocked", block_bytes=4 * vocab * 5, batch_tokens=10_000)
    # ... against one request per forward and one row per block
    single = TransformersRunner(model, info, "single", block_bytes=1, batch_tokens=1)
    assert rows_per_block(vocab, blocked.block_bytes) == 5
    for runner in (blocked, single):
        seen: dict[int, list[int]] = {}
        for index, start, rows in runner.score_blocks(reqs):
            assert rows.n_rows <= (5 if runner is blocked else 1)
            lp, greedy = oracle[index]
            want = lp[start:start + rows.n_rows]
            np.testing.assert_allclose(rows.full, want, atol=2e-5, rtol=0)
            y = np.asarray(reqs[index].targets[start:start + rows.n_rows])
            np.testing.assert_allclose(rows.target_logprobs, want[np.arange(len(y)), y], atol=2e-5, rtol=0)
            assert (rows.greedy_ids == greedy[start:start + rows.n_rows]).mean() == 1.0
            seen.setdefault(index, []).append(start)
        # every request, every row, in order
        assert sorted(seen) == list(range(len(reqs)))
        for starts in seen.values():
            assert starts == sorted(starts) and starts[0] == 0
        assert runner.blocked_head is True and not runner.notes
    # the batched runner really batched: fewer decoder forwards than requests (+2 for the one-off head check)
    assert blocked.forward_calls == 1 + 2
    assert single.forward_calls == len(reqs) + 2
    # the whole-request form of the protocol concatenates the blocks back
    whole = list(blocked.score(reqs))
    assert [w.n_rows for w in whole] == [r.n_rows for r in reqs]
    np.testing.assert_allclose(whole[2].full, oracle[2][0], atol=2e-5, rtol=0)


def test_softcap_is_applied_per_block() -> None:
    """Without Gemma 2's final soft-capping the rows would differ (the check above is not vacuous)."""
    model = _model("gemma2", 200)
    req = _requests(200)[0]
    with torch.inference_mode():
        h = model.model(input_ids=torch.tensor([req.input_ids[:-1]]), use_cache=False)[0][0]
        raw = torch.log_softmax(model.lm_head(h).float(), -1).numpy()
    lp, _ = _oracle(model, req)
    assert np.abs(raw - lp).max() > 0.1
    runner = TransformersRunner(model, VocabInfo(200, None, False), "g")
    (rows,) = list(runner.score([req]))
    np.testing.assert_allclose(rows.full, lp, atol=2e-5, rtol=0)


def test_a_head_it_cannot_reproduce_falls_back_to_whole_logits() -> None:
    """A model whose forward post-processes logits in a way the blocked head does not know: the first-request
    check notices and the runner uses the model's own logits (same numbers, a note says so)."""
    model = _model("llama", 150)

    class Scaled(type(model)):  # type: ignore[misc]
        def forward(self, *args: object, **kwargs: object) -> object:
            out = super().forward(*args, **kwargs)
            out.logits = out.logits * 0.5
            return out

    model.__class__ = Scaled
    reqs = _requests(150)[:3]
    runner = TransformersRunner(model, VocabInfo(150, None, False), "odd", block_bytes=4 * 150 * 4)
    got = list(runner.score(reqs))
    assert runner.blocked_head is False
    assert "whole-request logits" in runner.notes[0]
    for req, rows in zip(reqs, got, strict=True):
        np.testing.assert_allclose(rows.full, _oracle(model, req)[0], atol=2e-5, rtol=0)


def test_batches_respect_the_token_budget() -> None:
    reqs = [ScoreRequest(f"k{i}", tuple(range(n)), 1) for i, n in enumerate([11, 11, 11, 51, 3, 3])]
    assert list(batches(reqs, max_tokens=30)) == [[0, 1, 2], [3], [4, 5]]
    assert list(batches(reqs, max_tokens=1)) == [[i] for i in range(6)]
    assert list(batches(reqs, max_tokens=10_000, max_batch=4)) == [[0, 1, 2, 3], [4, 5]]


@pytest.mark.parametrize("kind,topk", [(KIND_FULL, None), (KIND_TOPK, 7)])
def test_cache_rows_written_in_blocks_read_in_any_block(tmp_path, kind: str, topk: int | None) -> None:
    model = _model("qwen2", 300)
    reqs = _requests(300)
    runner = TransformersRunner(model, VocabInfo(300, None, False), "ref", block_bytes=4 * 300 * 4)
    whole = list(TransformersRunner(model, VocabInfo(300, None, False), "ref2").score(reqs))
    blocked = CacheWriter(tmp_path / "a", "k", kind, 300, topk, {})
    for index, _start, rows in runner.score_blocks(reqs):
        blocked.add_scores(reqs[index].key, rows)
    at_once = CacheWriter(tmp_path / "b", "k", kind, 300, topk, {})
    for req, rows in zip(reqs, whole, strict=True):
        at_once.add_scores(req.key, rows)
    a, b = CacheReader(blocked.commit()), CacheReader(at_once.commit())
    assert (a.dir / "rows.bin").stat().st_size == (b.dir / "rows.bin").stat().st_size
    for req in reqs:
        full = b.rows(req.key)
        assert a.n_rows(req.key) == req.n_rows
        np.testing.assert_allclose(a.rows(req.key).target_logprobs, full.target_logprobs, atol=2e-5)
        mid = (0, req.n_rows) if req.n_rows < 3 else (1, req.n_rows - 1)
        part = a.rows(req.key, *mid)
        np.testing.assert_array_equal(part.argmax, full.argmax[mid[0]:mid[1]])
        if kind == KIND_FULL:
            np.testing.assert_allclose(part.full, full.full[mid[0]:mid[1]], atol=4e-4)
        else:
            np.testing.assert_array_equal(part.topk_ids, full.topk_ids[mid[0]:mid[1]])
    from qcheck.errors import InputError

    with pytest.raises(InputError, match="rows 0:99 requested"):
        a.rows(reqs[1].key, 0, 99)
    a.close()
    b.close()


# ---------------------------------------------------------------------------------------------- through run_eval
def _perturbed(path: object) -> object:
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    torch.manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.003)
    return model


def _run(ref: object, tasks: object, runner: object, cache: object, **kw: object) -> dict:
    from qcheck.eval.run import CandidateSpec, EvalConfig, run_eval

    result = run_eval(EvalConfig(reference=str(ref), candidates=[CandidateSpec("c", runner=runner)],
                                 tasks=[str(tasks)], cache_dir=str(cache), bootstrap=200, **kw))
    return result.to_json()


def test_metrics_do_not_depend_on_blocks_or_batches(tmp_path) -> None:
    """Every metric of a real run is the same whether the candidate's output layer runs in 3-row blocks, one
    request per forward, or 4,096-token batches (the reference cache is shared, so only the candidate varies)."""
    from qcheck.eval.runners.reference import vocab_info
    from support.eval_helpers import task_file, tiny_reference

    ref = tiny_reference()
    model = _perturbed(ref)
    tok = transformers.AutoTokenizer.from_pretrained(ref)
    info = vocab_info(model, tok, True)
    batched = _run(ref, task_file(), TransformersRunner(model, info, "c"), tmp_path)
    blocked = _run(ref, task_file(), TransformersRunner(model, info, "c", block_bytes=4 * 512 * 3, batch_tokens=1),
                   tmp_path)
    a, b = batched["candidates"][0]["metrics"], blocked["candidates"][0]["metrics"]
    assert a["tokens_scored"] == b["tokens_scored"] > 50 and a["items_scored"] == b["items_scored"] == 5
    assert 1e-4 < a["kld_mean"] < 1.0  # a real difference to measure
    assert a.keys() == b.keys()
    for key, value in a.items():
        if isinstance(value, float):
            assert value == pytest.approx(b[key], rel=1e-4, abs=1e-7), key
        else:
            assert value == b[key], key


@pytest.mark.parametrize("windows", ["sliding", "chunks"])
def test_windows_match_a_hand_computation(tmp_path, windows: str) -> None:
    """One long text item, windows of 32 tokens (sliding with stride 16, or llama-perplexity's chunks): the
    run's perplexities and mean KLD equal a direct computation that runs each window through both models and
    keeps only the tokens it should score (chunks: BOS written over each chunk's first token, as there)."""
    import json

    from qcheck.eval.encode import chunk_spans, window_spans
    from qcheck.eval.runners.reference import vocab_info
    from support.eval_helpers import tiny_reference

    ref = tiny_reference()
    text = " ".join(f"word{i} and some more text {i * 7}" for i in range(12))
    tasks = tmp_path / "long.jsonl"
    tasks.write_text(json.dumps({"id": "long", "kind": "text", "text": text}) + "\n")
    tok = transformers.AutoTokenizer.from_pretrained(ref)
    ids = tok(text)["input_ids"]
    assert len(ids) > 80
    reference = transformers.AutoModelForCausalLM.from_pretrained(ref, dtype=torch.float32).eval()
    cand = _perturbed(ref)
    data = _run(ref, tasks, TransformersRunner(cand, vocab_info(cand, tok, True), "c"), tmp_path / "c",
                max_length=32, stride=16, windows=windows)
    m = data["candidates"][0]["metrics"]
    assert data["tasks"]["windowed_items"] == 1 and data["settings"]["stride"] == 16
    assert data["settings"]["windows"] == windows
    spans = window_spans(len(ids), 32, 16) if windows == "sliding" else chunk_spans(len(ids), 32)

    nll_ref, nll_cand, kld = [], [], []
    for w, (begin, end, first) in enumerate(spans):
        window = ids[begin:end - 1]
        if windows == "chunks" and w:
            window = [tok.bos_token_id, *window[1:]]
        x = torch.tensor([window])
        y = torch.tensor(ids[first:end])
        with torch.inference_mode():
            lp = torch.log_softmax(reference(input_ids=x).logits[0].double(), -1)[first - begin - 1:]
            lq = torch.log_softmax(cand(input_ids=x).logits[0].double(), -1)[first - begin - 1:]
        nll_ref += (-lp.gather(1, y[:, None])[:, 0]).tolist()
        nll_cand += (-lq.gather(1, y[:, None])[:, 0]).tolist()
        kld += (lp.exp() * (lp - lq)).sum(-1).tolist()
    assert data["tasks"]["windows"] == len(spans) >= 2
    if windows == "sliding":
        assert m["tokens_scored"] == len(nll_ref) == len(ids) - 1  # every token after BOS exactly once
    else:  # the second half of each whole chunk; the tail after the last one is not scored
        assert m["tokens_scored"] == len(nll_ref) == 15 * len(spans)  # llama-perplexity's 32 - 1 - 16 per chunk
        assert data["tasks"]["unscored_tokens"] == len(ids) - 32 * len(spans)
    assert m["ppl_reference"] == pytest.approx(np.exp(np.mean(nll_ref)), rel=1e-5)
    assert m["ppl"] == pytest.approx(np.exp(np.mean(nll_cand)), rel=1e-5)
    # the reference's full rows come from the uint16 cache (±1.8e-4 nats per log-prob)
    assert m["kld_mean"] == pytest.approx(np.mean(kld), rel=2e-2)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_simulated_candidates_reuse_one_model(dtype: str) -> None:
    """The second simulated candidate of the same reference loads its weights into the first one's model: the
    same object, and exactly the weights a freshly built model gets (tied head included)."""
    from qcheck.eval.runners import simulated

    model = _model("qwen2", 120)
    config = model.config
    sd_a = {k: v.clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    sd_b = {k: v + 0.01 * torch.randn_like(v) for k, v in sd_a.items()}
    first = simulated.build_dense_model(config, sd_a, dtype, "cpu", "a")
    simulated.release_model(first, config, dtype, "cpu")
    second = simulated.build_dense_model(config, sd_b, dtype, "cpu", "b")
    assert second is first
    fresh = simulated.build_dense_model(config, sd_b, dtype, "cpu", "fresh")
    assert fresh is not first
    for (name, p), (_, q) in zip(second.state_dict().items(), fresh.state_dict().items(), strict=True):
        assert torch.equal(p, q), name
    assert second.lm_head.weight.data_ptr() == second.model.embed_tokens.weight.data_ptr()
    # another dtype or another config object: no reuse
    simulated.release_model(second, config, dtype, "cpu")
    other = "float32" if dtype == "bfloat16" else "bfloat16"
    assert simulated.build_dense_model(config, sd_a, other, "cpu", "c") is not second
    simulated.drop_skeleton()


def test_phase_peaks_separate_loading_from_scoring() -> None:
    """A 64 MB buffer held only while "loading" (as a simulated candidate's dequantised tensors are) shows in the
    phase's peak, not in the peak while scoring."""
    from qcheck.eval.perf import Phase

    phase = Phase()
    buffer = np.ones(8 << 20)  # 64 MB, touched
    del buffer
    phase.loaded()
    phase.tokens = 1000
    data = phase.done().to_json()
    assert data["tokens"] == 1000 and data["seconds"] >= data["load_seconds"] >= 0
    if data["peak_rss_scope"] == "phase":  # Linux with /proc/self/clear_refs
        assert data["peak_rss_bytes"] - data["scoring_peak_rss_bytes"] > 50e6
    else:
        assert data["scoring_peak_rss_bytes"] is None and data["peak_rss_bytes"] > 64e6
