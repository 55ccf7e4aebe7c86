"""The KV-cache dtype and parallel-layout dimensions on every engine with data (issue #13).

Each engine's `[kv_cache]` / `[[kv_rule]]` and `[parallel]` tables are exercised through `qcheck check` (in-process,
real checkpoint files through the readers and classifier) on both sides of their GPU and version boundaries, with
the exit code the user gets. The evidence (file and line at the version read) is in each rule's sources.
"""

from __future__ import annotations

import json

import pytest

from qcheck.model import Inspection, Quantization, Verdict
from qcheck.pipeline import run
from qcheck.request import CheckRequest, Deploy, KVCacheTypes, Parallel
from support import builders as b
from support.gguf_helpers import Q, write_gguf

H = 256


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("kvpar")
    out = {"awq": str(b.awq_fixture().write(root / "awq")), "exl2": str(b.exl2_fixture().write(root / "exl2")),
           "exl3": str(b.exl3_fixture().write(root / "exl3"))}
    out["gguf"] = str(write_gguf(root / "model-q8_0.gguf", [
        ("blk.0.attn_q.weight", (H, H), Q.Q8_0), ("output_norm.weight", (H,), Q.F32)])[0])
    fixture = b.fp8_ct_channel()
    fixture.configs["config.json"]["quantization_config"]["kv_cache_scheme"] = {
        "num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}
    out["fp8-kv"] = str(fixture.write(root / "fp8-kv"))
    return out


def kv(path: str, engine: str, gpu: str, dtype: str | None = None) -> tuple[Verdict, int]:
    result = run(CheckRequest(path, [engine], [gpu], deploy=Deploy(kv_cache=KVCacheTypes.parse(dtype))))
    assert len(result.verdicts) == 1
    return result.verdicts[0], result.exit_code


def kv_dim(v: Verdict):
    return next((d for d in v.dimensions if d.dimension == "kv-cache"), None)


def kv_status(path: str, engine: str, gpu: str, dtype: str) -> str:
    judgement = kv_dim(kv(path, engine, gpu, dtype)[0])
    assert judgement is not None, (engine, gpu, dtype)
    return judgement.status


# ------------------------------------------------------------------------------ SGLang 0.5.23

def test_sglang_fp8_kv_by_gpu(files) -> None:
    awq = files["awq"]
    assert kv_status(awq, "sglang", "h100", "fp8_e4m3") == "native"
    v, code = kv(awq, "sglang", "h100", "fp8_e5m2")  # FA3 takes only e4m3: SGLang switches to Triton
    assert kv_dim(v).status == "fallback" and "FlashAttention3 only supports fp8_e4m3" in kv_dim(v).reasons[0]
    assert code == 0
    assert kv_status(awq, "sglang", "b200", "fp8_e5m2") == "native"
    assert kv_status(awq, "sglang", "rtx-3090", "fp8_e4m3") == "fallback"  # no FP8 tensor cores
    assert kv_status(awq, "sglang", "t4", "fp8_e4m3") == "unknown"
    assert kv_status(awq, "sglang", "mi300x", "fp8_e4m3") == "native"
    v, code = kv(awq, "sglang", "cpu", "fp8_e5m2")
    assert kv_dim(v).status == "unsupported" and code == 1
    assert "'--kv-cache-dtype fp8_e5m2 is not supported on CPU.'" in kv_dim(v).reasons[0]


def test_sglang_fp4_and_mxfp8_kv_need_blackwell(files) -> None:
    awq = files["awq"]
    assert kv_status(awq, "sglang", "b200", "nvfp4") == "native"
    assert kv_status(awq, "sglang", "rtx-5090", "nvfp4") == "fallback"  # FP8 prefill workspace on sm120
    v, code = kv(awq, "sglang", "h100", "nvfp4")
    assert kv_dim(v).status == "unsupported" and code == 1
    assert "requires Blackwell SM100 or SM120" in kv_dim(v).reasons[0]
    assert kv_status(awq, "sglang", "mi300x", "nvfp4") == "unsupported"  # 'KV4 is not tested on non-CUDA'
    v, _ = kv(awq, "sglang", "h100", "fp4_mx_block16")
    assert kv_dim(v).status == "fallback" and any("--attention-backend triton" in r for r in v.requires)
    assert kv_status(awq, "sglang", "b200", "mxfp8") == "native"
    assert kv_status(awq, "sglang", "h100", "mxfp8") == "unsupported"
    assert kv_status(awq, "sglang", "rtx-5090", "mxfp8") == "unknown"


def test_sglang_reads_the_checkpoint_fp8_kv_as_fp8_e4m3(files) -> None:
    """SGLang spells FP8 KV fp8_e4m3; a checkpoint's kv_cache_scheme is judged under that spelling."""
    v, _ = kv(files["fp8-kv"], "sglang", "rtx-3090")
    assert kv_dim(v).status == "fallback"
    assert kv_dim(v).reasons[0].startswith("the checkpoint's fp8_e4m3 KV cache: ")
    assert kv_status(files["fp8-kv"], "vllm", "rtx-3090", "auto") == "fallback"  # vLLM keeps its 'fp8'


def test_sglang_versions_older_than_the_read_are_unknown(files) -> None:
    v, code = kv(files["awq"], "sglang==0.4.0", "h100", "fp8_e4m3")
    assert v.status == "unknown" and code == 1


# ------------------------------------------------------------------------------ TensorRT-LLM

def test_tensorrt_llm_kv(files) -> None:
    fp8 = files["fp8-kv"]
    assert kv_status(fp8, "tensorrt-llm", "h100", "fp8") == "native"
    assert kv_status(fp8, "tensorrt-llm", "a100", "fp8") == "fallback"
    assert kv_status(fp8, "tensorrt-llm", "t4", "fp8") == "unknown"
    assert kv_status(fp8, "tensorrt-llm", "b200", "nvfp4") == "unknown"
    v, code = kv(fp8, "tensorrt-llm", "h100", "fp8_e4m3")
    assert kv_dim(v).status == "unsupported" and code == 1
    assert kv_dim(v).reasons[0] == ("TensorRT-LLM does not accept kv_cache_config.dtype fp8_e4m3 "
                                    "(it accepts: auto, fp8, nvfp4)")
    v, _ = kv(fp8, "tensorrt-llm", "a100")  # no flag: the checkpoint's own FP8 KV
    assert kv_dim(v).reasons[0].startswith("the checkpoint's fp8 KV cache: ")


# ------------------------------------------------------------------------------ llama.cpp family, MLX, ExLlama

def test_lm_studio_kv_by_runtime(files) -> None:
    gguf = files["gguf"]
    v, _ = kv(gguf, "lm-studio", "rtx-4090", "q8_0")  # (LM Studio has no architecture data: unknown overall)
    assert kv_dim(v).status == "native" and any("Flash Attention" in r for r in v.requires)
    assert kv_status(gguf, "lm-studio", "rtx-4090", "bf16") == "unsupported"  # not in its schema
    assert kv_status(gguf, "lm-studio", "rtx-4090", "q4") == "unsupported"  # MLX bits: MLX runtime only
    assert kv_status(gguf, "lm-studio", "m3-max", "q4") == "native"
    assert kv_status(gguf, "lm-studio==0.3.4", "rtx-4090", "q8_0") == "unknown"


def test_mlx_kv_bits(files) -> None:
    awq = files["awq"]
    assert kv_status(awq, "mlx", "m3-max", "q4") == "native"
    assert kv_status(awq, "mlx==0.29.0", "m3-max", "q8") == "native"  # mlx-lm 0.27.1 (mlx>=0.29) had --kv-bits
    assert kv_status(awq, "mlx", "cpu", "q4") == "unknown"
    v, code = kv(awq, "mlx", "m3-max", "fp8")
    assert kv_dim(v).status == "unsupported" and code == 1 and "q2, q3, q4, q5, q6, q8" in kv_dim(v).reasons[0]
    assert kv_status(awq, "mlx", "m3-max", "q7") == "unsupported"  # mx.quantize has no 7-bit affine mode


def test_exllama_cache_modes(files) -> None:
    exl2 = files["exl2"]
    assert kv_status(exl2, "exllamav2", "rtx-4090", "q4") == "native"
    assert kv_status(exl2, "exllamav2", "rtx-4090", "fp8") == "native"
    assert kv_status(exl2, "exllamav2", "rtx-4090", "q2") == "unsupported"  # Q4/Q6/Q8 only
    assert kv_status(exl2, "exllamav3", "rtx-4090", "q2") == "native"  # CacheLayer_quant 2-8 bits
    assert kv_status(exl2, "exllamav3==1.4.1", "rtx-4090", "q4") == "unknown"
    assert kv_status(exl2, "exllamav3", "rtx-4090", "fp8") == "unsupported"
    # where the engine itself was not verified, neither is its cache; CDNA has no ExLlamaV3 at all
    assert kv_status(exl2, "exllamav2", "p40", "q4") == "unknown"
    assert kv_status(exl2, "exllamav2", "b200", "q4") == "unknown"
    assert kv_status(exl2, "exllamav3", "v100", "q4") == "unknown"
    assert kv_status(exl2, "exllamav3", "mi300x", "q4") == "unsupported"
    assert kv_status(exl2, "exllamav3", "rx-7900-xtx", "q4") == "native"


def test_transformers_quantized_cache_is_a_fallback(files) -> None:
    v, code = kv(files["awq"], "transformers", "h100", "q4")
    assert kv_dim(v).status == "fallback" and code == 0
    assert any("optimum-quanto" in r for r in v.requires)
    assert kv_status(files["awq"], "transformers", "h100", "fp8") == "fallback"
    assert kv_status(files["awq"], "transformers", "h100", "q5") == "unsupported"  # quanto 2/4, HQQ 1/2/3/4/8


# ------------------------------------------------------------------------------ through the CLI

def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    from qcheck.cli import main

    monkeypatch.delenv("QCHECK_MATRICES", raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["check", *args, "--json"])
    out = capsys.readouterr().out
    return int(exc.value.code or 0), json.loads(out)


def test_kv_and_layout_through_qcheck_check(files, monkeypatch, capsys) -> None:
    code, doc = run_cli(monkeypatch, capsys, files["awq"], "--engine", "sglang", "--gpu", "h100",
                        "--kv-cache-dtype", "nvfp4")
    assert code == 1 and doc["verdicts"][0]["status"] == "unsupported"
    code, doc = run_cli(monkeypatch, capsys, files["awq"], "--engine", "sglang", "--gpu", "b200",
                        "--kv-cache-dtype", "nvfp4")
    assert code == 0 and doc["verdicts"][0]["status"] == "native"
    code, doc = run_cli(monkeypatch, capsys, files["exl2"], "--engine", "exllamav2", "--gpu", "rtx-4090",
                        "--kv-cache-dtype", "q6", "--kernels-only")
    assert code == 0 and [d["status"] for d in doc["verdicts"][0]["dimensions"] if d["dimension"] == "kv-cache"] \
        == ["native"]
    # without --kernels-only the KV type is a deployment setting: exllamav2 has no memory data, so whether it starts
    # is unknown, never "it runs"
    code, doc = run_cli(monkeypatch, capsys, files["exl2"], "--engine", "exllamav2", "--gpu", "rtx-4090",
                        "--kv-cache-dtype", "q6")
    startup = doc["verdicts"][0]["startup"]
    assert code == 1 and startup["outcome"] == "unknown" and "no memory data" in startup["message"]


# ------------------------------------------------------------------------------ parallel layouts

def shaped(method: str, *, heads: int, kv: int, head_dim: int, inter: int, layers: int = 80, moe: bool = False,
           **quant: object) -> Inspection:
    return Inspection(path="m", container="safetensors", dtype="bfloat16", num_attention_heads=heads,
                      num_kv_heads=kv, head_dim=head_dim, hidden_size=heads * head_dim, intermediate_size=inter,
                      num_layers=layers, moe=moe,
                      quantization=Quantization(method=method, **quant))  # type: ignore[arg-type]


def layout(inspection: Inspection, engine: str, gpu: str = "h100", **options: int) -> Verdict:
    from qcheck.matrix.loader import load_matrix
    from qcheck.matrix.resolve import EngineRequest, resolve_one

    m = load_matrix()
    return resolve_one(m, inspection, EngineRequest(m.engine(engine)), m.gpus.lookup(gpu), Deploy(parallel=Parallel(**options)))


def par(v: Verdict):
    return next(d for d in v.dimensions if d.dimension == "parallelism")


FP8_BLOCK = {"weight_bits": 8, "weight_dtype": "float8_e4m3", "activation_dtype": "float8_e4m3",
             "scale_granularity": "block", "block_size": [128, 128], "producer": "modelopt", "config_method": "fp8"}


def test_sglang_enforces_the_same_shape_checks_as_vllm() -> None:
    qwen72 = shaped("fp8", heads=64, kv=8, head_dim=128, inter=29568, **FP8_BLOCK)
    v = layout(qwen72, "sglang", tp=8)
    assert par(v).status == "unsupported" and v.status == "unsupported"
    assert "Weight output_partition_size = 3696 is not divisible by weight quantization block_n = 128." in \
        " ".join(par(v).reasons)
    deepseek_like = shaped("fp8", heads=128, kv=128, head_dim=128, inter=18432, **FP8_BLOCK)
    assert par(layout(deepseek_like, "sglang", tp=8)).status == "native"
    odd_heads = shaped("none", heads=40, kv=8, head_dim=128, inter=13824)
    assert par(layout(odd_heads, "sglang", tp=3)).status == "unsupported"
    assert par(layout(shaped("none", heads=32, kv=8, head_dim=128, inter=14336, layers=4), "sglang", pp=8)).status \
        == "unsupported"
    assert par(layout(shaped("none", heads=32, kv=8, head_dim=128, inter=14336, moe=True), "sglang", ep=4)).status \
        == "native"


def test_llama_cpp_splits_without_divisibility() -> None:
    odd = shaped("gguf", heads=40, kv=8, head_dim=128, inter=13824)
    v = layout(odd, "llama.cpp", "rtx-4090", tp=3)
    assert par(v).status == "native" and par(v).reasons == ["tp 3: llama.cpp checks no shape divisibility at load"]
    assert any("--split-mode tensor" in w for w in v.warnings)
    assert par(layout(odd, "vllm", tp=3)).status == "unsupported"  # the same shape on vLLM
    assert par(layout(odd, "llama.cpp", "rtx-4090", ep=2)).reasons == ["llama.cpp has no expert parallelism (--ep)"]


def test_exllama_and_mlx_layouts() -> None:
    odd_mlp = shaped("exl2", heads=32, kv=8, head_dim=128, inter=11000)
    v = layout(odd_mlp, "exllamav2", "rtx-4090", tp=2)
    assert par(v).status == "unsupported" and "Model intermediate size must be divisible by 128" in par(v).reasons[0]
    assert par(layout(shaped("exl2", heads=40, kv=8, head_dim=128, inter=13824), "exllamav2", "rtx-4090", tp=3)
               ).status == "native"  # heads split unevenly
    assert par(layout(odd_mlp, "exllamav3", "rtx-4090", tp=3)).status == "native"
    few_kv = shaped("mlx", heads=32, kv=2, head_dim=128, inter=14336)
    v = layout(few_kv, "mlx", "m3-ultra", tp=4)  # n_kv_heads //= N: no replication
    assert par(v).status == "unsupported" and "never replicates a KV head" in par(v).reasons[0]
    assert par(layout(few_kv, "vllm", tp=4)).status == "native"  # vLLM replicates the 2 KV heads
    assert par(layout(few_kv, "mlx", "m3-ultra", tp=2)).status == "native"
    assert par(layout(few_kv, "mlx", "m3-ultra", ep=2)).status == "unsupported"


def test_the_matrix_data_names_a_source_for_every_new_table() -> None:
    from qcheck.matrix.loader import load_matrix

    m = load_matrix()
    with_kv = {e.id for e in m.engines.values() if e.kv_cache is not None}
    with_parallel = {e.id for e in m.engines.values() if e.parallel is not None}
    assert {"vllm", "sglang", "tensorrt-llm", "llama.cpp", "ollama", "lm-studio", "mlx", "exllamav2", "exllamav3",
            "transformers"} <= with_kv
    assert {"vllm", "sglang", "llama.cpp", "mlx", "exllamav2", "exllamav3"} <= with_parallel
    for engine_id in with_kv | with_parallel:
        engine = m.engine(engine_id)
        for spec in (engine.kv_cache, engine.parallel):
            if spec is not None:
                assert spec.sources and all(s.version for s in spec.sources), engine_id


# ------------------------------------------------------------------------------ GPUs added in this pass

@pytest.mark.parametrize("name,gpu,arch,cc", [
    ("Jetson AGX Thor", "jetson-thor", "blackwell-thor", "11.0"),
    ("sm110", None, "blackwell-thor", "11.0"),
    ("sm101", None, "blackwell-thor", "10.1"),  # CUDA 12.8/12.9's name for Thor
    ("NVIDIA TITAN V", "titan-v", "volta", "7.0"),
    ("NVIDIA GeForce RTX 2060 SUPER", "rtx-2060", "turing", "7.5"),
    ("NVIDIA GeForce RTX 4060 Ti", "rtx-4060", "ada", "8.9"),
    ("Jetson Orin Nano", "jetson-orin-nano", "ampere", "8.7"),
    ("Intel(R) Arc(TM) A770 Graphics", "arc-a770", "xe-hpg", None),
    ("Intel(R) Arc(TM) B580 Graphics", "arc-b580", "battlemage", None),
    ("Intel(R) Data Center GPU Max 1550", "max-1550", "xe-hpc", None),
    ("A380", "arc-a380", "xe-hpg", None),
])
def test_device_tool_names_of_the_new_gpus(name: str, gpu: str | None, arch: str, cc: str | None) -> None:
    from qcheck.matrix.loader import load_matrix

    target = load_matrix().gpus.lookup(name)
    assert (target.gpu, target.arch.id, target.cc) == (gpu, arch, cc)


def test_titan_v_and_orin_carry_their_own_memory() -> None:
    from qcheck.matrix.loader import load_matrix

    gpus = load_matrix().gpus.gpus
    assert (gpus["titan-v"].memory_gib, gpus["v100"].memory_gib) == (12, 32)
    assert [gpus[g].memory_gib for g in ("jetson-orin", "jetson-orin-nx", "jetson-orin-nano", "jetson-thor")] == \
        [64, 16, 8, 128]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "tensorrt-llm", "llama.cpp", "ollama", "transformers", "mlx",
                                    "exllamav2", "exllamav3"])
