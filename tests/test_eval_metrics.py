"""Metrics, the top-k lower bound, the 16-bit cache codec and the gate, on controlled distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qcheck.errors import InputError, UsageError
from qcheck.eval import stats
from qcheck.eval.cache import (
    KIND_FULL,
    KIND_TOPK,
    WINDOW_NATS,
    CacheReader,
    CacheWriter,
    RefRows,
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


# ------------------------------------------------------------------------------------- metrics by hand
def _item(i: str, kind: str, task: str, **kw):
    from qcheck.eval.tasks import TaskItem

    return TaskItem(id=i, kind=kind, task=task, doc=i, source="x", **kw)


def _hand_made() -> CandidateMetrics:
    """Two documents of rows (one exact, one a top-k lower bound with one unknown top-1), four choice items and two
    generate items whose outcomes are written out below."""
    from qcheck.eval.runners.base import Generation

    m = CandidateMetrics(n_boot=200, seed=1)
    m.add_rows("a", RowComparison(np.array([0.0, 0.1, 0.2]), np.array([True, False, True]),
                                  np.array([-1.0, -2.0, -3.0]), np.array([-1.5, -2.0, -2.5]), exact=True),
               np.array([0, 511, 512]))
    m.add_rows("b", RowComparison(np.array([0.4, 0.3]), np.array([True, True]), np.array([-0.5, -1.0]),
                                  np.array([-1.0, -1.0]), exact=False, rest_mass=np.array([0.3, 0.1]),
                                  top1_known=np.array([True, False])), np.array([2047, 2048]))
    choices = ("a", "bb", "ccc")
    right, wrong, other = np.array([-1.0, -5.0, -9.0]), np.array([-5.0, -1.0, -9.0]), np.array([-9.0, -5.0, -1.0])
    m.add_choice(_item("c1", "choice", "quiz", choices=choices, answer=0), right, right)  # C->C
    m.add_choice(_item("c2", "choice", "quiz", choices=choices, answer=0), right, wrong)  # C->I
    m.add_choice(_item("c3", "choice", "quiz", choices=choices, answer=0), wrong, right)  # I->C
    m.add_choice(_item("c4", "choice", "quiz", choices=choices, answer=0), wrong, other)  # I->I, other answer
    gen = {"prompt": "p", "expected": "yes"}
    m.add_generation(_item("g1", "generate", "gen", **gen), Generation([5, 6, 2]), Generation([5, 6, 2]), "yes",
                     "yes", stop_ids=[2])
    m.add_generation(_item("g2", "generate", "gen", **gen), Generation([5, 6, 2]), Generation([5, 7, 7, 7]), "yes",
                     "no", stop_ids=[2])
    return m


def test_every_token_metric_of_hand_made_rows():
    metrics, intervals = _hand_made().summary()
    kld = np.array([0.0, 0.1, 0.2, 0.4, 0.3])
    ref, cand = np.array([-1.0, -2.0, -3.0, -0.5, -1.0]), np.array([-1.5, -2.0, -2.5, -1.0, -1.0])
    dp = np.exp(cand) - np.exp(ref)
    assert (metrics["tokens_scored"], metrics["kld_kind"], metrics["documents"]) == (5, "lower-bound", 2)
    assert metrics["kld_mean"] == pytest.approx(0.2)
    # numpy's linear quantiles of [0, .1, .2, .3, .4]: position (n - 1) q
    assert [metrics[k] for k in ("kld_median", "kld_p90", "kld_p95", "kld_p99", "kld_p999")] == pytest.approx(
        [0.2, 0.36, 0.38, 0.396, 0.3996])
    assert (metrics["kld_max"], metrics["kld_min"]) == (0.4, 0.0)
    assert metrics["top1_agreement"] == 0.75 and metrics["top1_positions"] == 4  # one row's top-1 is unknown
    assert metrics["delta_p_mean"] == pytest.approx(dp.mean())
    assert metrics["delta_p_rms"] == pytest.approx(math.sqrt((dp**2).mean()))
    assert metrics["ppl_reference"] == pytest.approx(math.exp(7.5 / 5))
    assert metrics["ppl"] == pytest.approx(math.exp(8.0 / 5))
    assert metrics["ln_ppl_ratio"] == pytest.approx(0.1) and metrics["ppl_ratio"] == pytest.approx(math.exp(0.1))
    assert metrics["nll_correlation"] == pytest.approx(np.corrcoef(-ref, -cand)[0, 1])
    assert metrics["reference_rest_mass_mean"] == pytest.approx(0.2)
    assert intervals["top1_agreement"]["low"] == pytest.approx(stats.wilson(3, 4).low)
    ln = intervals["ln_ppl_ratio"]
    assert intervals["ppl_ratio"]["low"] == pytest.approx(math.exp(ln["low"]))
    assert intervals["ppl_ratio"]["high"] == pytest.approx(math.exp(ln["high"]))
    assert intervals["kld_mean"] == stats.cluster_bootstrap_mean(kld, np.array([0, 0, 0, 1, 1]), n_boot=200,
                                                                 seed=1).to_json()


def test_every_item_metric_of_hand_made_items():
    m = _hand_made()
    metrics, intervals = m.summary()
    # reference right on c1 c2 g1 g2, candidate on c1 c3 g1: C->I c2 g2, I->C c3
    assert (metrics["items_scored"], metrics["accuracy_reference"], metrics["accuracy"]) == (6, 4 / 6, 3 / 6)
    assert metrics["accuracy_delta"] == pytest.approx(-1 / 6) and metrics["recovery"] == pytest.approx(0.75)
    assert (metrics["flips"], metrics["flips_c_to_i"], metrics["flips_i_to_c"]) == pytest.approx((3 / 6, 2 / 6, 1 / 6))
    assert (metrics["flips_c_to_i_count"], metrics["flips_i_to_c_count"]) == (2, 1)
    assert metrics["answer_agreement"] == pytest.approx(2 / 6)  # c1 and g1 answer the same
    assert metrics["mcnemar_p"] == 1.0 and metrics["choice_metric"] == "acc"
    assert (metrics["greedy_agreement"], metrics["generate_items"]) == (0.5, 2)
    assert intervals["flips"]["high"] == pytest.approx(stats.wilson(3, 6).high)
    assert intervals["flips_c_to_i"]["high"] == pytest.approx(stats.wilson(2, 6).high)
    assert intervals["greedy_agreement"]["high"] == pytest.approx(stats.wilson(1, 2).high)
    assert intervals["accuracy_delta"]["low"] == pytest.approx(stats.paired_accuracy_delta(2, 1, 6)[1].low)
    assert intervals["recovery"]["method"] == "paired-bootstrap"
    # the choice variants over the choice items only: acc 2/4 -> 2/4
    assert (metrics["choice_acc_reference"], metrics["choice_acc"]) == (0.5, 0.5)
    # generation behaviour of the two generate items: g2's candidate runs on without its end token
    assert (metrics["generated_tokens_reference"], metrics["generated_tokens"]) == (2.0, 3.0)
    assert (metrics["termination_reference"], metrics["termination"]) == (1.0, 0.5)
    g2 = m.items[-1]
    assert (g2.first_divergence, g2.greedy_same, g2.same_answer) == (1, False, False)
    assert m.per_task() == {
        "quiz": {"n": 4, "reference": 2, "candidate": 2, "flips_c_to_i": 1, "flips_i_to_c": 1,
                 "accuracy_reference": 0.5, "accuracy": 0.5},
        "gen": {"n": 2, "reference": 2, "candidate": 1, "flips_c_to_i": 1, "flips_i_to_c": 0,
                "accuracy_reference": 1.0, "accuracy": 0.5}}


def test_first_divergence_of_a_generation_that_stops_early():
    from qcheck.eval.runners.base import Generation

    m = CandidateMetrics()
    item = _item("g", "generate", "gen", prompt="p", expected="a b")
    same = m.add_generation(item, Generation([1, 2, 3]), Generation([1, 2, 3]), " a b", "a b ")
    assert (same.first_divergence, same.greedy_same, same.same_answer) == (None, True, True)
    short = m.add_generation(item, Generation([1, 2, 3]), Generation([1, 2]), "a b", "a")
    assert (short.first_divergence, short.greedy_same) == (2, False)
    longer = m.add_generation(item, Generation([1, 2]), Generation([1, 2, 3, 4]), "a b", "a b c")
    assert longer.first_divergence == 2
    json_item = _item("j", "generate", "gen", prompt="p", match="json")
    out = m.add_generation(json_item, Generation([1]), Generation([1]), '{"a": 1}', "{")
    assert out.generation is not None and (out.generation[0].json_valid, out.generation[1].json_valid) == (True, False)


def test_no_reference_right_answer_has_no_recovery_and_no_items_no_item_metrics():
    m = CandidateMetrics(n_boot=50)
    item = _item("c", "choice", "quiz", choices=("a", "b"), answer=0)
    m.add_choice(item, np.array([-5.0, -1.0]), np.array([-1.0, -5.0]))  # I->C
    metrics, intervals = m.summary()
    assert (metrics["accuracy_reference"], metrics["recovery"]) == (0.0, None) and "recovery" not in intervals
    assert metrics["greedy_agreement"] is None and "greedy_agreement" not in intervals
    assert metrics["length_ratio"] is None
    empty, none = CandidateMetrics().summary()
    assert none == {} and empty["tokens_scored"] == 0 and empty["kld_kind"] is None and empty["items_scored"] == 0
    for key in ("kld_mean", "kld_p99", "top1_agreement", "ppl_ratio", "accuracy", "recovery", "flips",
                "answer_agreement", "length_ratio"):
        assert empty[key] is None, key
    exact = CandidateMetrics(n_boot=50)
    exact.add_rows("d", RowComparison(np.array([0.1]), np.array([True]), np.array([-1.0]), np.array([-1.1]),
                                      exact=True))
    metrics, _ = exact.summary()
    assert metrics["kld_kind"] == "exact" and "reference_rest_mass_mean" not in metrics
    assert "top1_positions" not in metrics
    with pytest.raises(ValueError):
        CandidateMetrics(choice_metric="f1")


def test_choice_variants_score_by_characters_and_bytes():
    m = CandidateMetrics(choice_metric="acc_norm")
    # the reference: ll -3 over 1 char vs -4 over 4 chars (8 UTF-8 bytes): acc picks 0, acc_norm and acc_bytes 1;
    # the candidate's -40 loses under every normalisation
    item = _item("c", "choice", "quiz", choices=("a", "éééé"), answer=1)
    out = m.add_choice(item, np.array([-3.0, -4.0]), np.array([-3.0, -40.0]))
    assert (out.ref_correct, out.cand_correct, out.same_answer) == (True, False, False)
    assert (out.ref_output, out.cand_output) == ("éééé", "a")
    metrics, _ = m.summary()
    assert (metrics["choice_acc_reference"], metrics["choice_acc"]) == (0.0, 0.0)
    assert (metrics["choice_acc_norm_reference"], metrics["choice_acc_norm"]) == (1.0, 0.0)
    assert (metrics["choice_acc_bytes_reference"], metrics["choice_acc_bytes"]) == (1.0, 0.0)
    assert metrics["choice_metric"] == "acc_norm"


def test_position_buckets_at_their_edges():
    """0-512, 512-2048, 2048-8192, 8192 up (docs/eval.md): a token at 511 is in the first, at 512 in the second;
    a row without a position (-1) is in none."""
    from qcheck.eval.metrics import POSITION_BUCKETS

    assert POSITION_BUCKETS == ((0, 512), (512, 2048), (2048, 8192), (8192, None))
    m = CandidateMetrics(n_boot=50)
    pos = np.array([0, 511, 512, 2047, 2048, 8191, 8192, 10**6])
    kld = np.arange(8, dtype=float) / 10
    top1 = np.array([True, False, True, True, False, False, True, True])
    known = np.array([True, True, True, False, True, True, True, True])
    m.add_rows("d", RowComparison(kld, top1, np.full(8, -1.0), np.full(8, -1.0) - kld, exact=True,
                                  top1_known=known), pos)
    m.add_rows("e", RowComparison(np.array([9.0]), np.array([False]), np.array([-1.0]), np.array([-9.0]),
                                  exact=True))
    buckets = m.by_position()
    assert [(b["from"], b["to"], b["tokens"], b["max_position"]) for b in buckets] == [
        (0, 512, 2, 511), (512, 2048, 2, 2047), (2048, 8192, 2, 8191), (8192, None, 2, 10**6)]
    assert [b["kld_mean"] for b in buckets] == pytest.approx([0.05, 0.25, 0.45, 0.65])
    assert [b["top1_agreement"] for b in buckets] == [0.5, 1.0, 0.0, 1.0]  # 2047's top-1 is unknown
    assert [b["ppl_ratio"] for b in buckets] == pytest.approx([math.exp(x) for x in (0.05, 0.25, 0.45, 0.65)])
    assert all(b["documents"] == 1 for b in buckets)
    assert buckets[1]["top1_agreement_interval"] == stats.wilson(1, 1).to_json()
    only_unknown = CandidateMetrics(n_boot=50)
    only_unknown.add_rows("d", RowComparison(np.array([0.1]), np.array([True]), np.array([-1.0]), np.array([-1.1]),
                                             exact=True, top1_known=np.array([False])), np.array([3]))
    (bucket,) = only_unknown.by_position()
    assert (bucket["top1_agreement"], bucket["top1_agreement_interval"], bucket["tokens"]) == (None, None, 1)


def test_position_buckets_skip_an_empty_bucket_and_report_the_later_ones():
    """Tokens only at 600 and 9000: the empty buckets before and between them are left out, the later ones kept."""
    m = CandidateMetrics(n_boot=50)
    m.add_rows("d", RowComparison(np.array([0.2, 0.6]), np.array([True, False]), np.array([-1.0, -1.0]),
                                  np.array([-1.2, -1.6]), exact=True), np.array([600, 9000]))
    buckets = m.by_position()
    assert [(b["from"], b["to"], b["tokens"], b["max_position"]) for b in buckets] == [
        (512, 2048, 1, 600), (8192, None, 1, 9000)]
    assert [b["kld_mean"] for b in buckets] == pytest.approx([0.2, 0.6])
    assert [b["top1_agreement"] for b in buckets] == [1.0, 0.0]


def test_greedy_agreement_counts_the_identical_generations():
    """Two of three generations token for token the same: 2/3 (not the 1/3 that differ), Wilson of (2, 3)."""
    from qcheck.eval.runners.base import Generation

    m = CandidateMetrics(n_boot=50)
    item = _item("g", "generate", "gen", prompt="p", expected="a")
    for cand in ([1, 2], [1, 2], [1, 3]):
        m.add_generation(item, Generation([1, 2]), Generation(cand), "a", "a")
    metrics, intervals = m.summary()
    assert (metrics["greedy_agreement"], metrics["generate_items"]) == (pytest.approx(2 / 3), 3)
    assert intervals["greedy_agreement"] == stats.wilson(2, 3).to_json()


def test_pearson_and_exp_edges():
    from qcheck.eval.metrics import _exp_or_nan, _pearson, _safe_exp

    assert _pearson(np.array([1.0]), np.array([2.0])) is None
    assert _pearson(np.array([1.0, 2.0]), np.array([2.0, 4.0])) == pytest.approx(1.0)
    assert _pearson(np.array([1.0, 2.0, 3.0]), np.array([3.0, 1.0, 2.0])) == pytest.approx(-0.5)
    assert _pearson(np.array([2.0, 2.0]), np.array([2.0, 2.0])) == 1.0  # both constant and equal
    assert _pearson(np.array([2.0, 2.0]), np.array([3.0, 3.0])) is None  # both constant, not equal
    assert _pearson(np.array([2.0, 2.0]), np.array([1.0, 3.0])) is None  # one constant
    assert _pearson(np.array([1.0, 3.0]), np.array([2.0, 2.0])) is None
    assert _safe_exp(0.0) == 1.0 and _safe_exp(800.0) == math.exp(700.0)
    assert _safe_exp(math.inf) is None and _safe_exp(math.nan) is None
    assert math.isnan(_exp_or_nan(math.nan)) and _exp_or_nan(1.0) == math.e


def test_minus_infinite_candidate_log_probs_are_floored_at_minus_103():
    from qcheck.eval.metrics import LOG_FLOOR, bucketed_kl, full_kl

    assert LOG_FLOOR == -103.0  # float32 exp underflows near -103.9
    ref = np.log(np.array([[0.5, 0.25, 0.25], [0.5, 0.5, 1e-300]]))
    with np.errstate(divide="ignore"):
        cand = np.log(np.array([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0]]))  # -inf where the candidate gives no mass
    with np.errstate(invalid="ignore"):  # inf x 0 in the first pass: those rows are computed again, floored
        kld = full_kl(ref.astype(np.float32), cand.astype(np.float32))
    expected = (0.5 * 0 + 0.25 * (math.log(0.25) - math.log(0.5)) + 0.25 * (math.log(0.25) + 103.0))
    assert kld[0] == pytest.approx(expected, rel=1e-5)
    assert np.isfinite(kld).all()
    with np.errstate(invalid="ignore"):
        rows = compare_rows(rows_from(ref.astype(np.float32), np.array([2, 0])),
                            TokenScores(np.array([-np.inf, math.log(0.5)], dtype=np.float32),
                                        full=cand.astype(np.float32)), np.array([2, 0]), "t")
    assert rows.cand_logp.tolist() == [-103.0, pytest.approx(math.log(0.5))]
    kl, rest = bucketed_kl(np.log([[0.5, 0.5]]), np.array([[-np.inf, math.log(0.5)]]), np.ones((1, 2), bool))
    assert kl[0] == pytest.approx(0.5 * (math.log(0.5) + 103.0)) and rest[0] == 0.0


def test_bucketed_kl_when_the_set_holds_all_the_mass():
    """No reference mass outside the set: the rest bucket adds nothing (0 log 0 = 0, not NaN)."""
    from qcheck.eval.metrics import bucketed_kl

    lp = np.log(np.array([[0.5, 0.25, 0.25]]))
    lq = np.log(np.array([[0.25, 0.25, 0.25]]))
    kl, rest = bucketed_kl(lp, lq, np.ones((1, 3), bool))
    assert rest[0] == 0.0
    assert kl[0] == pytest.approx(0.5 * math.log(2))  # the exact KL of the three; the candidate's 0.25 rest is moot
    part, rest = bucketed_kl(lp[:, :2], lq[:, :2], np.ones((1, 2), bool))
    assert rest[0] == pytest.approx(0.25)
    assert part[0] == pytest.approx(0.5 * math.log(2) + 0.25 * math.log(0.25 / 0.5))


def test_top1_is_unknown_where_either_side_gives_no_token():
    ref = RefRows(np.array([-1.0, -1.0, -1.0], dtype=np.float32), np.array([3, -1, 0]),
                  full=np.log(np.full((3, 4), 0.25, dtype=np.float32)))
    cand = TokenScores(np.array([-1.0, -1.0, -1.0], dtype=np.float32), full=ref.full, greedy_ids=np.array([3, 1, -1]))
    rows = compare_rows(ref, cand, np.array([0, 0, 0]), "t")
    assert rows.top1_known.tolist() == [True, False, False] and rows.top1.tolist()[0] is True
    known = TokenScores(np.array([-1.0] * 3, dtype=np.float32), full=ref.full, greedy_ids=np.array([0, 0, 0]))
    assert compare_rows(RefRows(ref.target_logprobs, np.array([0, 0, 0]), full=ref.full), known,
                        np.array([0, 0, 0]), "t").top1_known is None


def test_candidate_top_k_ids_must_lie_in_the_reference_vocabulary():
    ref = np.log(np.full((2, 4), 0.25, dtype=np.float32))
    y = np.array([0, 1])
    for ids, ok in (([[3, 2], [0, 1]], True), ([[4, 2], [0, 1]], False), ([[0, 1], [-1, 2]], False)):
        scores = TokenScores(ref[np.arange(2), y], topk_ids=np.array(ids), topk_logprobs=np.full((2, 2), -1.4))
        if ok:
            rows = compare_rows(rows_from(ref, y), scores, y, "t")
            assert not rows.exact and rows.rest_mass is not None
            # row 2 holds token 0: S = {0, 1}, the target 1 already in it
            q = math.exp(-1.4)
            assert rows.kld[1] == pytest.approx(_bucketed_by_hand({0: 0.25, 1: 0.25}, {0: q, 1: q}), rel=1e-5)
        else:
            with pytest.raises(InputError, match="token id outside the reference vocabulary"):
                compare_rows(rows_from(ref, y), scores, y, "t")
    # a one-token vocabulary: id 0 is its last id, inside it; id 1 is outside
    one = np.zeros((1, 1), dtype=np.float32)
    rows = compare_rows(rows_from(one, np.array([0])), TokenScores(np.zeros(1, dtype=np.float32),
                        topk_ids=np.array([[0]]), topk_logprobs=np.zeros((1, 1))), np.array([0]), "t")
    assert rows.kld[0] == pytest.approx(0.0) and rows.rest_mass[0] == pytest.approx(0.0)
    with pytest.raises(InputError, match="token id outside the reference vocabulary"):
        compare_rows(rows_from(one, np.array([0])), TokenScores(np.zeros(1, dtype=np.float32),
                     topk_ids=np.array([[1]]), topk_logprobs=np.zeros((1, 1))), np.array([0]), "t")


def _bucketed_by_hand(p: dict[int, float], q: dict[int, float]) -> float:
    """KL over the buckets {i in S} + rest, written out: S = the keys both sides give."""
    p_rest, q_rest = 1 - sum(p.values()), max(1 - sum(q.values()), 1e-10)
    return sum(p[i] * math.log(p[i] / q[i]) for i in p) + (p_rest * math.log(p_rest / q_rest) if p_rest > 0 else 0)


def test_reference_top_k_with_padding_and_both_top_k_match_the_buckets_by_hand():
    full_q = np.log(np.array([[0.4, 0.3, 0.2, 0.1]], dtype=np.float32))
    # reference top-3 of a 4-token vocabulary, one pad column (-1) as a narrower endpoint row gives
    ref = RefRows(np.array([math.log(0.5)], dtype=np.float32), np.array([0]),
                  topk_ids=np.array([[0, 1, -1]]), topk_logprobs=np.log(np.array([[0.5, 0.3, 1.0]], dtype=np.float32)))
    y = np.array([2])
    rows = compare_rows(ref, TokenScores(full_q[:, 2], full=full_q), y, "t")
    # S = {0, 1} + the target 2; the reference's target log-prob is its own (here 0.5, as given)
    assert not rows.exact
    p = {0: 0.5, 1: 0.3}
    q = {0: 0.4, 1: 0.3}
    p_t, q_t = 0.5, 0.2
    p_rest = max(0.0, 1 - 0.5 - 0.3 - p_t)
    expected = sum(p[i] * math.log(p[i] / q[i]) for i in p) + p_t * math.log(p_t / q_t)
    expected += p_rest * math.log(p_rest / max(1 - 0.4 - 0.3 - 0.2, 1e-10)) if p_rest > 0 else 0
    assert rows.kld[0] == pytest.approx(expected, rel=1e-5)
    # both top-k: S = the ids both return (0, 1 and 3 here; 4 only on the reference side, 1 twice) + the target
    cand = TokenScores(np.array([math.log(0.1)], dtype=np.float32), topk_ids=np.array([[1, 0, 3, 3]]),
                       topk_logprobs=np.log(np.array([[0.3, 0.2, 0.1, 0.1]], dtype=np.float32)))
    ref2 = RefRows(np.array([math.log(0.05)], dtype=np.float32), np.array([0]),
                   topk_ids=np.array([[0, 4, 1, 3, 1]]),
                   topk_logprobs=np.log(np.array([[0.4, 0.2, 0.2, 0.1, 0.2]], dtype=np.float32)))
    both = compare_rows(ref2, cand, np.array([2]), "t")
    assert not both.exact
    by_hand = _bucketed_by_hand({0: 0.4, 1: 0.2, 3: 0.1, 2: 0.05}, {0: 0.2, 1: 0.3, 3: 0.1, 2: 0.1})
    assert both.kld[0] == pytest.approx(by_hand, rel=1e-5)
    assert both.rest_mass[0] == pytest.approx(1 - 0.4 - 0.2 - 0.1 - 0.05)
    # the target among the shared ids is counted once, with the reference's own top-k value
    ref3 = RefRows(np.array([math.log(0.2)], dtype=np.float32), np.array([0]), topk_ids=np.array([[0, 1]]),
                   topk_logprobs=np.log(np.array([[0.4, 0.2]], dtype=np.float32)))
    cand3 = TokenScores(np.array([math.log(0.3)], dtype=np.float32), topk_ids=np.array([[1, 0]]),
                        topk_logprobs=np.log(np.array([[0.3, 0.2]], dtype=np.float32)))
    once = compare_rows(ref3, cand3, np.array([1]), "t")
    assert once.kld[0] == pytest.approx(_bucketed_by_hand({0: 0.4, 1: 0.2}, {0: 0.2, 1: 0.3}), rel=1e-5)
