"""Matrix rules corrected after reading the engines' code at the cited versions (issue #13).

Each rule is checked through the real pipeline (real checkpoint files -> readers -> classifier -> shipped
matrix) on both sides of the version boundary it has; the evidence (file and line at the version) is in
the rule's source in matrices/engines/*.toml.
"""

from __future__ import annotations

import pytest

from qcheck.check import CheckResult
from qcheck.model import Verdict
from qcheck.pipeline import run
from qcheck.request import CheckRequest, Deploy, KVCacheTypes, Parallel
from support import builders as b
from support.gguf_helpers import Q, tensor_info, valid_raw, write_gguf

H = 256


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("truth")
    made = {"gptq": b.gptq_fixture(desc_act=False), "awq": b.awq_fixture(), "gpt-oss": b.gpt_oss_fixture(),
            "fp8-block": b.fp8_block_deepseek(), "w4a16": b.w4a16_ct()}
    out = {name: str(fx.write(root / name)) for name, fx in made.items()}
    for name, qtype in (("nvfp4", Q.NVFP4), ("q1_0", Q.Q1_0), ("q8_0", Q.Q8_0)):
        out[f"{name}-gguf"] = str(write_gguf(root / f"model-{name}.gguf", [
            ("blk.0.attn_q.weight", (H, H), qtype), ("blk.0.ffn_down.weight", (H, H), Q.Q8_0),
            ("output_norm.weight", (H,), Q.F32)])[0])
    # Q2_0 (ggml type 42: 64-element blocks of 18 bytes) is newer than some gguf-py releases: written raw
    q2 = valid_raw(1)
    q2.tensors.append(tensor_info("blk.0.attn_q.weight", [256, 4], 42, 128))
    q2.data = b"\x01" * (128 + 16 * 18)
    (root / "model-q2_0.gguf").write_bytes(q2.build())
    out["q2_0-gguf"] = str(root / "model-q2_0.gguf")
    return out


def check(path: str, engine: str, gpu: str, **policy: bool) -> tuple[Verdict, CheckResult]:
    result = run(CheckRequest(path, [engine], [gpu], **policy))
    assert len(result.verdicts) == 1
    return result.verdicts[0], result


def text(v: Verdict) -> str:
    return " ".join([v.kernel or "", *v.requires, *v.reasons, *v.warnings]).lower()


def cited(v: Verdict, fragment: str) -> bool:
    return any(fragment in s.ref for s in v.sources)


def test_vllm_gptq_on_turing_is_exllama_until_0_14(files) -> None:
    """0.13.0 marlin_utils.py:51-52 returns no Marlin type below sm80; 0.14.0 lowered it to 75."""
    for version in ("0.10.2", "0.13.0"):
        v, result = check(files["gptq"], f"vllm=={version}", "t4")
        assert (v.status, v.rule_id.split("+")[0]) == ("fallback", "gptq-turing-old"), version
        assert "exllama" in text(v) and result.exit_code == 0
    assert cited(check(files["gptq"], "vllm==0.13.0", "t4")[0], "0.13.0 wheel")
    new, _ = check(files["gptq"], "vllm==0.14.0", "t4")
    assert new.status == "native" and "marlin" in text(new)
    # the same boundary for FP8 (Fp8Config min 80 at 0.13.0) and compressed-tensors W4A16 (Exllama at 0.13.0)
    assert check(files["fp8-block"], "vllm==0.13.0", "t4")[0].status == "unsupported"
    assert check(files["fp8-block"], "vllm==0.14.0", "t4")[0].status == "fallback"
    w4a16, _ = check(files["w4a16"], "vllm==0.13.0", "t4")
    assert w4a16.status == "fallback" and "exllama" in text(w4a16)
    # 0.12.0 already lowered CompressedTensorsWNA16 to 75 (the generated facts), Marlin still needed 80: Exllama too
    assert check(files["w4a16"], "vllm==0.12.0", "t4")[0].rule_id.split("+")[0] == "int4-turing-013"
    old = check(files["w4a16"], "vllm==0.11.0", "t4")[0]
    assert old.status == "unsupported" and "80" in " ".join(old.reasons)  # CompressedTensorsWNA16 needs 80 there


def test_mlx_rejects_gptq_but_loads_awq(files) -> None:
    """mlx-lm utils.py raises on any .g_idx key and unpacks GPTQ with AWQ's layout."""
    for gpu in ("m3-max", "rtx-4090", "cpu"):
        v, result = check(files["gptq"], "mlx", gpu)
        assert v.status == "unsupported", gpu
        assert "g_idx" in text(v) and result.exit_code == 1
        assert any("mlx_lm.convert" in s for s in v.suggestions)
    for version in ("0.29.0", "0.32.1"):
        assert check(files["gptq"], f"mlx=={version}", "m3-max")[0].status == "unsupported"
    assert check(files["awq"], "mlx", "m3-max")[0].status == "native"