def test_thor_is_unknown_until_a_rule_names_it(files, engine: str) -> None:
    """No engine's rules were read for sm110: capability-wide rules (cc >= 10.0 ...) must not call it native."""
    path = {"llama.cpp": files["gguf"], "ollama": files["gguf"], "exllamav2": files["exl2"],
            "exllamav3": files["exl3"]}.get(engine, files["awq"])
    result = run(CheckRequest(path, [engine], ["jetson-thor"]))
    v = result.verdicts[0]
    assert v.status == "unknown" and result.exit_code == 1, (engine, v.status, v.reasons)
    assert run(CheckRequest(path, [engine], ["jetson-thor"], allow_unknown=True)).exit_code == 0
    weights = v.dimensions[0]
    assert weights.dimension == "weights" and weights.status == "unknown", weights


def test_thor_kv_and_explicit_rules() -> None:
    from qcheck.matrix.loader import load_matrix

    thor = load_matrix().gpus.archs["blackwell-thor"]
    assert thor.explicit_rules and not load_matrix().gpus.archs["blackwell"].explicit_rules


def test_vllm_kv_beyond_nvidia(files) -> None:
    awq = files["awq"]
    assert kv_status(awq, "vllm", "mi300x", "fp8") == "native"
    assert kv_status(awq, "vllm", "mi250", "fp8_e5m2") == "fallback"  # no FP8 matrix units on CDNA2
    v, code = kv(awq, "vllm", "mi300x", "nvfp4")
    assert kv_dim(v).status == "unsupported" and code == 1 and "No valid attention backend" in kv_dim(v).reasons[0]
    assert kv_status(awq, "vllm", "cpu-x86", "fp8") == "native"
    assert kv_status(awq, "vllm", "cpu-arm", "fp8") == "unsupported"
    assert kv_status(awq, "vllm==0.28.0", "mi300x", "fp8") == "unknown"  # read at 0.33.0 only


