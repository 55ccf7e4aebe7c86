"""Metrics, the top-k lower bound, the 16-bit cache codec and the gate, on controlled distributions."""

from __future__ import annotations

import numpy as np
import pytest

from qcheck.errors import InputError, UsageError
from qcheck.eval.cache import (
    KIND_FULL,
    KIND_TOPK,
    WINDOW_NATS,
    CacheReader,
    CacheWriter,
    decode_full_u16,
    encode_full_u16,
)
from qcheck.eval.gate import TIERS, Thresholds, evaluate, resolution_warnings
from qcheck.eval.metrics import CandidateMetrics, RowComparison, choice_predictions, compare_rows
from qcheck.eval.runners.base import TokenScores, VocabInfo, check_same_vocab


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    return (z - np.log(np.exp(z).sum(axis=1, keepdims=True))).astype(np.float32)


def peaked_pair(n=64, vocab=1000, noise=0.3, seed=0):
    """Reference/candidate log-prob rows shaped like an LM's: Zipf-like (p ∝ rank^-1.5, top token ~0.4 on
    average) with per-row noise; the candidate adds logit noise everywhere, tail included."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0, 1.0, (n, vocab)) - 1.5 * np.log1p(np.arange(vocab))[rng.permutation(vocab)]
    ref = log_softmax(z)
    cand = log_softmax(z + rng.normal(0, noise, z.shape))
    targets = rng.integers(0, vocab, n)
    return ref, cand, targets


def exact_kl(ref, cand):
    p = np.exp(ref.astype(np.float64))
    return (p * (ref.astype(np.float64) - cand.astype(np.float64))).sum(axis=1)


def rows_from(full, targets):
    from qcheck.eval.cache import RefRows

    return RefRows(full[np.arange(len(targets)), targets].astype(np.float32), full.argmax(1), full=full)


def topk_scores(full, targets, k):
    ids = np.argsort(-full, axis=1)[:, :k]
    return TokenScores(target_logprobs=full[np.arange(len(targets)), targets],
                       topk_ids=ids, topk_logprobs=np.take_along_axis(full, ids, axis=1))


def test_full_rows_give_exact_kl_and_identity_is_zero():
    ref, cand, y = peaked_pair()
    rows = compare_rows(rows_from(ref, y), TokenScores(cand[np.arange(len(y)), y], full=cand), y, "t")
    assert rows.exact
    np.testing.assert_allclose(rows.kld, exact_kl(ref, cand), rtol=1e-6)
    same = compare_rows(rows_from(ref, y), TokenScores(ref[np.arange(len(y)), y], full=ref), y, "t")
    assert np.abs(same.kld).max() < 1e-6 and same.top1.all()


def test_float32_kl_stays_accurate_for_near_lossless_candidates():
    # a large vocabulary and a tiny perturbation: KL ~1e-6, where float32 cancellation would show
    ref, cand, y = peaked_pair(n=16, vocab=32000, noise=0.002, seed=4)
    exact = exact_kl(ref, cand)
    assert 1e-7 < exact.mean() < 1e-4
    rows = compare_rows(rows_from(ref, y), TokenScores(cand[np.arange(len(y)), y], full=cand), y, "t")
    np.testing.assert_allclose(rows.kld, exact, rtol=2e-3, atol=1e-9)


@pytest.mark.parametrize("k", [1, 5, 20, 100])
def test_bucketed_topk_kl_is_a_lower_bound_and_tight_at_20(k):
    ref, cand, y = peaked_pair(noise=0.3, seed=k)
    exact = exact_kl(ref, cand)
    lb = compare_rows(rows_from(ref, y), topk_scores(cand, y, k), y, "t")
    assert not lb.exact
    assert (lb.kld <= exact + 1e-6).all()  # per token, not only on average
    assert (lb.kld >= -1e-9).all()
    assert lb.rest_mass is not None and (lb.rest_mass >= 0).all()
    if k == 20:
        assert lb.kld.mean() >= 0.75 * exact.mean()
    if k == 100:
        assert lb.kld.mean() >= 0.9 * exact.mean()
    # a larger bucket set never loosens the bound
    if k < 100:
        bigger = compare_rows(rows_from(ref, y), topk_scores(cand, y, 100), y, "t")
        assert bigger.kld.mean() >= lb.kld.mean() - 1e-9


def test_reference_topk_and_both_topk_are_lower_bounds():
    from qcheck.eval.cache import RefRows

    ref, cand, y = peaked_pair(seed=3)
    exact = exact_kl(ref, cand)
    ids = np.argsort(-ref, axis=1)[:, :20]
    ref_topk = RefRows(ref[np.arange(len(y)), y], ref.argmax(1), topk_ids=ids,
                       topk_logprobs=np.take_along_axis(ref, ids, axis=1))
    a = compare_rows(ref_topk, TokenScores(cand[np.arange(len(y)), y], full=cand), y, "t")
    b = compare_rows(ref_topk, topk_scores(cand, y, 20), y, "t")
    assert (a.kld <= exact + 1e-6).all() and a.kld.mean() >= 0.75 * exact.mean()
    assert (b.kld <= exact + 1e-6).all() and (b.kld <= a.kld + 1e-6).all()


def test_u16_codec_error_is_within_the_documented_bound():
    ref, _, _ = peaked_pair(n=32, vocab=4000, seed=5)
    scale, floor, codes = encode_full_u16(ref)
    dec, probs = decode_full_u16(scale, floor, codes)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    in_window = ref >= ref.max(axis=1, keepdims=True) - WINDOW_NATS
    err = np.abs(dec - ref)[in_window]
    # quantisation step / 2 plus the (tiny) renormalisation shift
    assert err.max() <= WINDOW_NATS / 131070 + 1e-4
    kl_self = exact_kl(dec, ref)
    assert np.abs(kl_self).max() < 1e-6


def test_cache_roundtrip_full_and_topk(tmp_path):
    ref, _, y = peaked_pair(n=10, vocab=300, seed=9)
    scores = TokenScores(ref[np.arange(10), y], full=ref)
    for kind, topk in ((KIND_FULL, None), (KIND_TOPK, 7)):
        writer = CacheWriter(tmp_path, f"key-{kind}", kind, 300, topk, {"x": 1})
        writer.add_scores("item-a", scores)
        writer.add_scores("item-b", TokenScores(ref[:3, 0], full=ref[:3]))
        final = writer.commit()
        reader = CacheReader.open_if_complete(tmp_path, f"key-{kind}")
        assert reader is not None and reader.dir == final
        rows = reader.rows("item-a")
        np.testing.assert_array_equal(rows.target_logprobs, scores.target_logprobs)  # exact float32
        np.testing.assert_array_equal(rows.argmax, ref.argmax(1))
        if kind == KIND_FULL:
            assert np.abs(rows.full - ref).max() < 2e-4
        else:
            np.testing.assert_array_equal(rows.topk_ids, np.argsort(-ref, axis=1, kind="stable")[:, :7])
        assert reader.rows("item-b").n_rows == 3
        with pytest.raises(InputError, match="missing from the reference cache"):
            reader.rows("item-c")
        reader.close()
    # an aborted writer leaves nothing that looks like an entry
    w = CacheWriter(tmp_path, "aborted", KIND_FULL, 300, None, {})
    w.add_scores("a", scores)
    w.abort()
    assert CacheReader.open_if_complete(tmp_path, "aborted") is None
    assert not any(p.name.startswith(".partial") for p in tmp_path.iterdir())


def test_corrupt_cache_index_is_rejected(tmp_path):
    from qcheck.eval.cache import RejectedEntry

    ref, _, y = peaked_pair(n=4, vocab=50, seed=1)
    w = CacheWriter(tmp_path, "k", KIND_FULL, 50, None, {})
    w.add_scores("a", TokenScores(ref[np.arange(4), y], full=ref))
    final = w.commit()
    (final / "index.json").write_text('{"a": [999999, 4]}')
    with pytest.raises(RejectedEntry, match=r"index\.json is not what the entry was signed with"):
        CacheReader(final)


def test_choice_predictions_follow_lm_eval_normalisation():
    # ll favours the short answer; per character the long one wins (acc vs acc_norm differ)
    lls = np.array([-2.0, -6.0])
    choices = ("no", "absolutely yes")
    assert choice_predictions(lls, choices) == {"acc": 0, "acc_norm": 1, "acc_bytes": 1}
    # bytes vs characters: "é" is 1 char, 2 bytes
    lls = np.array([-3.0, -3.3])
    assert choice_predictions(lls, ("ééé", "abc"))["acc_norm"] == 0
    assert choice_predictions(lls, ("ééé", "abc"))["acc_bytes"] == 0
    assert choice_predictions(np.array([-3.0, -2.9]), ("ééé", "abc")) == {"acc": 1, "acc_norm": 1, "acc_bytes": 0}


def test_candidate_metrics_flips_and_summary():
    from qcheck.eval.tasks import TaskItem

    m = CandidateMetrics(n_boot=200)
    kl = np.array([0.1, 0.3])
    m.add_rows("d1", RowComparison(kl, np.array([True, False]), np.log([0.5, 0.25]), np.log([0.25, 0.25]), True))
    items = [TaskItem(id=f"i{k}", kind="choice", task="q", doc=f"i{k}", source="x", context="c",
                      choices=("a", "bb"), answer=0) for k in range(4)]
    good, bad = np.array([-1.0, -5.0]), np.array([-5.0, -1.0])
    m.add_choice(items[0], good, good)  # C->C
    m.add_choice(items[1], good, bad)  # C->I
    m.add_choice(items[2], bad, good)  # I->C
    m.add_choice(items[3], good, bad)  # C->I
    metrics, intervals = m.summary()
    assert metrics["kld_mean"] == pytest.approx(0.2)
    assert metrics["top1_agreement"] == 0.5
    assert metrics["delta_p_mean"] == pytest.approx(-0.125)
    assert metrics["delta_p_rms"] == pytest.approx(np.sqrt(0.25**2 / 2))
    assert metrics["ln_ppl_ratio"] == pytest.approx(np.log(2) / 2)
    assert metrics["accuracy_reference"] == 0.75 and metrics["accuracy"] == 0.5
    assert (metrics["flips_c_to_i_count"], metrics["flips_i_to_c_count"]) == (2, 1)
    assert metrics["flips"] == 0.75 and metrics["recovery"] == pytest.approx(2 / 3)
    assert metrics["accuracy_delta"] == pytest.approx(-0.25)
    assert metrics["mcnemar_p"] == pytest.approx(1.0)
    assert intervals["top1_agreement"]["method"] == "wilson"
    assert m.per_task()["q"]["flips_c_to_i"] == 2


def test_vocab_and_bos_mismatch_stop_the_run():
    ref = VocabInfo(512, 0, True)
    check_same_vocab(ref, VocabInfo(512, 0, True), "ok")
    with pytest.raises(InputError, match="vocabulary size 500 differs from the reference's 512"):
        check_same_vocab(ref, VocabInfo(500, 0, True), "c")
    with pytest.raises(InputError, match="BOS handling differs"):
        check_same_vocab(ref, VocabInfo(512, 0, False), "c")
    with pytest.raises(InputError, match="BOS handling differs"):
        check_same_vocab(ref, VocabInfo(512, 1, True), "c")


# ------------------------------------------------------------------------------------------- gate
def test_thresholds_from_mapping_rejects_unknown_keys_by_name():
    with pytest.raises(UsageError, match="unknown eval threshold\\(s\\): max_kl, min_top_1"):
        Thresholds.from_mapping({"max-kl": 0.1, "min_top_1": 0.9})
    with pytest.raises(UsageError, match=r"min-top1=1\.5 is outside"):
        Thresholds.from_mapping({"min-top1": 1.5})
    for bad in (float("inf"), float("-inf"), float("nan"), 10**400):  # 10**400: an integer beyond any float
        with pytest.raises(UsageError, match=r"max-kld=(-?inf|nan) is not a finite number; leave it out"):
            Thresholds.from_mapping({"max-kld": bad})
        with pytest.raises(UsageError, match="is not a finite number"):
            Thresholds(max_kld=bad)  # the Python API is checked too
    with pytest.raises(UsageError, match="must be a number"):
        Thresholds.from_mapping({"max-kld": "small"})
    with pytest.raises(UsageError, match="unknown tier"):
        Thresholds.from_mapping({"tier": "perfect"})
    t = Thresholds.from_mapping({"tier": "good", "max-kld": 0.02, "use-intervals": True})
    assert (t.max_kld, t.min_top1, t.tier, t.use_intervals) == (0.02, TIERS["good"][0]["min_top1"], "good", True)


def test_gate_pass_fail_skip_and_interval_mode():
    metrics = {"kld_mean": 0.02, "top1_agreement": 0.95, "accuracy_delta": -0.03, "recovery": 0.96,
               "greedy_agreement": None}
    intervals = {"kld_mean": {"low": 0.015, "high": 0.04}, "top1_agreement": {"low": 0.93, "high": 0.97},
                 "accuracy_delta": {"low": -0.06, "high": 0.0}}
    ok = evaluate(Thresholds(max_kld=0.03, min_top1=0.92, min_greedy_agreement=0.9), metrics, intervals)
    assert ok.passed and ok.skipped == ["min_greedy_agreement"]
    bad = evaluate(Thresholds(max_kld=0.03, max_accuracy_drop=0.02), metrics, intervals)
    assert not bad.passed
    assert [f["threshold"] for f in bad.failures] == ["max_accuracy_drop"]
    assert bad.failures[0]["value"] == pytest.approx(0.03)
    strict = evaluate(Thresholds(max_kld=0.03, use_intervals=True), metrics, intervals)
    assert not strict.passed and strict.failures[0]["value"] == 0.04 and strict.failures[0]["basis"] == "interval"
    warn = resolution_warnings(Thresholds(max_kld=0.03), metrics, intervals)
    assert len(warn) == 1 and "too small to resolve" in warn[0]
    few = resolution_warnings(Thresholds(max_accuracy_drop=0.01), {"items_scored": 50, "flips": 0.1}, {})
    assert "smallest detectable accuracy difference" in few[0]


def test_non_finite_metric_fails_the_gate_instead_of_passing():
    out = evaluate(Thresholds(max_kld=0.1, min_top1=0.9), {"kld_mean": float("nan"), "top1_agreement": 0.95}, {})
    assert not out.passed
    assert out.failures[0]["threshold"] == "max_kld" and "not a finite number" in out.failures[0]["message"]


def test_candidate_spec_parsing(tmp_path):
    from qcheck.eval.run import CandidateSpec

    assert CandidateSpec.parse("./m/llama.Q4_0.gguf") == CandidateSpec("llama.Q4_0", "./m/llama.Q4_0.gguf")
    assert CandidateSpec.parse("q4=./x.gguf") == CandidateSpec("q4", "./x.gguf")
    assert CandidateSpec.parse("q4=simulated:./x.gguf") == CandidateSpec("q4", "./x.gguf", backend="simulated")
    assert CandidateSpec.parse("./model-dir/").name == "model-dir"
    odd = tmp_path / "a=b"
    odd.mkdir()
    assert CandidateSpec.parse(str(odd)) == CandidateSpec("a=b", str(odd))  # an existing path wins
    assert CandidateSpec.parse("q=nobackend:x").path == "nobackend:x"  # unknown prefixes stay in the path
    with pytest.raises(UsageError, match="NAME=PATH"):
        CandidateSpec.parse("=x")


def test_unknown_backend_is_a_usage_error():
    from qcheck.eval.runners import RunnerContext, build_runner

    with pytest.raises(UsageError, match=r"unknown candidate backend 'vllm'; known: .*simulated"):
        build_runner("vllm", "c", "x", RunnerContext("r", None, VocabInfo(1, None, False), None))


def test_cache_encodes_long_requests_in_chunks_identically(tmp_path):
    ref, _, y = peaked_pair(n=150, vocab=50, seed=2)  # 150 rows: three encoder chunks of <= 64
    w = CacheWriter(tmp_path, "long", KIND_FULL, 50, None, {})
    w.add_scores("a", TokenScores(ref[np.arange(150), y], full=ref))
    reader = CacheReader(w.commit())
    rows = reader.rows("a")
    whole, _ = decode_full_u16(*encode_full_u16(ref))
    np.testing.assert_array_equal(rows.full, whole)
