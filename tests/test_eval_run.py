"""End to end: a real tiny Llama reference, real GGUF candidates (Q8_0, Q4_0, TQ2_0, F32) dequantised into it,
the on-disk reference cache, the gate, the CLI, the JSON contract and the HTML report."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from qcheck.errors import InputError
from qcheck.eval.gate import Thresholds
from qcheck.eval.run import CandidateSpec, EvalConfig, run_eval
from qcheck.eval.runners.base import (
    Capabilities,
    GenerateRequest,
    Generation,
    ScoreRequest,
    TokenScores,
    VocabInfo,
)
from support.contract import validate
from support.eval_helpers import task_file, tiny_gguf, tiny_reference

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ref() -> Path:
    return tiny_reference()


@pytest.fixture(scope="module")
def ggufs(ref) -> dict[str, Path]:
    return {t: tiny_gguf(t) for t in ("F32", "Q8_0", "Q4_0", "TQ2_0")}


@pytest.fixture(scope="module")
def first_run(ref, ggufs, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    config = EvalConfig(reference=str(ref), tasks=[str(task_file())], cache_dir=str(cache), bootstrap=200,
                        candidates=[f"{t.lower()}={p}" for t, p in ggufs.items()])
    return config, run_eval(config)


def by_name(result):
    return {c.name: c for c in result.candidates}


def test_identical_candidate_has_zero_loss(first_run):
    _, result = first_run
    same = by_name(result)["f32"]
    m = same.metrics
    assert same.backend == "simulated:gguf"
    assert abs(m["kld_mean"]) < 1e-5 and m["kld_max"] < 1e-3
    assert m["top1_agreement"] == 1.0
    assert m["ppl_ratio"] == pytest.approx(1.0, abs=1e-4)
    assert m["nll_correlation"] == pytest.approx(1.0, abs=1e-6)
    assert m["greedy_agreement"] == 1.0 and m["flips"] == 0.0 and m["answer_agreement"] == 1.0
    assert m["accuracy"] == m["accuracy_reference"]
    assert same.quantization["gguf_file_type"] == "F32"


def test_kld_orders_quantisation_levels(first_run):
    _, result = first_run
    c = by_name(result)
    kld = {n: c[n].metrics["kld_mean"] for n in ("q8_0", "q4_0", "tq2_0")}
    assert 0 < kld["q8_0"] < kld["q4_0"] < kld["tq2_0"]
    top1 = {n: c[n].metrics["top1_agreement"] for n in ("q8_0", "q4_0", "tq2_0")}
    assert top1["q8_0"] > top1["q4_0"] >= top1["tq2_0"]
    assert c["q8_0"].metrics["kld_p99"] < c["q4_0"].metrics["kld_p99"]
    for name in ("q8_0", "q4_0"):  # the bootstrap interval brackets the mean
        iv = c[name].intervals["kld_mean"]
        assert iv["low"] <= c[name].metrics["kld_mean"] <= iv["high"]
    # tokens: every text token after BOS + every gold-choice continuation token, for every candidate
    assert len({x.metrics["tokens_scored"] for x in result.candidates}) == 1


def test_reference_computed_once_and_read_per_candidate(first_run):
    _, result = first_run
    cache = result.cache
    assert cache.hit is False
    # 3 text + 3 choices x 3 + 2 generations = 14 requests written once, not once per candidate
    assert cache.requests_written == 14
    assert result.reference["forward_calls"] > 0
    assert cache.requests_read == 4 * (3 + 9)
    assert cache.kind == "full-u16" and Path(cache.path).is_dir()


def test_second_run_hits_cache_and_gate_splits_between_levels(first_run, ggufs):
    config, result = first_run
    c = by_name(result)
    limit = math.sqrt(c["q8_0"].metrics["kld_mean"] * c["q4_0"].metrics["kld_mean"])  # between the two
    again = run_eval(EvalConfig(reference=config.reference, tasks=config.tasks, cache_dir=config.cache_dir,
                                bootstrap=200, thresholds=Thresholds(max_kld=limit),
                                candidates=[CandidateSpec("q8", str(ggufs["Q8_0"])),
                                            CandidateSpec("q4", str(ggufs["Q4_0"]))]))
    assert again.cache.hit is True and again.cache.requests_written == 0
    assert "forward_calls" not in again.reference  # the reference model was never loaded
    got = by_name(again)
    # same numbers as the first run: the reference came from the same cache entry
    assert got["q8"].metrics["kld_mean"] == pytest.approx(c["q8_0"].metrics["kld_mean"], rel=1e-9)
    assert got["q8"].gate.passed and not got["q4"].gate.passed
    assert got["q4"].gate.failures[0]["threshold"] == "max_kld"
    assert again.exit_code == 1
    data = again.to_json()
    assert data["schema"] == "qcheck.eval/1" and data["exit_code"] == 1
    assert data["cache"]["hit"] is True and data["cache"]["kind"] == "full-u16"
    cand = data["candidates"][0]
    for key in ("name", "backend", "metrics", "intervals", "gate"):
        assert key in cand
    for key in ("kld_mean", "kld_p99", "top1_agreement", "ppl_ratio", "delta_p_rms", "accuracy_reference",
                "accuracy", "flips"):
        assert key in cand["metrics"]
    assert set(cand["gate"]) >= {"passed", "failures"}
    json.dumps(data, allow_nan=False)  # strict JSON: no NaN/inf anywhere


class TopKRunner:
    """A full runner seen through a top-k-only API (what an OpenAI-compatible endpoint returns)."""

    def __init__(self, inner, k: int):
        self.inner, self.k = inner, k
        self.name, self.backend = inner.name, f"topk{k}"
        self.capabilities = Capabilities(has_full_logprobs=False, has_prompt_logprobs=True, can_generate=True, top_k=k)

    def vocab(self) -> VocabInfo:
        return self.inner.vocab()

    def score(self, requests: Sequence[ScoreRequest]) -> Iterator[TokenScores]:
        for s in self.inner.score(requests):
            ids = np.argsort(-s.full, axis=1)[:, : self.k]
            yield TokenScores(target_logprobs=s.target_logprobs, topk_ids=ids,
                              topk_logprobs=np.take_along_axis(s.full, ids, axis=1))

    def generate(self, requests: Sequence[GenerateRequest]) -> Iterator[Generation]:
        return self.inner.generate(requests)

    def close(self) -> None:
        self.inner.close()


def _simulated_runner(ref, path, name="q4"):
    from transformers import AutoConfig

    from qcheck.eval.runners.simulated import load_simulated

    runner, _, _ = load_simulated(name, str(path), AutoConfig.from_pretrained(ref), VocabInfo(0, None, True),
                               dtype="float32", device="cpu")
    return runner


def test_topk_candidate_and_topk_cache_give_lower_bounds(first_run, ref, ggufs, tmp_path):
    config, result = first_run
    full = by_name(result)["q4_0"].metrics
    # candidate through a top-20 API, against the full cached reference
    r = run_eval(EvalConfig(reference=config.reference, tasks=config.tasks, cache_dir=config.cache_dir, bootstrap=200,
                            candidates=[CandidateSpec("q4-top20", runner=TopKRunner(_simulated_runner(ref, ggufs["Q4_0"]), 20))]))
    m = r.candidates[0].metrics
    assert r.cache.hit is True
    assert m["kld_kind"] == "lower-bound" and r.candidates[0].backend == "topk20"
    assert 0 < m["kld_mean"] <= full["kld_mean"] + 1e-9
    assert m["reference_rest_mass_mean"] >= 0
    # exact in every encoding: target log-probs and argmax are stored exactly
    assert m["ppl_ratio"] == pytest.approx(full["ppl_ratio"], rel=1e-6)
    assert m["top1_agreement"] == full["top1_agreement"]
    assert any("lower bound" in n for n in r.candidates[0].notes)
    # reference cached as top-16 + tail mass
    t = run_eval(EvalConfig(reference=config.reference, tasks=config.tasks, cache_dir=str(tmp_path), cache_topk=16,
                            bootstrap=200, candidates=[f"q4={ggufs['Q4_0']}"]))
    assert t.cache.kind == "topk" and t.cache.topk == 16 and t.cache.hit is False
    tm = t.candidates[0].metrics
    assert tm["kld_kind"] == "lower-bound" and 0 < tm["kld_mean"] <= full["kld_mean"] + 1e-9
    assert tm["ppl_ratio"] == pytest.approx(full["ppl_ratio"], rel=1e-6)
    assert t.cache.bytes < result.cache.bytes  # 8·16+8 bytes per row instead of 2·V+16


class NoBosRunner(TopKRunner):
    def vocab(self) -> VocabInfo:
        v = self.inner.vocab()
        return VocabInfo(v.vocab_size, v.bos_token_id, False, v.eos_token_ids)


def test_bos_and_vocabulary_mismatch_stop_the_run(first_run, ref, ggufs, tmp_path):
    config, _ = first_run
    runner = NoBosRunner(_simulated_runner(ref, ggufs["Q8_0"]), 5)
    with pytest.raises(InputError, match="BOS handling differs"):
        run_eval(EvalConfig(reference=config.reference, tasks=config.tasks, cache_dir=config.cache_dir,
                            candidates=[CandidateSpec("nobos", runner=runner)]))
    from support.gguf_export import export_gguf
    from support.tiny_llama import make_tiny_llama

    other = make_tiny_llama(tmp_path / "other", hidden_size=256, intermediate=512, layers=2, heads=4, kv_heads=2,
                            vocab_size=400)
    wrong = export_gguf(other, tmp_path / "other.gguf", "Q8_0")
    with pytest.raises(InputError) as err:
        run_eval(EvalConfig(reference=config.reference, tasks=config.tasks, cache_dir=config.cache_dir,
                            candidates=[f"other={wrong}"]))
    assert "vocab" in str(err.value).lower() or "embed_tokens" in str(err.value)


# ------------------------------------------------------------------------------------------- CLI
def run_cli(args, capsys):
    from qcheck.cli import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_cli_json_text_html_and_exit_codes(first_run, ggufs, tmp_path, capsys):
    config, result = first_run
    limit = math.sqrt(by_name(result)["q8_0"].metrics["kld_mean"] * by_name(result)["q4_0"].metrics["kld_mean"])
    base = ["eval", "--reference", config.reference, "--tasks", config.tasks[0], "--cache-dir", config.cache_dir,
            "--bootstrap", "200"]
    html_path = tmp_path / "report.html"
    code, out, err = run_cli([*base, "-c", f"q8={ggufs['Q8_0']}", "--max-kld", str(limit), "--min-top1", "50%",
                              "--json", "--report", str(html_path)], capsys)
    assert code == 0, err
    data = json.loads(out)
    validate(data, "eval")
    assert data["exit_code"] == 0 and data["candidates"][0]["gate"]["passed"] is True
    assert data["thresholds"]["min_top1"] == 0.5 and data["cache"]["hit"] is True
    assert err == ""  # no progress bars or transformers chatter with --json
    page = html_path.read_text(encoding="utf-8")
    assert page.count("<svg") == 2 and "per-token KL divergence" in page and "Accuracy per task" in page
    assert page.count('class="bar"') >= 3
    for needle in ("http://", "https://", "<script", "src=", "@import", "url("):
        assert needle not in page
    import re
    import xml.etree.ElementTree as ET

    for svg in re.findall(r"<svg.*?</svg>", page, flags=re.S):  # each plot is well-formed markup
        root = ET.fromstring(svg)
        assert root.tag == "svg" and root.findall("rect")

    code, out, _ = run_cli([*base, "-c", f"q4={ggufs['Q4_0']}", "--max-kld", str(limit)], capsys)
    assert code == 1
    assert "FAIL" in out and "kld_mean" in out and "max-kld" in out
    assert "reused from cache" in out and "q4" in out

    code, out, _ = run_cli([*base, "-c", f"q8={ggufs['Q8_0']}", "--tier", "acceptable"], capsys)
    assert "tier acceptable" in out


def test_cli_input_errors_exit_2_with_one_line(first_run, ggufs, tmp_path, capsys):
    config, _ = first_run
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "kind": "choice", "context": "x", "choices": ["a", "b"], "answer": 5}\n')
    code, _, err = run_cli(["eval", "-r", config.reference, "-c", str(ggufs["Q8_0"]), "-t", str(bad)], capsys)
    assert code == 2
    assert err.strip() == f"qcheck: error: {bad}:1: answer: index 5 is out of range for 2 choices"
    code, _, err = run_cli(["eval", "-r", config.reference, "-c", str(tmp_path / "missing.gguf")], capsys)
    assert code == 2 and "no such file" in err and err.count("\n") == 1
    code, _, err = run_cli(["eval", "-r", config.reference, "-c", str(ggufs["Q8_0"]), "--max-kld", "-1"], capsys)
    assert code == 2 and "max-kld" in err


def test_eval_modules_import_without_torch_and_missing_torch_is_exit_2(first_run, ggufs, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    probe = ("import sys; import qcheck.cli.eval_cmd, qcheck.eval.gate, qcheck.eval.tasks, qcheck.report.text_eval, "
             "qcheck.eval.html; print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip() == "False False", out.stderr
    config, _ = first_run
    blocker = ("import sys; sys.modules['torch'] = None; from qcheck.cli import main; "
               f"main(['eval', '-r', {config.reference!r}, '-c', {str(ggufs['Q8_0'])!r}, '-t', {config.tasks[0]!r}, "
               f"'--cache-dir', {str(tmp_path)!r}])")
    out = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2
    assert "install qcheck's 'eval' extra: pip install '" in out.stderr and "Traceback" not in out.stderr
    assert "qcheck[eval]" not in out.stderr  # 'qcheck' on PyPI is an unrelated project


def test_activation_quant_is_reported_and_adds_loss(first_run, ref, tmp_path):
    from safetensors.numpy import load_file

    from support.packing import quantize_model, write_checkpoint

    config, _ = first_run
    qc = quantize_model(load_file(ref / "model.safetensors"), "int8-w8a8-ct", dtype="F32")
    w8a8 = write_checkpoint(tmp_path / "w8a8", json.loads((ref / "config.json").read_text()), qc)
    runs = {}
    for aq in (False, True):
        r = run_eval(EvalConfig(reference=config.reference, tasks=config.tasks, cache_dir=config.cache_dir,
                                bootstrap=200, activation_quant=aq, candidates=[f"w8a8={w8a8}"]))
        runs[aq] = r.candidates[0]
    off, on = runs[False], runs[True]
    assert off.backend == on.backend == "simulated:int8"
    assert off.quantization["activation_dtype"] == "int8"
    assert off.activations.startswith("not simulated") and any("--activation-quant" in n for n in off.notes)
    assert on.activations.startswith("fake-quantised: int8 activations")
    assert on.to_json()["activations"] == on.activations
    # quantising activations on top of the weights adds loss
    assert on.metrics["kld_mean"] > off.metrics["kld_mean"] > 0