def test_a_quantised_kv_no_rule_speaks_about_is_unknown(files) -> None:
    """An accepted quantised dtype without a rule for the GPU is unknown, not silently accepted."""
    v, code = kv(files["awq"], "vllm", "arc-b580", "fp8_e5m2")  # not in the XPU backend's list, refusal not read
    assert kv_dim(v).status == "unknown" and code == 1
    assert kv_dim(v).reasons[0] == "--kv-cache-dtype fp8_e5m2: no sourced rule for vLLM 0.34.0 with this KV-cache " \
                                   "dtype on battlemage"
    assert kv_status(files["awq"], "vllm", "arc-b580", "fp8") == "fallback"  # XPU Flash Attention, no FP8 units
    assert kv_dim(kv(files["awq"], "vllm", "arc-b580", "bfloat16")[0]) is None  # unquantised: nothing to judge


def test_tensorrt_llm_checks_only_what_was_read() -> None:
    odd_heads = shaped("fp8", heads=40, kv=8, head_dim=128, inter=29568, **FP8_BLOCK)
    v = layout(odd_heads, "tensorrt-llm", tp=3)
    assert par(v).status == "unsupported" and "must be divisible by tensor parallel size (3)" in par(v).reasons[0]
    qwen72 = shaped("fp8", heads=64, kv=8, head_dim=128, inter=29568, **FP8_BLOCK)
    ok = par(layout(qwen72, "tensorrt-llm", tp=8))  # the FP8 block check per rank was not read for TRT-LLM
    assert ok.status == "native" and ok.reasons == ["tp 8: the shapes divide (attention-heads checked)"]
    assert par(layout(qwen72, "vllm", tp=8)).status == "unsupported"