def test_ollama_nvfp4_and_q1_0_gguf_follow_llama_server(files) -> None:
    """fs/ggml/type.go @ v0.33.0-rc2 knows NVFP4 and Q1_0; GGUF runs on upstream llama-server (b10488)."""
    for name in ("nvfp4-gguf", "q1_0-gguf"):
        v, _ = check(files[name], "ollama", "rtx-4090")
        assert v.status == "native", name
        assert "llama-server" in text(v) and "go engine" not in text(v)
        assert cited(v, "9db4bdbad")
    metal, _ = check(files["nvfp4-gguf"], "ollama", "m3-max")
    assert metal.status == "fallback" and "cpu" in text(metal)
    q2, _ = check(files["q2_0-gguf"], "ollama", "rtx-4090")
    assert q2.status == "unknown" and "q2_0" in text(q2)
    # versions before the data (Ollama's data starts at 0.33.0-rc2)
    old, result = check(files["nvfp4-gguf"], "ollama==0.29.0", "rtx-4090")
    assert old.status == "unknown" and result.exit_code == 1


def test_sglang_block_fp8_on_sm120_resolves_to_cutlass(files) -> None:
    """fp8_utils.py:1212-1213 (0.5.23): auto -> cutlass on sm120 (the docs say Triton)."""
    for gpu in ("rtx-5090", "rtx-pro-6000", "gb10"):
        v, _ = check(files["fp8-block"], "sglang", gpu)
        assert v.status == "native" and v.kernel is not None and v.kernel.startswith("CUTLASS"), gpu
    ada, _ = check(files["fp8-block"], "sglang", "l40s")
    assert "triton" in (ada.kernel or "").lower()
    assert check(files["fp8-block"], "sglang==0.4.0", "rtx-5090")[0].status == "unknown"


def test_vllm_gpt_oss_on_b200_without_activation_type_is_w4a16(files) -> None:
    """0.14.0 mxfp4.py:134-141 and 0.33.0 oracle/mxfp4.py:614-630: no declared activation -> BF16 backends."""
    for version in ("0.14.0", "0.33.0"):
        v, result = check(files["gpt-oss"], f"vllm=={version}", "b200")
        assert v.status == "fallback" and "bf16" in text(v) and result.exit_code == 0, version
        assert check(files["gpt-oss"], f"vllm=={version}", "b200", require_native=True)[1].exit_code == 1
    assert check(files["gpt-oss"], "vllm==0.13.0", "b200")[0].status == "unknown"
    assert check(files["gpt-oss"], "vllm", "h100")[0].status == "fallback"


def test_vllm_gpt_oss_on_gb10_has_a_range(files) -> None:
    """vllm#41477 was read at 0.20.0; 0.33.0 treats sm121 as family 120 and picks Marlin."""
    assert check(files["gpt-oss"], "vllm==0.20.0", "gb10")[0].status == "unsupported"
    assert check(files["gpt-oss"], "vllm==0.20.1", "gb10")[0].status == "unsupported"
    for version, rule in (("0.14.0", "mxfp4-gb10-unread-old"), ("0.21.0", "mxfp4-gb10-unread-mid"),
                          ("0.28.0", "mxfp4-gb10-unread-mid")):
        v, _ = check(files["gpt-oss"], f"vllm=={version}", "gb10")
        assert (v.status, v.rule_id) == ("unknown", rule), version
    new, _ = check(files["gpt-oss"], "vllm==0.33.0", "gb10")
    assert new.status == "fallback" and "marlin" in text(new)


def test_tensorrt_llm_block_fp8_on_sm120_but_not_sm121(files) -> None:
    """linear.py FP8BlockScalesLinearMethod.apply has an sm120 branch (PR #9687); sm121 misses it (#17126)."""
    # the weight-format dimension; the architecture (LlamaForCausalLM) is on TensorRT-LLM's supported-models pages
    v, _ = check(files["fp8-block"], "tensorrt-llm", "rtx-5090")
    assert v.dimensions[0].status == "native" and "fp8_block_scaling_gemm" in text(v)
    assert v.status == "native"
    assert cited(v, "linear.py")
    spark, _ = check(files["fp8-block"], "tensorrt-llm", "gb10")
    assert spark.status == "unsupported" and "17126" in text(spark)
    assert check(files["fp8-block"], "tensorrt-llm", "h100")[0].dimensions[0].status == "native"
    assert check(files["fp8-block"], "tensorrt-llm", "l40s")[0].status == "unsupported"


# ------------------------------------------------------------------ versions outside the data

@pytest.mark.parametrize(("engine", "floor"), [("vllm==0.3.0", "0.7.2"), ("sglang==0.1.0", "0.5.23"),
                                               ("llama.cpp==b100", "b6122")])
def test_versions_older_than_the_data_are_unknown(files, engine: str, floor: str) -> None:
    gpu = "h100"
    path = files["q8_0-gguf"] if engine.startswith("llama.cpp") else files["gptq"]
    v, result = check(path, engine, gpu)
    assert (v.status, v.rule_id) == ("unknown", "engine-version")
    (reason,) = v.reasons  # one line: no dimension (the architecture data starts later too) adds to it
    assert reason.startswith(f"{reason.split(' predates')[0]} predates all the data: ")
    assert f"were read at {floor} and later" in reason and reason.endswith("runs")
    assert result.exit_code == 1
    assert run(CheckRequest(path, [engine], [gpu], allow_unknown=True)).exit_code == 0


