"""Speed estimates: no ceiling above the engine's per-step floor, the compute format the engine's kernels really use
per weight type, and each engine's own calibration (or an honest "none")."""

from __future__ import annotations

from pathlib import Path

import pytest
from memory_gguf import Arch, write_model

from qcheck.matrix import load_matrix
from qcheck.matrix.gpu_perf import parse_speed_engines
from qcheck.matrix.schema import MatrixDataError
from qcheck.pipeline import run
from qcheck.request import CheckRequest, Deploy

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _speed(target: str, engine: str, gpu: str, context: int = 2048, batch: int = 1):  # type: ignore[no-untyped-def]
    result = run(CheckRequest(target, (engine,), (gpu,), Deploy(context=context, batch=batch), memory=True))
    (verdict,) = result.verdicts
    assert verdict.memory is not None and verdict.memory.speed is not None
    return verdict.memory.speed


def test_the_tiny_example_is_held_to_llama_cpps_per_step_floor() -> None:
    """The bundled 224 KiB Q4_0 GGUF on an RTX 4090: bandwidth alone would allow 805,215 tok/s; no llama.cpp step is
    faster than 0.3 ms + 10 us per layer, so the estimate says about 3,000."""
    speed = _speed(str(EXAMPLES / "tiny-llama-Q4_0.gguf"), "llama.cpp", "rtx-4090")
    floor = load_matrix().gpus.speed_engines["llama.cpp"]
    assert speed.floor_ms == pytest.approx(floor.step_ms + 2 * floor.decode_layer_ms)  # 2 layers
    assert speed.decode_bound == "floor" and speed.bandwidth_tokens_per_s > 500_000
    assert speed.decode_tokens_per_s == pytest.approx(1000 / speed.floor_ms, abs=0.1)
    assert speed.decode_tokens_per_s < 5_000
    assert "per-step floor" in speed.summary and "bandwidth alone: 805,215" in speed.summary
    # a batch of 4 shares the step: 4 x the single-stream floor bound
    four = _speed(str(EXAMPLES / "tiny-llama-Q4_0.gguf"), "llama.cpp", "rtx-4090", batch=4)
    assert four.decode_tokens_per_s == pytest.approx(4 * 1000 / speed.floor_ms, abs=0.5)
    # prefill: 512 tokens per prefill step at least 0.3 ms + 13 us per layer
    assert speed.prefill_tokens_per_s == round(512 * 1000 / speed.prefill_floor_ms)


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tensorrt-llm", "transformers"])
def test_no_estimate_is_above_its_engines_floor(engine: str) -> None:
    speed = _speed(str(EXAMPLES / "tiny-llama-bf16"), engine, "h100")
    assert speed.floor_ms is not None and speed.decode_tokens_per_s <= 1000 / speed.floor_ms + 0.1
    assert speed.prefill_tokens_per_s is None or speed.prefill_floor_ms is not None


def test_calibration_is_each_engines_own() -> None:
    vllm = _speed(str(EXAMPLES / "tiny-llama-bf16"), "vllm", "h100")
    assert "vLLM" in vllm.calibration and "llama.cpp" not in vllm.calibration and vllm.calibration in vllm.summary
    sglang = _speed(str(EXAMPLES / "tiny-llama-bf16"), "sglang", "h100")
    assert sglang.calibration.startswith("no published SGLang speed measurement")
    cpp = _speed(str(EXAMPLES / "tiny-llama-Q4_0.gguf"), "llama.cpp", "rtx-4090")
    assert "56-80%" in cpp.calibration


def test_gguf_compute_format_follows_the_weight_type(tmp_path: Path) -> None:
    """llama.cpp multiplies F16/BF16 GGUF weights through cuBLAS in 16-bit (ggml_cuda_mul_mat), quantised ones with
    int8 MMA (MMQ) on GPUs that have int8 tensor cores, and dequantised to FP16 on those that do not (Volta)."""
    arch = Arch("llama", n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=512, n_vocab=1000)
    f16 = write_model(tmp_path / "f16.gguf", arch, "F16")
    q8 = write_model(tmp_path / "q8.gguf", arch, "Q8_0")
    assert _speed(str(f16), "llama.cpp", "rtx-4090").compute_format == "fp16"
    assert "cuBLAS" in _speed(str(f16), "llama.cpp", "rtx-4090").compute_why
    assert _speed(str(q8), "llama.cpp", "rtx-4090").compute_format == "int8"
    volta = _speed(str(q8), "llama.cpp", "v100")
    assert volta.compute_format == "fp16" and "no int8 tensor cores" in volta.compute_why


def test_an_8b_model_is_bounded_by_bandwidth_not_the_floor() -> None:
    """Llama-3.1-8B-sized weights on an RTX 4090: about 200 tok/s from bandwidth, far below the floor's 3,000."""
    from qcheck.memory import apply_memory
    from qcheck.model import Inspection, Quantization, Verdict
    from support.memory_helpers import with_shape

    cfg = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "vocab_size": 128256, "intermediate_size": 14336}
    ins = with_shape(Inspection(path="m.gguf", container="gguf", size_bytes=4_920_000_000, parameters=8_030_000_000,
                                num_layers=32, quantization=Quantization(method="gguf", tensor_types={"Q4_K": 193})),
                     config=cfg)
    v = Verdict(engine="llama.cpp", engine_version="b11312", gpu="rtx-4090", arch="ada", compute_capability="8.9",
                status="native")
    apply_memory([v], ins, Deploy(context=4096), load_matrix())
    speed = v.memory.speed
    assert speed.decode_bound == "bandwidth" and 150 < speed.decode_tokens_per_s < 260
    assert speed.decode_tokens_per_s == speed.bandwidth_tokens_per_s


@pytest.mark.parametrize(("entry", "check"), [
    ({"formula": "nope", "step_ms": 1, "decode_layer_ms": 0, "prefill_layer_ms": 0, "prefill_tokens": 1,
      "floor_basis": "estimate", "floor_source": "x", "calibration": "x"}, "bad-value"),
    ({"formula": "vllm", "step_ms": float("inf"), "decode_layer_ms": 0, "prefill_layer_ms": 0, "prefill_tokens": 1,
      "floor_basis": "estimate", "floor_source": "x", "calibration": "x"}, "bad-type"),
    ({"formula": "vllm", "step_ms": 0, "decode_layer_ms": 0, "prefill_layer_ms": 0, "prefill_tokens": 1,
      "floor_basis": "estimate", "floor_source": "x", "calibration": "x"}, "bad-value"),
    ({"formula": "vllm", "step_ms": 1, "decode_layer_ms": 0, "prefill_layer_ms": 0, "prefill_tokens": 1,
      "floor_basis": "estimate", "floor_source": "x", "calibration": "x", "calibration_sources": ["a blog"]},
     "missing-source"),
    ({"formula": "vllm", "step_ms": 1}, "missing-key"),
])
def test_speed_engine_entries_are_validated(entry: dict, check: str) -> None:
    from qcheck.matrix.memory_params import FORMULAS

    with pytest.raises(MatrixDataError, match=rf"\[{check}\]"):
        parse_speed_engines({"speed_engine": [entry]}, "gpus.toml", FORMULAS)
