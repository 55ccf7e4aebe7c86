"""The known pain points (docs/research/matrix.md §10), written as the user met them.

Each test builds the checkpoint as a real file (safetensors headers + config.json from tests/support/builders.py,
GGUF files through gguf-py's writer), runs it through the real pipeline (readers -> classifier ->
shipped matrix) for the engine and GPU of the report, and asserts the status and the words of the
explanation the user needs. Sources are the issue numbers quoted in the research notes.
"""

from __future__ import annotations

import pytest

from qcheck.check import CheckResult
from qcheck.matrix import load_matrix
from qcheck.model import Verdict
from qcheck.pipeline import run
from qcheck.request import CheckRequest
from support import builders as b
from support.gguf_helpers import Q, tensor_info, valid_raw, write_gguf

H = 256  # hidden size of the GGUF test tensors (multiple of every block size)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("pain")
    made = {
        "fp8-dynamic": b.fp8_ct_channel(),
        "fp8-block": b.fp8_block_deepseek(),
        "awq": b.awq_fixture(),
        "w4a16": b.w4a16_ct(),
        "gptq": b.gptq_fixture(desc_act=False),
        "gpt-oss": b.gpt_oss_fixture(),
        "nvfp4": b.nvfp4_modelopt_fixture(),
        "bf16": b.bf16_llama(),
        "bnb-nf4": b.bnb_nf4_fixture(),
        "exl3": b.exl3_fixture(),
        "mlx": b.mlx_fixture(),
    }
    out = {name: str(fx.write(root / name)) for name, fx in made.items()}
    q4km = [("token_embd.weight", (H, H), Q.Q4_K), ("blk.0.attn_q.weight", (H, H), Q.Q4_K),
             ("blk.0.ffn_down.weight", (H, H), Q.Q6_K), ("output_norm.weight", (H,), Q.F32)]
    out["q4km"] = str(write_gguf(root / "model-Q4_K_M.gguf", q4km, file_type=15)[0])
    out["q4km-split"] = str(write_gguf(root / "split-Q4_K_M.gguf", q4km, file_type=15, split_max_tensors=2)[0])
    out["nvfp4-gguf"] = str(write_gguf(root / "model-NVFP4.gguf", [
        ("blk.0.attn_q.weight", (H, H), Q.NVFP4), ("blk.0.ffn_down.weight", (H, H), Q.Q8_0),
        ("output_norm.weight", (H,), Q.F32)])[0])
    out["tq1-gguf"] = str(write_gguf(root / "model-TQ1_0.gguf", [
        ("blk.0.attn_q.weight", (H, H), Q.TQ1_0), ("output_norm.weight", (H,), Q.F32)])[0])
    out["mxfp4-gguf"] = str(write_gguf(root / "gpt-oss-MXFP4.gguf", [
        ("blk.0.ffn_down_exps.weight", (4, H, H), Q.MXFP4), ("blk.0.attn_q.weight", (H, H), Q.Q8_0),
        ("output_norm.weight", (H,), Q.F32)], arch="gpt-oss")[0])
    ik = valid_raw(1)  # an ik_llama.cpp-only type id (IQ*_K family) that mainline ggml does not know
    ik.tensors.append(tensor_info("blk.0.attn_q.weight", [256, 4], 137, 128))
    ik.data = b"\x01" * (128 + 4096)
    (root / "model-IQ4_KS.gguf").write_bytes(ik.build())
    out["ik-gguf"] = str(root / "model-IQ4_KS.gguf")
    return out


def check(path: str, engine: str, gpu: str | None = None, **policy: bool) -> tuple[Verdict, CheckResult]:
    result = run(CheckRequest(path, [engine], [gpu] if gpu else [], **policy))
    assert len(result.verdicts) == 1
    return result.verdicts[0], result


def says(v: Verdict, *words: str) -> None:
    """Every word appears somewhere in what the user reads about this verdict."""
    text = " ".join([v.kernel or "", *v.requires, *v.reasons, *v.warnings, *v.suggestions]).lower()
    missing = [w for w in words if w.lower() not in text]
    assert not missing, f"{missing} not in: {text}"


# ------------------------------------------------------------------------------------------- vLLM

def test_vllm_fp8_on_ampere_runs_as_marlin_weight_only(files) -> None:
    """vllm#4327 (old: 'fp8 ... Minimum capability: 90. Current capability: 86'); today: Marlin W8A16 (#40851)."""
    v, result = check(files["fp8-dynamic"], "vllm", "rtx-3090")
    assert v.status == "fallback" and result.exit_code == 0
    says(v, "marlin")
    assert check(files["fp8-dynamic"], "vllm", "rtx-3090", require_native=True)[1].exit_code == 1
    assert check(files["fp8-dynamic"], "vllm", "l40s")[0].status == "native"