def test_rules_about_older_releases_still_say_not_yet(files) -> None:
    """Below the data a rule with an upper-bounded range may answer, but only with "not yet" (never "runs"); a rule
    generated from builds read later is not read there either: unknown, naming the builds it was read at."""
    old, result = check(files["nvfp4-gguf"], "llama.cpp==b100", "rtx-4090")
    assert (old.status, old.rule_id) == ("unknown", "not-read") and result.exit_code == 1
    assert "b6122-b8179" in old.reasons[0]
    assert check(files["q8_0-gguf"], "llama.cpp==b6301", "rtx-4090")[0].status == "native"


def test_versions_newer_than_the_data_keep_the_newest_rules(files) -> None:
    v, result = check(files["gptq"], "vllm==0.99.0", "h100")
    assert v.status == "native" and result.exit_code == 0
    assert v.warnings[0] == "rules verified up to vLLM 0.34.0; 0.99.0 is newer, unverified"
    # the floor itself and anything between floor and the oldest listed version is judged by rules
    assert check(files["gptq"], "vllm==0.7.2", "t4")[0].rule_id != "engine-version"


# --------------------------------------------------------------------------------- GPUs users run

@pytest.mark.parametrize(("name", "gpu", "arch", "cc"), [
    ("NVIDIA H100 80GB HBM3", "h100", "hopper", "9.0"), ("NVIDIA GeForce RTX 4090", "rtx-4090", "ada", "8.9"),
    ("4090", "rtx-4090", "ada", "8.9"), ("5090", "rtx-5090", "blackwell-consumer", "12.0"),
    ("Tesla V100-SXM2-32GB", "v100-32gb", "volta", "7.0"), ("NVIDIA A100-SXM4-40GB", "a100", "ampere", "8.0"),
    ("NVIDIA A100 80GB PCIe", "a100-80gb", "ampere", "8.0"), ("Tesla P40", "p40", "pascal", "6.1"),
    ("Tesla P100-PCIE-16GB", "p100", "pascal", "6.0"), ("NVIDIA GeForce GTX 1080 Ti", "gtx-1080-ti", "pascal", "6.1"),
    ("GeForce GTX 1660 SUPER", "gtx-1660", "turing", "7.5"), ("AMD Instinct MI300X", "mi300x", "cdna3", None),
    ("AMD Instinct MI100", "mi100", "cdna1", None), ("Radeon RX 6800 XT", "rx-6900-xt", "rdna2", None),
])
def test_device_tool_names_and_bare_numbers(name: str, gpu: str, arch: str, cc: str | None) -> None:
    from qcheck.matrix.loader import load_matrix

    t = load_matrix().gpus.lookup(name)
    assert (t.gpu, t.arch.id, t.cc) == (gpu, arch, cc)


@pytest.mark.parametrize(("alias", "arch", "cc"), [("sm61", "pascal", "6.1"), ("sm_60", "pascal", "6.0"),
                                                   ("gfx908", "cdna1", None), ("gfx1030", "rdna2", None)])
def test_new_architectures_by_capability_and_gfx_id(alias: str, arch: str, cc: str | None) -> None:
    from qcheck.matrix.loader import load_matrix

    t = load_matrix().gpus.lookup(alias)
    assert (t.arch.id, t.cc) == (arch, cc)


def test_vllm_wheels_have_no_kernels_for_pascal_and_dropped_volta_in_0_20(files) -> None:
    """Fatbinary of the PyPI wheels: sm70 cubins up to 0.19.1, none from 0.20.0; never sm6x."""
    for gpu in ("p40", "p100", "gtx-1080"):
        v, result = check(files["gptq"], "vllm", gpu)
        assert v.status == "unsupported" and result.exit_code == 1
        assert v.reasons[0].startswith("build: vLLM 0.34.0's released build has no CUDA kernels for sm6")
    old_volta, _ = check(files["gptq"], "vllm==0.19.1", "v100")
    new_volta, _ = check(files["gptq"], "vllm==0.20.0", "v100")
    assert old_volta.status == "fallback" and new_volta.status == "unsupported"
    assert [d.dimension for d in new_volta.dimensions] == ["weights", "architecture", "build"]
    assert check(files["gptq"], "vllm==0.19.1", "p40")[0].status == "unsupported"
    # capabilities the wheel covers through binary-compatible cubins or PTX are left to the rules
    assert check(files["gptq"], "vllm", "jetson-orin")[0].status == "native"  # sm87 runs sm80 cubins
    assert check(files["gptq"], "vllm", "gb10")[0].status == "native"  # sm121 runs sm120 cubins


def test_new_gpus_get_honest_answers(files) -> None:
    """llama.cpp and Ollama run GGUF on Pascal (cc 5.0+); unverified ROCm archs are unknown, not guessed."""
    assert check(files["q8_0-gguf"], "llama.cpp", "p40")[0].status == "native"
    assert check(files["q8_0-gguf"], "ollama", "gtx-1080-ti")[0].status == "native"
    for gpu in ("mi100", "rx-6900-xt"):
        assert check(files["gptq"], "vllm", gpu)[0].status == "unknown"
        assert check(files["fp8-block"], "sglang", gpu)[0].status == "unknown"
        ollama, _ = check(files["q8_0-gguf"], "ollama", gpu)
        assert ollama.status == "unsupported" and "ollama:vulkan" in text(ollama)
        assert check(files["q8_0-gguf"], "ollama:vulkan", gpu)[0].status == "native"