def test_ollama_spreads_layers_only() -> None:
    dense = shaped("gguf", heads=40, kv=8, head_dim=128, inter=13824)
    assert par(layout(dense, "ollama", "rtx-4090", pp=3)).status == "native"
    v = layout(dense, "ollama", "rtx-4090", tp=2)
    assert par(v).status == "unsupported" and par(v).reasons == ["Ollama has no tensor parallelism (--tp)"]


def test_engines_whose_cache_type_is_a_runtime_option_ignore_the_checkpoint_kv(files) -> None:
    """transformers picks QuantizedCache only from generate(cache_implementation=...): a kv_cache_scheme is not it."""
    v, _ = kv(files["fp8-kv"], "transformers", "h100")
    assert kv_dim(v) is None
    assert kv_status(files["fp8-kv"], "transformers", "h100", "fp8") == "fallback"  # asked for: judged
    assert kv_dim(kv(files["fp8-kv"], "vllm", "h100")[0]).status == "native"  # vLLM reads kv_cache_scheme


def test_transformers_splits_unevenly_but_not_experts() -> None:
    odd = shaped("none", heads=40, kv=8, head_dim=128, inter=13824)
    assert par(layout(odd, "transformers", tp=3)).status == "native"  # DTensor shards may be uneven
    moe = shaped("none", heads=32, kv=8, head_dim=128, inter=14336, moe=True)
    moe.num_experts = 60
    v = layout(moe, "transformers", ep=8)
    assert par(v).status == "unsupported"
    assert par(v).reasons == ["Cannot evenly shard 60 experts across 8 expert-parallel ranks."]
    assert par(layout(moe, "transformers", ep=4)).status == "native"
    # vLLM 0.33.0 fused_moe/expert_map_manager.py:68-76 gives the first (experts % ep) ranks one expert more
    assert par(layout(moe, "vllm", ep=8)).status == "native"