def test_vllm_block_fp8_on_ada_falls_back_although_ada_has_fp8(files) -> None:
    """Block-FP8 (DeepSeek/Qwen FP8) on L40S/RTX 4090: CUTLASS block FP8 needs sm90 -> Marlin."""
    for gpu in ("l40s", "rtx-4090"):
        v, _ = check(files["fp8-block"], "vllm", gpu)
        assert v.status == "fallback", gpu
        says(v, "marlin", "block")
    assert check(files["fp8-block"], "vllm", "h100")[0].status == "native"


def test_vllm_awq_on_v100(files) -> None:
    """vllm#1488/#4202: 'The quantization method awq is not supported ... Minimum capability: 75. Current capability: 70.'"""
    v, result = check(files["awq"], "vllm", "v100")
    assert v.status == "unsupported" and result.exit_code == 1
    says(v, "75", "70")
    assert any("turing" in s or "t4" in s for s in v.suggestions)


def test_vllm_compressed_tensors_w4a16_on_turing_before_and_after_marlin_turing(files) -> None:
    """vllm#14040: 'Min capability: 80. Current capability: 75.'; Marlin on Turing (PR #29901) fixed it."""
    old, _ = check(files["w4a16"], "vllm==0.9.0", "t4")
    assert old.status == "unsupported"
    says(old, "80", "75")
    newest = load_matrix().engines["vllm"].newest  # the suggestion names the newest release read
    assert old.suggestions[0].startswith(f"vLLM {newest} runs it natively")
    new, _ = check(files["w4a16"], "vllm", "t4")
    assert new.status == "native"
    says(new, "marlin")
    volta, _ = check(files["w4a16"], "vllm", "v100")
    assert volta.status == "unsupported"


def test_vllm_gpt_oss_mxfp4_on_t4(files) -> None:
    """vllm#22288: 'The quantization method mxfp4 is not supported for the current GPU SM75'."""
    v, _ = check(files["gpt-oss"], "vllm", "t4")
    assert v.status == "unsupported"
    says(v, "mxfp4", "75")


def test_vllm_gpt_oss_on_dgx_spark_and_rtx_pro_6000(files) -> None:
    """vllm#41477 (GB10 sm121 at 0.20.0: no working MXFP4 MoE backend); vllm#31085 (sm120 falls back to Marlin)."""
    spark, _ = check(files["gpt-oss"], "vllm==0.20.0", "gb10")
    assert spark.status == "unsupported"
    says(spark, "41477")
    assert check(files["gpt-oss"], "vllm", "gb10")[0].status == "fallback"  # 0.33.0: sm121 is family 120
    pro, _ = check(files["gpt-oss"], "vllm", "rtx-pro-6000")
    assert pro.status == "fallback"
    says(pro, "marlin")


def test_vllm_nvfp4_on_hopper_is_weight_only_marlin(files) -> None:
    """vllm#57748: NVFP4 on Hopper runs via Marlin W4A16 ('no FP4 speed-up')."""
    v, result = check(files["nvfp4"], "vllm", "h100")
    assert v.status == "fallback" and result.exit_code == 0
    says(v, "marlin", "fp4")
    assert check(files["nvfp4"], "vllm", "b200")[0].status == "native"
    assert check(files["nvfp4"], "vllm", "h100", require_native=True)[1].exit_code == 1


def test_vllm_gguf_needs_the_plugin_from_0_24(files) -> None:
    """RFC vllm#39583 / PR #39612: GGUF moved to vllm-gguf-plugin; 0.20 still loads it in core."""
    old, _ = check(files["q4km"], "vllm==0.20.0", "h100")
    assert old.status == "native" and not any("plugin" in r for r in old.requires)
    new, _ = check(files["q4km"], "vllm==0.24.0", "h100")
    assert new.status == "native"
    assert any("vllm-gguf-plugin" in r for r in new.requires)
    newest, _ = check(files["q4km"], "vllm", "h100")
    assert any("vllm-gguf-plugin" in r for r in newest.requires)


def test_vllm_split_gguf_must_be_merged(files) -> None:
    """vLLM docs: 'vllm only supports loading single-file GGUF models ... use gguf-split tool to merge them'."""
    v, _ = check(files["q4km-split"], "vllm", "h100")
    assert v.status == "native"
    assert any("merge" in r.lower() for r in v.requires)
    single, _ = check(files["q4km"], "vllm", "h100")
    assert not any("merge" in r.lower() for r in single.requires)