# ------------------------------------------------------------------------------ KV-cache dimension

def kv(path: str, engine: str, gpu: str, dtype: str) -> tuple[Verdict, CheckResult]:
    result = run(CheckRequest(path, [engine], [gpu], deploy=Deploy(kv_cache=KVCacheTypes.parse(dtype))))
    return result.verdicts[0], result


def kv_judgement(v: Verdict):
    return next(d for d in v.dimensions if d.dimension == "kv-cache")


def test_vllm_fp8_kv_by_gpu(files) -> None:
    """vLLM 0.33.0: FA3/FlashInfer FP8 KV on sm89+, FlashInfer dequantising on sm8x, nothing below sm80."""
    bf16 = files["awq"]
    assert kv(bf16, "vllm", "h100", "fp8")[0].status == "native"
    assert kv(bf16, "vllm", "l40s", "fp8_e4m3")[0].status == "native"
    ampere, result = kv(bf16, "vllm", "rtx-3090", "fp8")
    assert ampere.status == "fallback" and result.exit_code == 0
    assert ampere.reasons[0].startswith("kv-cache: --kv-cache-dtype fp8: on rtx-3090 (sm86)")
    turing, result = kv(bf16, "vllm", "t4", "fp8")
    assert turing.status == "unsupported" and result.exit_code == 1
    assert "fp8e4nv" in turing.reasons[0]
    # the version boundary: read at 0.33.0 only
    assert kv(bf16, "vllm==0.28.0", "rtx-3090", "fp8")[0].status == "unknown"
    assert kv(bf16, "vllm==0.28.0", "h100", "auto")[0].status == "native"  # auto: nothing asked


def test_vllm_nvfp4_kv_blackwell_vs_hopper(files) -> None:
    assert kv(files["awq"], "vllm", "b200", "nvfp4")[0].status == "native"
    assert kv(files["awq"], "vllm", "h100", "nvfp4")[0].status == "fallback"
    assert kv(files["awq"], "vllm", "rtx-5090", "nvfp4")[0].status == "fallback"
    assert kv(files["awq"], "vllm", "h100", "nvfp4_4over6")[0].status == "unsupported"
    assert kv(files["awq"], "vllm", "t4", "nvfp4")[0].status == "unsupported"


def test_kv_dtypes_an_engine_does_not_accept(files) -> None:
    v, result = kv(files["awq"], "vllm", "h100", "q4_0")
    assert v.status == "unsupported" and result.exit_code == 1
    assert kv_judgement(v).reasons[0].startswith("vLLM does not accept --kv-cache-dtype q4_0 (it accepts: auto,")
    cpp, _ = kv(files["q8_0-gguf"], "llama.cpp", "h100", "fp8")
    assert cpp.status == "unsupported" and "--cache-type-k/--cache-type-v fp8" in cpp.reasons[0]
    assert kv(files["fp8-block"], "sglang", "h100", "fp8")[0].status == "unsupported"  # SGLang spells fp8_e4m3
    assert kv(files["fp8-block"], "sglang", "h100", "fp8_e4m3")[0].status == "native"
    assert kv(files["q8_0-gguf"], "ollama", "rtx-4090", "q5_1")[0].status == "unsupported"


def test_llama_cpp_quantised_kv_needs_flash_attention(files) -> None:
    for engine in ("llama.cpp", "ollama"):
        v, result = kv(files["q8_0-gguf"], engine, "rtx-4090", "q8_0")
        assert v.status == "native" and result.exit_code == 0
        assert any("flash" in r.lower() for r in v.requires), v.requires
    assert kv(files["q8_0-gguf"], "llama.cpp", "rtx-4090", "f16")[0].requires == []


def test_the_checkpoint_kv_scheme_is_judged_without_a_flag(files, tmp_path) -> None:
    fixture = b.fp8_ct_channel()
    config = fixture.configs["config.json"]["quantization_config"]
    config["kv_cache_scheme"] = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False,
                                 "symmetric": True}
    path = str(fixture.write(tmp_path / "fp8-kv"))
    v, _ = check(path, "vllm", "t4")
    assert v.status == "unsupported"
    assert any(r.startswith("kv-cache: the checkpoint's fp8 KV cache: ") for r in v.reasons)
    assert check(path, "vllm", "h100")[0].status == "native"


# ------------------------------------------------------------------------------ parallel layouts

def shaped(method: str, *, heads: int, kv: int, head_dim: int, inter: int, layers: int = 80, moe: bool = False,
           **quant: object):
    from qcheck.model import Inspection, Quantization

    return Inspection(path="m", container="safetensors", dtype="bfloat16", num_attention_heads=heads,
                      num_kv_heads=kv, head_dim=head_dim, hidden_size=heads * head_dim, intermediate_size=inter,
                      num_layers=layers, moe=moe,
                      quantization=Quantization(method=method, **quant))  # type: ignore[arg-type]


