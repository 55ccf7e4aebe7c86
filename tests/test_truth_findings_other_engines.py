"""Issue #35's second audit (MLX, transformers, ExLlamaV2, LM Studio, the architecture generator), each answered as
the released code behaves, on both sides of the releases it was read at.

* MLX: CPU kernels for mxfp4/nvfp4/mxfp8 (mlx/backend/cpu/quantized.cpp at v0.32.1); at v0.29.x the CPU has an
  mxfp4 kernel only and sends nvfp4/mxfp8 to it, and Metal has no nvfp4/mxfp8 matmul until v0.30.3.
* mlx-lm dequantises block FP8 only in the model files that name ``weight_scale_inv``, which differ per release;
  mlx-lm 0.27.1 (MLX 0.29.0) refuses any quantization_config but bitnet and mxfp4.
* transformers: compressed-tensors integer checkpoints decompress; ModelOpt ones are skipped ("Unknown quantization
  type"); bitsandbytes 8-bit on Apple runs the fp32 default backend; gfx908/RDNA2 need bitsandbytes' ROCm 7.1.4 build.
* ExLlamaV2: a checkpoint whose method qcheck does not recognise is unknown, not refused.
"""

from __future__ import annotations

import pytest

from qcheck.matrix.architectures import load_architectures
from qcheck.matrix.loader import load_matrix
from qcheck.matrix.resolve import EngineRequest, resolve_one
from qcheck.model import Inspection, Quantization, Verdict


@pytest.fixture(scope="module")
def m():
    return load_matrix()


def insp(method: str, *, model_type: str | None = None, **quant: object) -> Inspection:
    return Inspection(path="model", container="safetensors", dtype="bfloat16", model_type=model_type,
                      quantization=Quantization(method=method, **quant))  # type: ignore[arg-type]


def verdict(m, inspection: Inspection, engine: str, gpu: str, version: str | None = None) -> Verdict:
    return resolve_one(m, inspection, EngineRequest(m.engine(engine), version, None), m.gpus.lookup(gpu))


def mlx_mode(fmt: str) -> Inspection:
    bits, group = {"mxfp4": (4, 32), "nvfp4": (4, 16), "mxfp8": (8, 32)}[fmt]
    return insp("mlx", format=fmt, weight_bits=bits, group_size=group, producer="mlx-lm")


@pytest.mark.parametrize("fmt", ["mxfp4", "nvfp4", "mxfp8"])
def test_mlx_runs_every_fp_mode_on_the_cpu_at_0_32_1(m, fmt: str) -> None:
    v = verdict(m, mlx_mode(fmt), "mlx", "cpu", "0.32.1")
    assert (v.status, v.rule_id) == ("native", "modes-cpu") and "fp_qmm" in (v.kernel or "")


def test_mlx_0_29_cpu_has_an_mxfp4_kernel_only(m) -> None:
    for version in ("0.29.0", "0.29.4"):
        assert verdict(m, mlx_mode("mxfp4"), "mlx", "cpu", version).status == "native", version
    for fmt in ("nvfp4", "mxfp8"):
        for gpu in ("cpu", "m3-max"):
            v = verdict(m, mlx_mode(fmt), "mlx", gpu, "0.29.4")
            assert (v.status, v.rule_id) == ("unsupported", "modes-nv-mx8-029-no-matmul"), (fmt, gpu)
            assert "v0.30.3" in v.reasons[0]
        assert verdict(m, mlx_mode(fmt), "mlx", "cpu", "0.29.0").rule_id == "mode-nvfp4-mxfp8-old"


def test_mlx_fp8_block_dequantises_only_in_the_model_files_that_do(m) -> None:
    block = {"weight_bits": 8, "weight_dtype": "float8_e4m3", "scale_granularity": "block"}
    v = verdict(m, insp("fp8", model_type="mistral4", **block), "mlx", "m3-max", "0.32.1")
    assert v.status == "fallback" and v.rule_id == "fp8-block-dequant"
    other = verdict(m, insp("fp8", model_type="qwen3", **block), "mlx", "m3-max", "0.32.1")
    assert other.status == "unsupported" and "strict" in other.reasons[0]
    # mlx-lm 0.27.1 (MLX 0.29.0) raises on any quantization_config but bitnet/mxfp4, before deepseek_v3.py's
    # weight_scale_inv handling could run
    old = verdict(m, insp("fp8", model_type="deepseek_v3", **block), "mlx", "m3-max", "0.29.0")
    assert (old.status, old.rule_id) == ("unsupported", "quant-config-refused-029")
    assert "Unknown quantization method" in old.reasons[0]


