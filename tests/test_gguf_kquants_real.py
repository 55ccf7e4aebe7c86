"""Real K-quant blocks end to end: a tiny Llama wide enough for 256-value super-blocks (hidden 256), exported by
llama.cpp's own ``convert_hf_to_gguf.py`` and quantised by llama.cpp's own ``llama_model_quantize`` (through
llama-cpp-python) to Q4_K_M, Q2_K, Q5_K_S and IQ4_XS, which hold Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS tensors.

Three independent views of each file must agree:
- qcheck's reading (its bounded header reader's offsets and sizes, then ``gguf.quants.dequantize`` of the installed
  gguf package) equals llama.cpp's *own* gguf-py (the copy vendored with the llama.cpp that quantised the file: its
  ``GGUFReader`` and its dequantisers), run in a separate process, bit for bit, tensor by tensor;
- the simulated candidate's KLD against the reference is close to llama.cpp's own run of the same file
  (``LlamaCppRunner``, without weight repacking), within the tolerance stated in docs/engines.md: llama.cpp also
  quantises activations to Q8_K blocks for K-quant dot products;
- through ``qcheck eval`` both candidates pass the plausibility self-check and agree the same way.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from support.eval_helpers import ABS, REL
from support.llamacpp_convert import build_tiny_model, convert, llama_cpp_source

torch = pytest.importorskip("torch")
llama_cpp = pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.llamacpp

#: llama.cpp file type -> tensor types it must produce on this model (what the GGUF reader shows)
FILE_TYPES = {
    "Q4_K_M": {"Q4_K", "Q6_K"},
    "Q2_K": {"Q2_K", "Q3_K", "Q6_K"},
    "Q5_K_S": {"Q5_K", "Q6_K"},
    "IQ4_XS": {"IQ4_XS", "Q6_K"},
}

#: llama.cpp's own gguf-py in a fresh process: read every tensor with its GGUFReader, dequantise with its quants
_INDEPENDENT = r"""
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize
arrays = {}
for path in sys.argv[3:]:
    for t in GGUFReader(path).tensors:
        arrays[f"{Path(path).stem}|{t.name}|{t.tensor_type.name}"] = np.asarray(dequantize(t.data, t.tensor_type),
                                                                             dtype=np.float32)