def layout(inspection, engine: str = "vllm", gpu: str = "h100", **options: int) -> Verdict:
    from qcheck.matrix.loader import load_matrix
    from qcheck.matrix.resolve import EngineRequest, resolve_one

    m = load_matrix()
    return resolve_one(m, inspection, EngineRequest(m.engine(engine)), m.gpus.lookup(gpu), Deploy(parallel=Parallel(**options)))


FP8_BLOCK = {"weight_bits": 8, "weight_dtype": "float8_e4m3", "activation_dtype": "float8_e4m3",
             "scale_granularity": "block", "block_size": [128, 128], "producer": "modelopt", "config_method": "fp8"}


def test_fp8_block_must_divide_each_rank_slice() -> None:
    """vLLM fp8_utils.py: 'Weight output_partition_size = 3696 is not divisible by ... block_n = 128'."""
    qwen72 = shaped("fp8", heads=64, kv=8, head_dim=128, inter=29568, **FP8_BLOCK)
    assert layout(qwen72).status == "native"  # no layout asked: nothing to judge
    v = layout(qwen72, tp=8)
    assert v.status == "unsupported"
    assert ("parallelism: gate_proj/up_proj: Weight output_partition_size = 3696 is not divisible by weight "
            "quantization block_n = 128.") in v.reasons
    assert "parallelism: down_proj: Weight input_size_per_partition = 3696 is not divisible by weight " \
           "quantization block_k = 128." in v.reasons
    deepseek_like = shaped("fp8", heads=128, kv=128, head_dim=128, inter=18432, **FP8_BLOCK)
    ok = layout(deepseek_like, tp=8)
    assert ok.status == "native" and [d.status for d in ok.dimensions if d.dimension == "parallelism"] == ["native"]


def test_heads_kv_heads_and_groups_must_divide() -> None:
    llama70 = shaped("gptq", heads=64, kv=8, head_dim=128, inter=28672, weight_bits=4, group_size=128)
    assert layout(llama70, tp=8).status == "native"
    assert layout(llama70, tp=16).status == "native"  # 8 KV heads replicated over 16 ranks
    heads = layout(llama70, tp=6)
    assert heads.status == "unsupported"
    assert heads.reasons[0] == ("parallelism: Total number of attention heads (64) must be divisible by tensor "
                                "parallel size (6).")
    odd_kv = shaped("none", heads=24, kv=6, head_dim=128, inter=8192)
    assert any("6 is not divisible by 4" in r for r in layout(odd_kv, tp=4).reasons)
    llama2 = shaped("gptq", heads=32, kv=32, head_dim=128, inter=11008, weight_bits=4, group_size=128)
    v = layout(llama2, tp=8)
    assert v.status == "unsupported" and any("down_proj: input_size_per_partition = 1376 is not divisible by "
                                             "group_size = 128" in r for r in v.reasons)
    assert layout(llama2, tp=2).status == "native"


def test_pipeline_and_expert_parallel() -> None:
    dense = shaped("none", heads=32, kv=8, head_dim=128, inter=14336, layers=32)
    assert layout(dense, pp=4).status == "native"
    assert layout(dense, pp=64).status == "unsupported"
    ep = layout(dense, ep=2)
    assert ep.status == "unsupported" and "Number of experts in the model must be greater than 0" in ep.reasons[0]
    assert layout(shaped("none", heads=32, kv=8, head_dim=128, inter=14336, moe=True), ep=8).status == "native"
    # engines without parallel data are left alone
    assert [d.dimension for d in layout(dense, engine="lm-studio", tp=3).dimensions] == ["weights"]


def test_tp_through_check(files) -> None:
    v = run(CheckRequest(files["fp8-block"], ["vllm"], ["h100"], deploy=Deploy(parallel=Parallel(tp=3)))).verdicts[0]
    assert v.status == "unsupported" and "must be divisible by tensor parallel size (3)" in v.reasons[0]


def test_sycl_q2_0_is_settled_by_the_code(files) -> None:
    """ggml-sycl b11312: supports_op keeps Q2_0 on SYCL and convert.cpp has its dequantiser (the generated facts); at
    b10068, the first build with Q2_0, SYCL accepted it without a dequantiser (the first prompt batch fails)."""
    v, result = check(files["q2_0-gguf"], "llama.cpp", "arc-a770")
    assert (v.status, v.backend, v.rule_id) == ("native", "sycl", "gguf-sycl") and result.exit_code == 0
    old = check(files["q2_0-gguf"], "llama.cpp==b10068", "arc-a770")[0]
    assert (old.status, old.rule_id) == ("unsupported", "gguf-sycl-no-kernel-b10068-b10068")
    assert check(files["q1_0-gguf"], "llama.cpp", "arc-a770")[0].status == "native"


def test_exllamav3_refresh_turing_and_rdna() -> None:
    """1.4.1 needed sm80 and had no ROCm; the 1.6.5 wheel has sm75 paths and wave32-only ROCm kernels."""
    from qcheck.model import Inspection, Quantization

    exl3 = Inspection(path="m", container="safetensors", dtype="float16",
                      quantization=Quantization(method="exl3", producer="exllamav3"))
    assert layout(exl3, "exllamav3", "rtx-2080-ti").status == "native"
    from qcheck.matrix.loader import load_matrix
    from qcheck.matrix.resolve import EngineRequest, resolve_one

    m = load_matrix()

    def status(version: str, gpu: str) -> str:
        return resolve_one(m, exl3, EngineRequest(m.engine("exllamav3"), version), m.gpus.lookup(gpu)).status

    assert [status(v, "t4") for v in ("1.4.1", "1.5.0", "1.6.5")] == ["unsupported", "unknown", "native"]
    assert [status(v, "rx-7900-xtx") for v in ("1.4.1", "1.5.0", "1.6.5")] == ["unsupported", "unknown", "native"]
    assert status("1.6.5", "mi300x") == "unsupported"
    assert status("1.6.5", "v100") == "unknown"
    assert status("1.6.5", "h100") == "native"