def test_vllm_gguf_types_it_lacks(files) -> None:
    """gguf.py: 'Unsupported GGUF quantization type': TQ1_0 and NVFP4 are not in vLLM's GGUF path."""
    for name, word in (("tq1-gguf", "TQ1_0"), ("nvfp4-gguf", "NVFP4")):
        v, _ = check(files[name], "vllm==0.20.0", "h100")
        assert v.status == "unsupported", name
        assert any(word in r for r in v.reasons), v.reasons


def test_vllm_bitsandbytes_plugin_from_0_28(files) -> None:
    """PR vllm#43529: bitsandbytes moved to vllm-bnb-plugin in 0.28.0."""
    v, _ = check(files["bnb-nf4"], "vllm", "a100")
    assert v.status in ("native", "fallback")
    assert any("vllm-bnb-plugin" in r for r in v.requires)
    old, _ = check(files["bnb-nf4"], "vllm==0.23.0", "a100")
    assert not any("plugin" in r for r in old.requires)


def test_vllm_bf16_on_volta_and_turing_needs_dtype_half(files) -> None:
    """cuda.py: 'Bfloat16 is only supported on GPUs with compute capability of at least 8.0 ... --dtype=half'."""
    for engine, gpu in (("vllm==0.19.1", "v100"), ("vllm", "t4")):
        v, result = check(files["bf16"], engine, gpu)
        assert v.status in ("native", "fallback") and result.exit_code == 0
        assert any("--dtype half" in r or "--dtype=half" in r for r in v.requires), v.requires
    assert check(files["bf16"], "vllm", "v100")[0].status == "unsupported"  # no sm70 kernels in wheels >= 0.20.0
    a100, _ = check(files["bf16"], "vllm", "a100")
    assert a100.status == "native" and a100.requires == []


# ----------------------------------------------------------------------------------------- SGLang

def test_sglang_gptq_on_t4(files) -> None:
    """SGLang 0.5.23: plain gptq is gone on CUDA and gptq_marlin needs cap 80."""
    v, _ = check(files["gptq"], "sglang", "t4")
    assert v.status == "unsupported"
    says(v, "80")
    assert check(files["gptq"], "sglang", "a100")[0].status == "native"


def test_sglang_rocm_allow_list(files) -> None:
    """'gptq quantization is currently not supported in ROCm' (model_config.py::_verify_quantization)."""
    v, _ = check(files["gptq"], "sglang", "mi300x")
    assert v.status == "unsupported"
    says(v, "rocm")


def test_sglang_mxfp4_on_mi300(files) -> None:
    """mxfp4.py: 'Current platform gfx942 not support mxfp4 computation'; MI350 (gfx950) works."""
    v, _ = check(files["gpt-oss"], "sglang", "mi300x")
    assert v.status == "unsupported"
    says(v, "mxfp4")
    assert check(files["gpt-oss"], "sglang", "mi355x")[0].status == "native"


# ----------------------------------------------------------------------------------- TensorRT-LLM

def test_trtllm_gpt_oss_on_l4(files) -> None:
    """TensorRT-LLM#6717: 'NotImplementedError: WFP4A16 MoE is unsupported on SM89'."""
    v, _ = check(files["gpt-oss"], "tensorrt-llm", "l4")
    assert v.status == "unsupported"
    says(v, "WFP4A16", "SM89")


def test_trtllm_gpt_oss_on_hopper_needs_triton_backend(files) -> None:
    """Hopper gpt-oss needs moe_config.backend: TRITON (deprecated from 1.3, PR #19035)."""
    v, _ = check(files["gpt-oss"], "tensorrt-llm", "h100")
    assert v.dimensions[0].status == "fallback"  # the weight format
    # GptOssForCausalLM is on the 1.3.0rc13 supported-models page, not the 1.0.0 one: 1.2.1 lies between the two
    assert v.status == "unknown" and v.reasons[0].startswith(
        "architecture: architecture GptOssForCausalLM appeared in TensorRT-LLM between 1.0.0 and 1.3.0rc13")
    assert check(files["gpt-oss"], "tensorrt-llm==1.3.0rc13", "h100")[0].status == "fallback"
    assert any("TRITON" in r for r in v.requires)


def test_trtllm_nvfp4_on_hopper_needs_opt_in_marlin(files) -> None:
    """PR TensorRT-LLM#13476: opt-in Marlin NVFP4 W4A16 on Hopper."""
    v, _ = check(files["nvfp4"], "tensorrt-llm", "h100")
    assert (v.dimensions[0].status, v.status) == ("fallback", "fallback")  # LlamaForCausalLM: on its docs pages
    assert any("marlin" in r.lower() for r in v.requires)


def test_trtllm_has_no_volta_turing_gguf_or_amd(files) -> None:
    assert check(files["fp8-dynamic"], "tensorrt-llm", "v100")[0].status == "unsupported"
    assert check(files["awq"], "tensorrt-llm", "t4")[0].status == "unsupported"
    assert check(files["q4km"], "tensorrt-llm", "h100")[0].status == "unsupported"
    amd, _ = check(files["fp8-dynamic"], "tensorrt-llm", "mi300x")
    assert amd.status == "unsupported"
    says(amd, "amd")


