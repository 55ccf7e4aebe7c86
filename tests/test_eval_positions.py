"""Loss by position: KLD, top-1 and PPL ratio per position bucket (0-512, 512-2k, 2k-8k, 8k+), with intervals, and
the bundled long-context items that need them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from qcheck.eval.metrics import POSITION_BUCKETS, CandidateMetrics, RowComparison
from qcheck.eval.tasks import load_tasks


def _rows(kld: np.ndarray, top1: np.ndarray) -> RowComparison:
    n = kld.size
    return RowComparison(kld=kld, top1=top1, ref_logp=np.full(n, -2.0), cand_logp=np.full(n, -2.0) - kld,
                         exact=True)


def test_buckets_split_tokens_by_context_position():
    acc = CandidateMetrics(n_boot=200)
    rng = np.random.default_rng(0)
    for doc in range(6):  # every document spans all four buckets; the loss grows with position
        pos = np.arange(0, 10_000, 7)
        kld = 1e-3 * (1 + pos / 1000) * rng.uniform(0.5, 1.5, pos.size)
        acc.add_rows(f"d{doc}", _rows(kld, pos < 4000), pos)
    acc.add_rows("unknown", _rows(np.full(5, 9.0), np.ones(5, bool)))  # no positions: in no bucket
    buckets = acc.by_position()
    assert [(b["from"], b["to"]) for b in buckets] == list(POSITION_BUCKETS)
    assert sum(b["tokens"] for b in buckets) == 6 * np.arange(0, 10_000, 7).size
    means = [b["kld_mean"] for b in buckets]
    assert means == sorted(means) and means[-1] > 5 * means[0]
    assert buckets[0]["top1_agreement"] == 1.0 and buckets[-1]["top1_agreement"] == 0.0
    assert buckets[-1]["max_position"] == 9996 and buckets[-1]["documents"] == 6
    for b in buckets:
        iv = b["kld_mean_interval"]
        assert iv["low"] <= b["kld_mean"] <= iv["high"] and iv["method"] == "cluster-bootstrap"
        assert b["ppl_ratio_interval"]["low"] <= b["ppl_ratio"] <= b["ppl_ratio_interval"]["high"]
        assert b["top1_agreement_interval"]["method"] == "wilson"


def test_empty_buckets_are_left_out():
    acc = CandidateMetrics(n_boot=100)
    acc.add_rows("d", _rows(np.full(10, 0.01), np.ones(10, bool)), np.arange(10))
    assert [(b["from"], b["tokens"]) for b in acc.by_position()] == [(0, 10)]


def test_long_context_set_is_opt_in_and_long():
    default = load_tasks([])
    assert not any(i.task.startswith("long_context") for i in default.items)
    long = load_tasks(["long_context"])
    kinds = {i.kind for i in long.items}
    assert kinds == {"text", "choice"} and len(long.items) >= 6
    assert min(len(i.text or i.context or "") for i in long.items) > 30_000  # over 8k tokens for Llama-3-like BPE
    for item in long.items:
        if item.kind == "choice":
            fact = item.choices[item.answer]
            assert fact in (item.context or "") and (item.context or "").endswith("Answer:")


@pytest.mark.slow
def test_a_long_item_reports_positions_past_512(tmp_path):
    """A text item longer than one 512-token bucket, scored whole (--max-length 1400): the buckets add up to every
    scored token, and the simulated Q4_0 candidate's text report shows them."""
    from qcheck.eval.run import EvalConfig, run_eval
    from qcheck.report.text_eval import render
    from support.eval_helpers import tiny_gguf, tiny_reference

    text = load_tasks(["long_context"]).items[0].text or ""
    tasks = tmp_path / "long.jsonl"
    tasks.write_text(json.dumps({"id": "long", "kind": "text", "text": text[:6000]}) + "\n")
    result = run_eval(EvalConfig(reference=str(tiny_reference()), tasks=[str(tasks)], use_cache=False,
                                 bootstrap=100, max_length=1400, candidates=[f"q4={tiny_gguf('Q4_0')}"]))
    c = result.candidates[0]
    buckets = c.by_position
    assert [b["from"] for b in buckets] == [0, 512]
    assert sum(b["tokens"] for b in buckets) == c.metrics["tokens_scored"]
    total = sum(b["kld_mean"] * b["tokens"] for b in buckets) / c.metrics["tokens_scored"]
    assert total == pytest.approx(c.metrics["kld_mean"], rel=1e-9)
    assert buckets[1]["max_position"] < 1400
    assert "by position" in render(result) and result.to_json()["candidates"][0]["by_position"][1]["to"] == 2048
