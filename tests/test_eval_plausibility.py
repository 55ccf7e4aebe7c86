"""The eval refuses measurements that cannot be quantisation loss (qcheck.eval.plausibility)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qcheck.eval.plausibility import implausibility, is_unquantised, uniform_error

REPO = Path(__file__).resolve().parent.parent


def test_thresholds():
    good = {"ppl_ratio": 1.02, "kld_mean": 0.004, "top1_agreement": 0.93, "kld_kind": "exact"}
    assert implausibility(good, 0.6, unquantised=False) == []
    assert implausibility({**good, "ppl_ratio": 8.3e6}, 0.6, False) == ["PPL ratio 8.3e+06 > 10"]
    assert implausibility({**good, "ppl_ratio": None, "ln_ppl_ratio": 800.0}, 0.6, False) == ["PPL ratio overflows"]
    assert "mean KLD 15.9 nats > 5" in implausibility({**good, "kld_mean": 15.9}, 0.6, False)
    low = implausibility({**good, "top1_agreement": 0.001}, 0.42, False)
    assert low == ["top-1 agreement 0.1% where the reference's own top-1 probability averages 42.0%"]
    # a flat reference (tiny random model) makes low agreement plausible
    assert implausibility({**good, "top1_agreement": 0.05}, 0.06, False) == []
    # an unquantised candidate must round-trip; a lower-bound KLD is not judged that way
    assert implausibility({**good, "kld_mean": 0.02}, 0.6, True)[0].startswith("mean KLD 0.02 for unquantised")
    assert implausibility({**good, "kld_mean": 0.02, "kld_kind": "lower-bound"}, 0.6, True) == []


def test_uniform_error_tells_a_format_from_a_loading_error():
    ternary = [("a", 0.82), ("b", 0.81), ("c", 0.80), ("d", 0.79)]
    assert uniform_error(ternary) == 0.81
    assert uniform_error([("emb", 1.41), ("a", 0.0), ("b", 0.0)]) is None  # one shuffled tensor
    assert uniform_error([("norm", 0.9), ("a", 0.01), ("b", 0.012)]) is None  # an outlier
    assert uniform_error([("a", 0.0), ("b", 0.0)]) is None  # identical weights: the loss is elsewhere
    assert uniform_error([]) is None


def test_unquantised_candidates():
    assert is_unquantised({"method": "none"})
    assert is_unquantised({"method": "gguf", "gguf_file_type": "ALL_F32"})
    assert is_unquantised({"method": "gguf", "gguf_file_type": "BF16"})
    assert not is_unquantised({"method": "gguf", "gguf_file_type": "Q8_0"})
    assert not is_unquantised({"method": "fp8"})
    assert not is_unquantised(None)


def test_broken_load_is_refused_with_the_tensors_that_differ(tmp_path):
    """The reference's own weights with the embedding rows shuffled (what a wrong vocabulary mapping does): exit
    2, one line, naming the embedding as the tensor furthest from the reference."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    reference = REPO / "examples" / "tiny-llama-bf16"
    broken = tmp_path / "broken"
    shutil.copytree(reference, broken)
    tensors = load_file(str(broken / "model.safetensors"))
    name = "model.embed_tokens.weight"
    tensors[name] = tensors[name][torch.randperm(tensors[name].shape[0], generator=torch.Generator().manual_seed(0))]
    save_file(tensors, str(broken / "model.safetensors"), metadata={"format": "pt"})
    done = subprocess.run([sys.executable, "-m", "qcheck", "eval", "--reference", str(reference), "--candidate",
                           f"broken={broken}", "--tasks", "prose", "--max-items", "4",
                           "--cache-dir", str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("qcheck: error:")]
    assert len(errors) == 1, done.stderr
    assert "candidate broken: implausible measurement" in errors[0]
    assert "not quantisation loss" in errors[0]
    assert f"tensors furthest from the reference: {name} (relative RMS error" in errors[0], errors[0]
    assert "Traceback" not in done.stderr