def test_sglang_fp8_moe_on_ampere_differs_from_the_dense_path() -> None:
    """Dense FP8 on sm8x runs Marlin W8A16; FP8 experts have no Marlin path (fp8.py Fp8MoEMethod)."""
    fp8 = {"weight_bits": 8, "weight_dtype": "float8_e4m3", "activation_dtype": "float8_e4m3",
           "scale_granularity": "per-channel", "producer": "compressed-tensors"}
    dense = shaped("fp8", heads=32, kv=8, head_dim=128, inter=14336, **fp8)
    moe = shaped("fp8", heads=32, kv=8, head_dim=128, inter=14336, moe=True, **fp8)
    assert layout(dense, "sglang", "a100").status == "fallback"
    v = layout(moe, "sglang", "a100")
    assert (v.status, v.rule_id) == ("unknown", "fp8-moe-ampere") and "fp8e4nv" in v.reasons[0]
    assert layout(moe, "sglang", "h100").status == "native"


def test_the_memory_estimate_proposes_only_gpu_counts_the_engine_loads() -> None:
    """A 72B block-FP8 model with a 29568-wide MLP: --tp 2/4/8 all split a 128 block, so vLLM cannot spread it."""
    from support.memory_helpers import estimate

    qwen72 = shaped("fp8", heads=64, kv=8, head_dim=128, inter=29568, **FP8_BLOCK)
    qwen72.parameters, qwen72.size_bytes, qwen72.context_length = 72_700_000_000, 77_000_000_000, 32768
    est = estimate(qwen72, context=4096, gpu_memory_gib=80, engine="vllm")
    assert est.gpus_needed is None and est.max_gpus == 1
    assert any(a.startswith("GPU counts the engine refuses for this checkpoint were skipped: --tp 2 (gate_proj/up_proj: "
                            "Weight output_partition_size = 14784") for a in est.assumptions)
    llama70 = shaped("fp8", heads=64, kv=8, head_dim=128, inter=28672, **FP8_BLOCK)
    llama70.parameters, llama70.size_bytes, llama70.context_length = 70_600_000_000, 75_000_000_000, 32768
    ok = estimate(llama70, context=4096, gpu_memory_gib=80, engine="vllm")
    assert ok.gpus_needed == 2 and not any("refuses" in a for a in ok.assumptions)


# ------------------------------------------------------------------ open-ended rules bounded or re-read

def test_no_rule_claims_releases_it_was_not_read_at() -> None:
    """Every open-ended rule that says runs/fallback/unsupported has a source read at the engine's newest version."""
    from qcheck.matrix.audit import open_ended
    from qcheck.matrix.loader import load_matrix

    claims, unknowns = open_ended(load_matrix())
    # every shipped rule states the releases it was read at (verified, issue #35): none answers beyond them
    assert claims == [] and unknowns == []


def moe(fixture):
    fixture.configs["config.json"]["num_local_experts"] = 8
    fixture.configs["config.json"]["num_experts_per_tok"] = 2
    return fixture


def test_vllm_nvfp4_moe_on_sm120_by_release(tmp_path) -> None:
    """0.14.0: the backend is a compiled check (unknown); 0.16.0-0.28.0 and 0.33.0: the oracle tries FlashInfer CUTLASS
    and vLLM CUTLASS FP4 MoE, both on capability family 120, before Marlin (self-audit: 0.24.0 was 'Marlin')."""
    path = str(moe(b.nvfp4_modelopt_fixture()).write(tmp_path / "nvfp4-moe"))
    old, result = check(path, "vllm==0.14.0", "rtx-5090")
    assert (old.status, old.rule_id) == ("unknown", "nvfp4-moe-sm120") and result.exit_code == 1
    assert "cutlass_fp4_supported" in text(old)
    for version in ("0.16.0", "0.24.0", "0.28.0"):
        mid, _ = check(path, f"vllm=={version}", "rtx-5090")
        assert (mid.dimensions[0].status, mid.rule_id) == ("native", "nvfp4-moe-sm120-016"), version
        assert "flashinfer cutlass" in text(mid) and "47749" in text(mid)
    for gpu in ("rtx-5090", "gb10"):
        new, _ = check(path, "vllm==0.33.0", gpu)
        assert (new.dimensions[0].status, new.rule_id) == ("native", "nvfp4-moe-sm120-033"), gpu
        assert "cutlass" in text(new) and cited(new, "cutlass_moe.py:716-722")
    dense, _ = check(str(b.nvfp4_modelopt_fixture().write(tmp_path / "nvfp4-dense")), "vllm==0.24.0", "rtx-5090")
    assert dense.status == "native"  # the dense path had FP4 GEMM on sm120 already