def test_llama_cpp_kv_types_hold_back_to_the_oldest_build(files) -> None:
    """b6122 and b8095 (node-llama-cpp bundles) have the same kv_cache_types as b11312, so a type outside them is
    refused at every build. Which pairs the CUDA flash attention runs was read at b6673-b10361 and b11312: b8895
    and b11312 run q4_0-q4_0 natively; b6301 lies before the first build read (b6122 compiled q4_0 only for head
    size 128 and aborted on others), so its pair path is unknown (it was judged native before issue 24)."""
    for version in ("b8895", "b11312"):
        v, _ = kv(files["gguf"], f"llama.cpp=={version}", "rtx-4090", "q4_0")
        assert kv_dim(v).status == "native" and any("-fa" in r for r in v.requires), version
    assert kv_status(files["gguf"], "llama.cpp==b6301", "rtx-4090", "q4_0") == "unknown"
    for version in ("b6301", "b8895", "b11312"):
        assert kv_status(files["gguf"], f"llama.cpp=={version}", "rtx-4090", "q6_k") == "unsupported"


def test_sglang_nvfp4_moe_on_sm120_takes_the_cutlass_runner() -> None:
    nvfp4 = {"weight_bits": 4, "weight_dtype": "fp4_e2m1", "activation_dtype": "fp4_e2m1", "group_size": 16,
             "producer": "modelopt", "config_method": "NVFP4"}
    moe = shaped("nvfp4", heads=32, kv=8, head_dim=128, inter=14336, moe=True, **nvfp4)
    v = layout(moe, "sglang", "rtx-5090")
    assert (v.status, v.rule_id) == ("native", "nvfp4-moe-sm120") and "CUTLASS FP4 MoE" in (v.kernel or "")
    dense = shaped("nvfp4", heads=32, kv=8, head_dim=128, inter=14336, **nvfp4)
    assert layout(dense, "sglang", "rtx-5090").rule_id == "nvfp4-sm120"
    assert layout(moe, "sglang", "b200").rule_id == "nvfp4-sm100"