# ---------------------------------------------------------------------- llama.cpp / Ollama / LM Studio

def test_llamacpp_nvfp4_gguf_on_metal_runs_on_cpu(files) -> None:
    """ggml-metal rejects NVFP4 in supports_op: those matmuls fall back to the CPU backend."""
    v, result = check(files["nvfp4-gguf"], "llama.cpp", "m3-max")
    assert v.status == "fallback" and result.exit_code == 0
    assert v.backend == "metal"
    says(v, "NVFP4", "cpu")
    cuda, _ = check(files["nvfp4-gguf"], "llama.cpp", "rtx-4090")
    assert cuda.status == "native" and cuda.backend == "cuda"


def test_llamacpp_tq1_0_on_cuda_and_metal_runs_on_cpu(files) -> None:
    for gpu in ("h100", "m3-max"):
        v, _ = check(files["tq1-gguf"], "llama.cpp", gpu)
        assert v.status == "fallback", gpu
        says(v, "TQ1_0", "cpu")
    vulkan, _ = check(files["tq1-gguf"], "llama.cpp:vulkan", "h100")
    assert (vulkan.status, vulkan.backend) == ("native", "vulkan")


def test_llamacpp_runs_gpt_oss_mxfp4_gguf_on_turing(files) -> None:
    """Ollama/llama.cpp ran gpt-oss on SM75 when vLLM could not (vllm#22288)."""
    assert check(files["mxfp4-gguf"], "llama.cpp", "t4")[0].status == "native"
    assert check(files["mxfp4-gguf"], "ollama", "t4")[0].status == "native"
    old, _ = check(files["mxfp4-gguf"], "vllm==0.20.0", "t4")
    assert old.status == "unsupported"  # the in-tree GGUF loader has no MXFP4 type
    assert any("MXFP4" in r for r in old.reasons)
    assert any(s.startswith("llama.cpp") and "--engine llama.cpp" in s for s in old.suggestions), old.suggestions
    new, _ = check(files["mxfp4-gguf"], "vllm", "t4")
    assert new.status == "unknown"  # only an unreleased plugin PR routes GPT-OSS GGUF to MXFP4 kernels
    assert new.reasons


def test_ik_llamacpp_types_do_not_load_in_mainline(files) -> None:
    """gpustack#2365: ik_llama.cpp-only quant types (IQ*_K) break mainline llama.cpp, Ollama and LM Studio."""
    for engine in ("llama.cpp", "ollama", "lm-studio"):
        v, result = check(files["ik-gguf"], engine, "rtx-4090")
        assert v.status == "unsupported" and result.exit_code == 1, engine
        assert any("unknown(137)" in r for r in v.reasons), (engine, v.reasons)


def test_llamacpp_loads_gguf_only(files) -> None:
    v, _ = check(files["awq"], "llama.cpp", "rtx-4090")
    assert v.status == "unsupported"
    says(v, "gguf")


def test_lmstudio_mlx_only_on_apple_and_no_safetensors(files) -> None:
    """LM Studio: MLX runtime only on Apple silicon; safetensors FP16/AWQ/GPTQ must be GGUF or MLX."""
    # the weight format runs; whether LM Studio's runtimes load the architecture, qcheck has no data
    on_mac = check(files["mlx"], "lm-studio", "m3-max")[0]
    assert (on_mac.dimensions[0].status, on_mac.status) == ("native", "unknown")
    assert check(files["mlx"], "lm-studio", "rtx-4090")[0].status == "unsupported"
    assert check(files["awq"], "lm-studio", "rtx-4090")[0].status == "unsupported"
    assert check(files["q4km"], "lm-studio", "rtx-4090")[0].dimensions[0].status == "native"


# ---------------------------------------------------------------------------------------- ExLlama

def test_exllamav3_on_t4(files) -> None:
    """exllamav3#14 (1.4.1): "ptxas error: Feature 'cp.async' requires .target sm_80 or higher"; 1.6.5 has sm75
    paths; its ROCm kernels are wave32 (RDNA) only."""
    v, _ = check(files["exl3"], "exllamav3==1.4.1", "t4")
    assert v.status == "unsupported"
    says(v, "sm_80")
    assert check(files["exl3"], "exllamav3", "t4")[0].status == "native"
    assert check(files["exl3"], "exllamav3", "rtx-3090")[0].status == "native"
    assert check(files["exl3"], "exllamav3", "mi300x")[0].status == "unsupported"
    assert check(files["exl3"], "vllm", "h100")[0].status == "unsupported"