def test_vllm_bitsandbytes_below_volta_after_the_plugin_move(tmp_path) -> None:
    """In-tree bitsandbytes needed capability 70 (<0.28.0); the plugin's minimum (0.28.0+) was not read."""
    path = str(b.bnb_nf4_fixture().write(tmp_path / "bnb"))
    old, _ = check(path, "vllm==0.24.0", "p40")
    assert old.dimensions[0].status == "unsupported" and "minimum capability: 70" in text(old)
    new, _ = check(path, "vllm==0.28.0", "p40")
    assert (new.dimensions[0].status, new.rule_id) == ("unknown", "bnb-plugin-pre-volta")
    assert new.status == "unsupported"  # the released wheel has no sm6x kernels either
    assert check(path, "vllm==0.33.0", "h100")[0].status == "native"


def test_vllm_gguf_plugin_types_read_at_its_first_release_only(files) -> None:
    """vllm-gguf-plugin 0.0.5 (vLLM 0.24.0) has no NVFP4 kernel; later plugin releases were not read."""
    old, _ = check(files["nvfp4-gguf"], "vllm==0.24.0", "h100")
    assert (old.status, old.rule_id) == ("unsupported", "gguf-types-plugin")
    for version in ("0.28.0", "0.33.0"):
        v, result = check(files["nvfp4-gguf"], f"vllm=={version}", "h100")
        assert (v.status, v.rule_id) == ("unknown", "gguf-types-plugin-later") and result.exit_code == 1
    assert check(files["q8_0-gguf"], "vllm==0.33.0", "h100")[0].dimensions[0].status == "native"


def test_lm_studio_gguf_on_arm_linux(files) -> None:
    """The 2025 docs: Linux x64 only; the 2026-04 docs (LM Studio >= 0.4.9): Linux ARM64 and Windows ARM."""
    old, _ = check(files["q8_0-gguf"], "lm-studio==0.3.4", "cpu-arm")
    assert (old.dimensions[0].status, old.rule_id) == ("unknown", "gguf-cpu-arm")
    new, _ = check(files["q8_0-gguf"], "lm-studio==0.4.9", "cpu-arm")
    assert (new.dimensions[0].status, new.rule_id) == ("native", "gguf-established-types")
    assert cited(new, "c6854fb")


# ------------------------------------------------------------------ unknowns the code settles

def w4a8_fp8(tmp_path, moe_model: bool = False) -> str:
    """A compressed-tensors W4A8-FP8 checkpoint (int4 group-128 weights, FP8 per-token dynamic activations)."""
    w = b.qargs(4, "int", "group", group_size=128)
    a = b.qargs(8, "float", "token", dynamic=True)
    fixture = b._q(b.DEFAULT, b.int_pack_ct, b.ct_config({"group_0": b.scheme(w, a)}, fmt="int-quantized"))
    return str((moe(fixture) if moe_model else fixture).write(tmp_path / f"w4a8-{moe_model}"))


def test_vllm_w4a8_fp8_off_hopper(tmp_path) -> None:
    """0.33.0 compressed_tensors.py:648-653: the W4A8-FP8 scheme only on capability exactly 90."""
    dense = w4a8_fp8(tmp_path)
    assert check(dense, "vllm", "h100")[0].status == "native"
    for gpu in ("b200", "rtx-5090"):
        v, result = check(dense, "vllm", gpu)
        assert (v.status, v.rule_id) == ("unsupported", "int4-w4a8-fp8-blackwell-033") and result.exit_code == 1
        assert "no compressed-tensors compatible scheme" in text(v)
    old, _ = check(dense, "vllm==0.28.0", "b200")
    assert (old.status, old.rule_id) == ("unknown", "int4-w4a8-fp8-blackwell")
    experts, _ = check(w4a8_fp8(tmp_path, moe_model=True), "vllm", "b200")
    assert (experts.status, experts.rule_id) == ("unknown", "int4-w4a8-fp8-moe-blackwell") and "humming" in text(experts)


def test_sglang_has_no_dense_w4a8_fp8_scheme(tmp_path) -> None:
    """0.5.23: no dense compressed-tensors scheme for int4 x FP8 (was `native` on Hopper); experts only."""
    dense = w4a8_fp8(tmp_path)
    for gpu in ("h100", "b200"):
        v, result = check(dense, "sglang", gpu)
        assert (v.status, v.rule_id) == ("unsupported", "int4-w4afp8-dense") and result.exit_code == 1, gpu
    experts = w4a8_fp8(tmp_path, moe_model=True)
    hopper, _ = check(experts, "sglang", "h100")
    assert (hopper.status, hopper.rule_id) == ("unknown", "int4-w4afp8-hopper")
    blackwell, _ = check(experts, "sglang", "b200")
    assert blackwell.status == "unknown" and "cutlass_w4a8_moe_mm_sm90" in text(blackwell)