def test_the_docs_page_shows_every_ruled_kv_dtype_per_architecture() -> None:
    from qcheck.matrix.loader import load_matrix
    from qcheck.matrix.table import column_targets, kv_grid

    m = load_matrix()
    grid = {(label.split()[0], dtype): cells for label, dtype, cells in kv_grid(m, column_targets(m))}
    assert grid[("sglang", "nvfp4")]["blackwell"].status == "native"
    assert grid[("sglang", "nvfp4")]["hopper"].status == "unsupported"
    assert grid[("vllm", "fp8")]["cdna3"].status == "native"
    assert grid[("tensorrt-llm", "fp8")]["cdna3"] is None  # TensorRT-LLM does not run on AMD
    assert all(j is None or j.status in ("unknown", "unsupported")
               for cells in grid.values() for col, j in cells.items() if col == "blackwell-thor")


def test_a_checkpoint_kv_dtype_no_rule_covers_is_unknown_where_the_engine_reads_it(files) -> None:
    v, _ = kv(files["fp8-kv"], "vllm", "gaudi2")  # vLLM reads kv_cache_scheme; Gaudi's FP8 KV was not read
    assert kv_dim(v).status == "unknown"
    assert kv_dim(v).reasons[0].startswith("the checkpoint's fp8 KV cache: no sourced rule for vLLM 0.34.0")
    assert kv_dim(kv(files["fp8-kv"], "transformers", "gaudi2")[0]) is None  # transformers does not read it