np.savez(sys.argv[2], **arrays)
"""


@pytest.fixture(scope="module")
def kquants(tmp_path_factory):
    """(model folder, {file type: GGUF path}): the F32 export quantised by llama.cpp."""
    root = tmp_path_factory.mktemp("kquants")
    model_dir = build_tiny_model("llama", root / "llama", hidden_size=256, intermediate_size=512, head_dim=64)
    (f32,) = convert(llama_cpp_source(), [(model_dir, "f32")])
    files = {}
    for ftype in FILE_TYPES:
        out = model_dir / f"model-{ftype}.gguf"
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{ftype}")
        params.nthread = 2
        assert llama_cpp.llama_model_quantize(str(f32).encode(), str(out).encode(), ctypes.byref(params)) == 0
        files[ftype] = out
    return model_dir, files


def test_quantised_files_hold_k_quant_tensors(kquants):
    from qcheck.readers import load_checkpoint

    _, files = kquants
    for ftype, path in files.items():
        types = Counter(t.dtype for t in load_checkpoint(str(path)).tensors.values())
        assert FILE_TYPES[ftype] <= set(types), (ftype, types)
        assert types["F32"] == 5  # norms stay float


def test_dequantised_tensors_equal_llama_cpp_gguf_py_bit_for_bit(kquants, tmp_path):
    from qcheck.eval.simulate import _gguf_tensor
    from qcheck.readers import load_checkpoint

    _, files = kquants
    npz = tmp_path / "independent.npz"
    done = subprocess.run([sys.executable, "-c", _INDEPENDENT, str(llama_cpp_source() / "gguf-py"), str(npz),
                           *map(str, files.values())], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = np.load(npz)
    compared = Counter()
    for ftype, path in files.items():
        with open(path, "rb") as fh:
            for info in load_checkpoint(str(path)).tensors.values():
                ours = _gguf_tensor(fh, info, str(path))
                other = theirs[f"{path.stem}|{info.name}|{info.dtype}"]
                assert ours.shape == other.shape, (ftype, info.name)
                assert np.array_equal(ours, other), (ftype, info.name, float(np.abs(ours - other).max()))
                compared[info.dtype] += 1
    assert {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS"} <= set(compared), compared


def _kld(ref: np.ndarray, cand: np.ndarray) -> float:
    return float((np.exp(ref) * (ref - cand)).sum(axis=1).mean())


def test_simulated_k_quants_close_to_llama_cpp(kquants):
    """Per file type: KLD(reference ‖ simulated) and KLD(reference ‖ llama.cpp) on the same tokens agree within the
    documented tolerance, and order the formats the same way (Q2_K loses most, Q5_K_S least)."""
    from transformers import AutoModelForCausalLM

    from qcheck.eval.runners.llamacpp import LlamaCppRunner, log_softmax
    from qcheck.eval.simulate import simulated_state_dict

    model_dir, files = kquants
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = [1, *np.random.default_rng(0).integers(3, 512, 127).tolist()]
    with torch.no_grad():
        ref = reference(torch.tensor([ids])).logits[0].double().log_softmax(-1).numpy()
    sim, cpp = {}, {}
    for ftype, path in files.items():
        state, _ = simulated_state_dict(str(path), str(model_dir))
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        result = model.load_state_dict(state, strict=False)
        assert not result.unexpected_keys and set(result.missing_keys) <= {"lm_head.weight"}
        with torch.no_grad():
            sim[ftype] = _kld(ref, model(torch.tensor([ids])).logits[0].double().log_softmax(-1).numpy())
        runner = LlamaCppRunner(str(path), ftype, n_ctx=256)
        try:
            runner.llm.reset()
            runner.llm.eval(ids)
            cpp[ftype] = _kld(ref, log_softmax(np.asarray(runner.llm.scores[: len(ids)], dtype=np.float64)))
        finally:
            runner.close()
    for ftype in files:
        assert sim[ftype] > 0 and abs(cpp[ftype] - sim[ftype]) <= REL * sim[ftype] + ABS, (ftype, sim, cpp)
    assert max(sim, key=sim.get) == max(cpp, key=cpp.get) == "Q2_K", (sim, cpp)
    assert min(sim, key=sim.get) == min(cpp, key=cpp.get) == "Q5_K_S", (sim, cpp)


def test_q4_k_m_through_qcheck_eval(kquants, tmp_path, capsys, monkeypatch):
    """The CLI measures the Q4_K_M file both ways; both pass the plausibility self-check and agree."""
    from qcheck.cli import main

    monkeypatch.setenv("QCHECK_CACHE_DIR", str(tmp_path / "cache"))
    model_dir, files = kquants
    with pytest.raises(SystemExit) as exc:
        main(["eval", "-r", str(model_dir), "-c", f"sim={files['Q4_K_M']}", "-c", f"cpp=llamacpp:{files['Q4_K_M']}",
              "-t", "prose", "--max-items", "4", "--bootstrap", "100", "--json"])
    out = capsys.readouterr()
    assert exc.value.code == 0, out.err
    cands = {c["name"]: c for c in json.loads(out.out)["candidates"]}
    sim, cpp = cands["sim"]["metrics"], cands["cpp"]["metrics"]
    assert cands["sim"]["quantization"]["gguf_file_type"] == "Q4_K_M"
    assert "Q4_K" in " ".join(cands["sim"]["notes"]) and "Q6_K" in " ".join(cands["sim"]["notes"])
    assert sim["kld_kind"] == cpp["kld_kind"] == "exact"
    assert abs(cpp["kld_mean"] - sim["kld_mean"]) <= REL * sim["kld_mean"] + ABS, (sim["kld_mean"], cpp["kld_mean"])
    # simulated as llama.cpp computes (the default): Q8_K activation blocks before the K-quant matrices, so the
    # two agree far closer than the weights alone would (measured on the prose set: 0.1222 both)
    assert "q8_K before" in cands["sim"]["simulation"]["activations"]
    assert sim["kld_mean"] == pytest.approx(cpp["kld_mean"], rel=0.02), (sim["kld_mean"], cpp["kld_mean"])