def test_sglang_rocm_paths(files, tmp_path) -> None:
    """0.5.23: CT WNA16 and CT W8A8-INT8 import their kernels only on CUDA builds; AWQ dequantises with Triton."""
    for gpu in ("mi300x", "mi250x"):
        v, result = check(files["w4a16"], "sglang", gpu)
        assert (v.status, v.rule_id) == ("unsupported", "int4-ct-rocm") and result.exit_code == 1, gpu
        assert "gptq_marlin_repack" in text(v)
        int8, _ = check(str(b.w8a8_int8_ct().write(tmp_path / f"int8-{gpu}")), "sglang", gpu)
        assert (int8.status, int8.rule_id) == ("unsupported", "int8-amd-ct") and "int8_scaled_mm" in text(int8)
    awq, _ = check(files["awq"], "sglang", "mi250x")
    assert (awq.dimensions[0].status, awq.rule_id) == ("fallback", "awq-amd-cdna3-4") and "triton" in text(awq)
    assert check(files["awq"], "sglang", "rx-7900-xtx")[0].status == "unknown"
    assert check(files["w4a16"], "sglang", "h100")[0].status == "native"


def test_transformers_on_pascal_needs_an_older_torch_build(tmp_path) -> None:
    """PyPI torch 2.13.0 (CUDA 13) has no sm6x/sm70 kernels; torch 2.7.1 (CUDA 12.6) has; bnb likewise."""
    path = str(b.bnb_nf4_fixture().write(tmp_path / "bnb"))
    for gpu in ("p40", "v100"):
        v, _ = check(path, "transformers", gpu)
        assert v.dimensions[0].status == "native", gpu
        assert any("torch 2.13.0" in r and "torch 2.7.1" in r for r in v.requires), v.requires
        assert any("cuda 11.8-12.6" in w.lower() for w in v.warnings)
    t4, _ = check(path, "transformers", "t4")
    assert not any("torch 2.13.0" in r for r in t4.requires)


def test_sglang_refuses_torchao_checkpoints(tmp_path) -> None:
    """0.5.23: no 'torchao' in BASE_QUANTIZATION_METHODS; model_config.py raises 'Unknown quantization method'."""
    path = str(b.torchao_fixture().write(tmp_path / "torchao"))
    for gpu in ("h100", "mi300x"):
        v, result = check(path, "sglang", gpu)
        assert (v.status, v.rule_id) == ("unsupported", "torchao-unsupported") and result.exit_code == 1, gpu
        assert "unknown quantization method: torchao" in text(v)
    assert check(path, "vllm", "h100")[0].status != "unsupported"  # vLLM has a torchao method


def test_mlx_loads_compressed_tensors_only_where_a_model_renames_the_weights(files, tmp_path) -> None:
    """mlx-lm 0.32.1 utils.py:309-327 maps the config, :496-516 quantizes only layers with MLX 'scales', :597 is
    strict: weight_packed/weight_scale are renamed only by the deepseek_v3/kimi_k3/mistral4 model files."""
    v, result = check(files["w4a16"], "mlx", "m3-max")
    assert (v.status, v.rule_id) == ("unsupported", "ct-weights-not-renamed") and result.exit_code == 1
    assert "received parameters not in model" in text(v)
    assert check(files["w4a16"], "mlx==0.29.4", "m3-max")[0].rule_id == "not-read"  # read at 0.32.1 only
    deepseek = b.w4a16_ct()
    deepseek.configs["config.json"]["model_type"] = "deepseek_v3"
    ds, _ = check(str(deepseek.write(tmp_path / "ds-w4a16")), "mlx", "m3-max")
    assert (ds.dimensions[0].status, ds.rule_id) == ("unknown", "ct-weights-renamed-models")
    nvfp4 = str(b.nvfp4_ct_fixture().write(tmp_path / "nvfp4-ct"))
    assert check(nvfp4, "mlx", "m3-max")[0].status == "unsupported"
    assert check(nvfp4, "mlx==0.29.4", "m3-max")[0].status == "unknown"  # was native, read at 0.32.1 only
    fp8, _ = check(str(b.fp8_ct_channel().write(tmp_path / "fp8-ct")), "mlx", "m3-max")
    assert (fp8.status, fp8.rule_id) == ("unsupported", "ct-format-refused") and "dequantize to bf16" in text(fp8)
    modelopt, _ = check(str(b.nvfp4_modelopt_fixture().write(tmp_path / "nvfp4-mo")), "mlx", "m3-max")
    assert (modelopt.status, modelopt.rule_id) == ("unknown", "nvfp4-modelopt")
    assert check(files["awq"], "mlx", "m3-max")[0].status == "native"  # AutoAWQ packs are repacked


def test_ollama_runs_gguf_on_data_centre_blackwell(files) -> None:
    """Ollama v0.33.0-rc2 builds its CUDA runners for sm100 (cuda_v12 Linux) and sm100/sm103 PTX (cuda_v13 Linux);
    discovery skips a GPU only when its capability is not compiled in (discover/llama_server.go)."""
    b200, result = check(files["q8_0-gguf"], "ollama", "b200")
    assert (b200.status, b200.rule_id) == ("native", "gguf") and result.exit_code == 0
    assert not any("cuda_v13" in r for r in b200.requires)
    b300, _ = check(files["q8_0-gguf"], "ollama", "b300")
    assert b300.status == "native" and any("cuda_v13 runner on Linux" in r for r in b300.requires)
    assert cited(b300, "CMakePresets.json")