def test_transformers_int_checkpoints_by_producer(m) -> None:
    ct = verdict(m, insp("int8", producer="compressed-tensors", weight_bits=8), "transformers", "h100")
    assert ct.status == "fallback" and ct.rule_id == "ct-int"
    mo = verdict(m, insp("int8", producer="modelopt", weight_bits=8, config_method="INT8"), "transformers", "h100")
    assert mo.status == "unsupported" and "we will skip the quantization" in mo.reasons[0]
    fp8 = verdict(m, insp("fp8", producer="modelopt", weight_bits=8, activation_dtype="float8_e4m3"),
                  "transformers", "h100")
    assert fp8.rule_id == "modelopt-skipped"
    # auto.py is byte-identical in 5.24.0: the same there
    assert verdict(m, insp("int8", producer="modelopt", weight_bits=8), "transformers", "h100",
                   "5.24.0").status == "unsupported"


def test_transformers_bitsandbytes_on_apple_and_older_amd(m) -> None:
    eight = verdict(m, insp("bitsandbytes", weight_bits=8), "transformers", "m3-max")
    assert eight.status == "fallback" and "fp32" in eight.reasons[0]
    four = verdict(m, insp("bitsandbytes", weight_bits=4, weight_dtype="nf4"), "transformers", "m3-max")
    assert four.status == "native"
    old_amd = verdict(m, insp("bitsandbytes", weight_bits=4, weight_dtype="nf4"), "transformers", "mi100")
    assert old_amd.status == "native" and any("rocm714" in r for r in old_amd.requires)
    assert not any("rocm714" in r for r in verdict(m, insp("bitsandbytes", weight_bits=4), "transformers",
                                                       "mi300x").requires)


def test_exllamav2_does_not_refuse_what_qcheck_cannot_name(m) -> None:
    v = verdict(m, insp("unknown"), "exllamav2", "rtx-4090")
    assert (v.status, v.rule_id) == ("unknown", "unrecognised-format")
    assert verdict(m, insp("hqq"), "exllamav2", "rtx-4090").status == "unsupported"


def test_transformers_model_types_carry_the_kind_of_their_model_mappings() -> None:
    data = load_architectures(load_matrix().root, "transformers")
    assert data is not None
    types = next(lst for lst in data.lists if lst.names == "model-type")
    assert types.arch["nemo_speechlm"].kind == "multimodal"
    assert types.arch["llama"].kind == "text" and types.arch["clip"].kind == "other"


def test_self_audit_fixes(m) -> None:
    """The self-audit's partly-right rules (matrices/AUDIT.md #6, #10, #39), as the code reads."""
    for fmt in ("nvfp4", "mxfp8", "mxfp4"):  # qmm_sm80 / fp_qmv run every fp mode weight-only on cc 8+
        assert verdict(m, mlx_mode(fmt), "mlx", "a100", "0.32.1").status == "native", fmt
    fp8 = insp("fp8", producer="compressed-tensors", weight_bits=8, activation_dtype="float8_e4m3")
    for gpu in ("h100", "m3-max"):  # decompressed unless use_optimized_inference=True
        v = verdict(m, fp8, "transformers", gpu)
        assert v.status == "fallback" and "use_optimized_inference" in v.reasons[0], gpu
    gguf = Inspection(path="m.gguf", container="gguf", quantization=Quantization(
        method="gguf", gguf_file_type="Q4_K_M", tensor_types={"Q4_K": 1, "F32": 1}))
    assert verdict(m, gguf, "lm-studio", "rtx-4090", "0.4.9").status == "native"
    assert verdict(m, gguf, "lm-studio", "rtx-4090", "0.3.4").status == "unknown"  # its runtime was not read


def test_the_audit_draw_is_reproducible() -> None:
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "matrices" / "tools" / "audit_rules.py"
    spec = importlib.util.spec_from_file_location("audit_rules", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["audit_rules"] = module
    spec.loader.exec_module(module)
    first, second = module.draw(7, 12), module.draw(7, 12)
    assert first == second and len({(d["engine"], d["id"]) for d in first}) == 12
    assert not {d["engine"] for d in first} & set(module.EXCLUDE)
    versions = {e.id: set(e.versions) for e in load_matrix().engines.values()}
    assert all(set(d["answers_at"]) <= versions[d["engine"]] for d in first)  # listed versions to read
    only = module.draw(7, 6, only=("vllm", "sglang"))  # the second draw (matrices/AUDIT.md): their hand rules
    assert only == module.draw(7, 6, only=("vllm", "sglang")) and {d["engine"] for d in only} <= {"vllm", "sglang"}
    assert len({(d["engine"], d["id"]) for d in only}) == 6
