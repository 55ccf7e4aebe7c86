"""The KV-cache dimension judges the (K, V) pair per engine, build, backend and GPU (issue #24).

llama.cpp compiles its CUDA flash-attention vector kernels for the pairs in GGML_CUDA_FA_QUANTS only; any other
pair is converted to f16 on every attention call (b11312) or takes flash attention off the GPU (b6673-b10361).
Metal and SYCL need K and V of one type, Vulkan takes any mix, the CPU every pair. Each case goes through
the pipeline every front end calls (``qcheck.pipeline.run`` with a ``CheckRequest``: a real GGUF file through the
readers and classifier) with the exit code the user gets, on both
sides of each rule's build boundary; the engine-knob cases (``-fa on/off``) go through ``resolve_one`` with the
request's ``Deploy``, the object every front end builds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from qcheck.matrix.loader import load_matrix
from qcheck.matrix.resolve import parse_engine_spec, resolve_one
from qcheck.model import Inspection, Judgement, Quantization, Verdict
from qcheck.pipeline import run
from qcheck.request import CheckRequest, Deploy, EngineKnobs, KVCacheTypes
from support.gguf_helpers import Q, write_gguf

H = 256


@pytest.fixture(scope="module")
def gguf(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("kvpairs")
    return str(write_gguf(root / "model-q8_0.gguf", [
        ("blk.0.attn_q.weight", (H, H), Q.Q8_0), ("output_norm.weight", (H,), Q.F32)])[0])


def check(path: str, engine: str, gpu: str, kv: str, *, require_native: bool = False) -> tuple[Verdict, int]:
    result = run(CheckRequest(path, (engine,), (gpu,), Deploy(kv_cache=KVCacheTypes.parse(kv)),
                              require_native=require_native))
    assert len(result.verdicts) == 1
    return result.verdicts[0], result.exit_code


def kv_dim(v: Verdict) -> Judgement:
    found = next((d for d in v.dimensions if d.dimension == "kv-cache"), None)
    assert found is not None, v.dimensions
    return found


def status(path: str, engine: str, gpu: str, kv: str) -> str:
    return kv_dim(check(path, engine, gpu, kv)[0]).status


def judge(engine: str, gpu: str, kv: KVCacheTypes, knobs: EngineKnobs | None = None) -> Judgement:
    m = load_matrix()
    insp = Inspection(path="m.gguf", container="gguf", architecture="llama", quantization=Quantization(
        method="gguf", gguf_file_type="Q8_0", tensor_types={"Q8_0": 1, "F32": 1}))
    v = resolve_one(m, insp, parse_engine_spec(engine, m), m.gpus.lookup(gpu),
                    Deploy(kv_cache=kv, knobs=knobs or EngineKnobs()))
    return kv_dim(v)


# ------------------------------------------------------------------ llama.cpp CUDA / ROCm

def test_a_mixed_pair_on_cuda_is_converted_to_f16_at_b11312(gguf) -> None:
    v, code = check(gguf, "llama.cpp", "rtx-4090", "q8_0,q4_0")
    d = kv_dim(v)
    assert d.status == "fallback" and v.status == "fallback" and code == 0
    assert d.reasons[0].startswith("--cache-type-k/--cache-type-v K q8_0, V q4_0: ")
    assert ("'no FlashAttention vector kernel compiled for K/V types q8_0-q4_0, converting K and V to f16 instead "
            "(slow). Add \"q8_0-q4_0\" to GGML_CUDA_FA_QUANTS to compile it.'") in d.reasons[0]
    assert any("GGML_CUDA_FA_QUANTS=all" in w for w in v.warnings)
    assert check(gguf, "llama.cpp", "rtx-4090", "q8_0,q4_0", require_native=True)[1] == 1
    assert any("fattn.cu" in s.ref for s in d.sources)


@pytest.mark.parametrize("kv", ["q5_1", "q4_1", "q5_0", "q4_0,q8_0", "f16,q8_0", "bf16,q4_0"])
def test_types_and_pairs_outside_the_default_fa_quants_fall_back_on_cuda(gguf, kv: str) -> None:
    """The issue's cases: q5_1, q4_1, q5_0 (the same type on both sides) and mixed pairs said NATIVE before."""
    assert status(gguf, "llama.cpp", "rtx-4090", kv) == "fallback"
    assert status(gguf, "llama.cpp", "mi300x", kv) == "fallback"  # the HIP build compiles the same kernels


@pytest.mark.parametrize("kv", ["q8_0", "q4_0", "bf16"])
def test_the_default_compiled_pairs_are_native_on_cuda(gguf, kv: str) -> None:
    v, code = check(gguf, "llama.cpp", "rtx-4090", kv)
    assert kv_dim(v).status == "native" and code == 0
    assert f"the {kv}-{kv} vector kernel compiled by default" in kv_dim(v).reasons[0]


def test_only_k_given_pairs_it_with_the_default_f16_v() -> None:
    """-ctk q8_0 alone (a common setting) leaves V at f16: q8_0-f16 is not compiled by default."""
    d = judge("llama.cpp", "rtx-4090", KVCacheTypes(k="q8_0"))
    assert d.status == "fallback" and "K q8_0, V f16" in d.reasons[0] and "q8_0-f16" in d.reasons[0]
    assert judge("llama.cpp", "rtx-4090", KVCacheTypes(v="q4_0")).reasons[0].startswith(
        "--cache-type-k/--cache-type-v K f16, V q4_0")


def test_iq4_nl_has_no_cuda_flash_attention(gguf) -> None:
    v, code = check(gguf, "llama.cpp", "rtx-4090", "iq4_nl")
    assert kv_dim(v).status == "unsupported" and code == 1
    assert "'quantized V cache was requested, but this requires Flash Attention'" in kv_dim(v).reasons[0]
    assert status(gguf, "llama.cpp", "rtx-4090", "iq4_nl,f16") == "fallback"  # flash attention off, V plain
    assert status(gguf, "llama.cpp", "rtx-4090", "iq4_nl,q8_0") == "unsupported"
    on = judge("llama.cpp", "rtx-4090", KVCacheTypes("iq4_nl", "iq4_nl"), EngineKnobs(flash_attn=True))
    assert on.status == "fallback" and "runs on the CPU" in on.reasons[0]


def test_the_fa_setting_decides_what_a_quantised_cache_does() -> None:
    off = judge("llama.cpp", "rtx-4090", KVCacheTypes("q8_0", "q8_0"), EngineKnobs(flash_attn=False))
    assert off.status == "unsupported" and "'quantized V cache requires flash_attn to be enabled'" in off.reasons[0]
    k_only = judge("llama.cpp", "m3-max", KVCacheTypes("q8_0", "f16"), EngineKnobs(flash_attn=False))
    assert k_only.status == "fallback" and "-fa off" in k_only.reasons[0]
    assert judge("llama.cpp", "rtx-4090", KVCacheTypes("q8_0", "q8_0"), EngineKnobs(flash_attn=True)).status == "native"
    mixed_on = judge("llama.cpp", "m3-max", KVCacheTypes("q8_0", "q4_0"), EngineKnobs(flash_attn=True))
    assert mixed_on.status == "fallback" and "the metal flash attention does not take" in mixed_on.reasons[0]


def test_older_cuda_builds_take_flash_attention_off_for_a_mixed_pair(gguf) -> None:
    """b6673-b10361 (b8895 in the data): K != V gives no CUDA flash-attention kernel, so -fa auto turns it off
    and a quantised V cache is refused; b11312 converts the pair instead."""
    v, code = check(gguf, "llama.cpp==b8895", "rtx-4090", "q8_0,q4_0")
    assert kv_dim(v).status == "unsupported" and code == 1
    assert "'Flash Attention was auto, set to disabled'" in kv_dim(v).reasons[0]


# ------------------------------------------------------------------ llama.cpp Metal, Vulkan, SYCL, CPU

def test_metal_needs_one_type_for_k_and_v(gguf) -> None:
    v, code = check(gguf, "llama.cpp", "m3-max", "q8_0,q4_0")
    assert kv_dim(v).status == "unsupported" and code == 1
    assert "'if (op->src[1]->type != op->src[2]->type) return false'" in kv_dim(v).reasons[0]


def test_vulkan_reads_a_mixed_pair_directly(gguf) -> None:
    v, _ = check(gguf, "llama.cpp:vulkan", "rtx-4090", "q8_0,q4_0")
    assert kv_dim(v).status == "native" and "q8_0 K and q4_0 V" in kv_dim(v).reasons[0]


#: (engine, GPU, --kv-cache-dtype, the KV dimension's status) on both sides of each rule's build boundary
CASES = [
    # CUDA: b6673-b10361 (b8895) take flash attention off the GPU for K != V and q4_1/q5_x; b11312 converts
    ("llama.cpp==b8895", "rtx-4090", "q8_0,f16", "fallback"),
    ("llama.cpp==b8895", "rtx-4090", "q5_1", "unsupported"),
    ("llama.cpp==b8895", "rtx-4090", "q8_0", "native"),
    ("llama.cpp==b11312", "rtx-4090", "q5_1", "fallback"),
    ("llama.cpp==b11000", "rtx-4090", "q8_0,q4_0", "unknown"),  # between b10361 and b11312: not read
    ("llama.cpp==b6301", "rtx-4090", "q8_0,q4_0", "unknown"),  # before b6673: not read
    # Metal: K = V from its list
    ("llama.cpp", "m3-max", "q5_1", "native"),
    ("llama.cpp", "m3-max", "q8_0,f16", "fallback"),
    ("llama.cpp", "m3-max", "iq4_nl", "unsupported"),
    ("llama.cpp==b8895", "m3-max", "q8_0,q4_0", "unknown"),  # read at b11312 only
    # Vulkan: any mix of its types, bf16 only with bf16
    ("llama.cpp:vulkan", "rx-7900-xtx", "iq4_nl", "native"),
    ("llama.cpp:vulkan", "rtx-4090", "bf16,q8_0", "unsupported"),
    ("llama.cpp:vulkan", "rtx-4090", "bf16,f16", "fallback"),
    ("llama.cpp:vulkan", "rtx-4090", "bf16", "native"),
    # SYCL: K = V in f32, f16, bf16, q4_0, q8_0
    ("llama.cpp", "arc-a770", "q8_0", "native"),
    ("llama.cpp", "arc-a770", "q4_1", "unsupported"),
    ("llama.cpp", "arc-a770", "q8_0,q4_0", "unsupported"),
    ("llama.cpp", "arc-a770", "q8_0,f16", "fallback"),
    # CPU: every pair, read at b6673, b10361 and b11312
    ("llama.cpp", "cpu", "q8_0,q4_0", "native"),
    ("llama.cpp", "cpu", "iq4_nl", "native"),
    ("llama.cpp", "cpu", "q5_1,bf16", "native"),
    ("llama.cpp==b8895", "cpu", "q8_0,q4_0", "native"),
    ("llama.cpp==b6301", "cpu", "q8_0,q4_0", "unknown"),
]


@pytest.mark.parametrize(("engine", "gpu", "kv", "expected"), CASES)
def test_the_pair_per_backend_and_build(gguf, engine: str, gpu: str, kv: str, expected: str) -> None:
    assert status(gguf, engine, gpu, kv) == expected


# ------------------------------------------------------------------ other engines

def test_an_engine_with_one_setting_cannot_split_k_and_v(gguf) -> None:
    v, code = check(gguf, "ollama", "rtx-4090", "q8_0,q4_0")
    assert kv_dim(v).status == "unsupported" and code == 1
    assert kv_dim(v).reasons == ["Ollama caches K and V in one type (OLLAMA_KV_CACHE_TYPE): K q8_0 with V q4_0 "
                                 "cannot be set"]
    assert status(gguf, "ollama", "rtx-4090", "q8_0") == "native"
    d = judge("vllm", "h100", KVCacheTypes("fp8", "fp8_e5m2"))
    assert d.status == "unsupported" and "one type (--kv-cache-dtype)" in d.reasons[0]
    assert judge("vllm", "h100", KVCacheTypes(k="fp8")).status == "native"  # one setting: it covers both


def test_a_value_the_engine_does_not_take_is_refused_on_its_side(gguf) -> None:
    v, code = check(gguf, "llama.cpp", "rtx-4090", "q8_0,fp8")
    assert code == 1 and kv_dim(v).reasons[0].startswith("llama.cpp does not accept --cache-type-k/--cache-type-v fp8")


def test_exllamav3_sets_k_and_v_bits_apart() -> None:
    assert judge_exl3(KVCacheTypes("q4", "q6")).status == "native"
    d = judge_exl3(KVCacheTypes("q8", "fp16"))
    assert d.status == "unsupported" and "'quantized cache must be from 2 to 8 bits'" in d.reasons[0]
    assert judge_exl3(KVCacheTypes(k="q4")).status == "unsupported"  # V stays fp16: not settable
    assert judge_exl3(KVCacheTypes("q4", "q6"), "exllamav3==1.4.1").status == "unknown"


def judge_exl3(kv: KVCacheTypes, engine: str = "exllamav3") -> Judgement:
    m = load_matrix()
    insp = Inspection(path="m", container="safetensors", dtype="float16", quantization=Quantization(method="exl3"))
    return kv_dim(resolve_one(m, insp, parse_engine_spec(engine, m), m.gpus.lookup("rtx-4090"),
                              Deploy(kv_cache=kv)))


def test_lm_studio_pairs_depend_on_its_unpublished_runtime_build(gguf) -> None:
    assert status(gguf, "lm-studio", "rtx-4090", "q8_0") == "native"
    v, _ = check(gguf, "lm-studio", "rtx-4090", "q8_0,q4_0")
    assert kv_dim(v).status == "unknown" and "GGML_CUDA_FA_QUANTS" in kv_dim(v).reasons[0]
    assert status(gguf, "lm-studio", "rtx-4090", "q5_1") == "unknown"  # said native before issue 24
    assert status(gguf, "lm-studio==0.3.4", "rtx-4090", "q8_0,q4_0") == "unknown"


def test_the_docs_grid_shows_mixed_pairs() -> None:
    from qcheck.matrix.table import column_targets, kv_grid

    m = load_matrix()
    grid = {(label.split()[0], dtype): cells for label, dtype, cells in kv_grid(m, column_targets(m))}
    assert grid[("llama.cpp", "K q8_0, V q4_0")]["ada"].status == "fallback"
    assert grid[("llama.cpp", "K q8_0, V q4_0")]["apple"].status == "unsupported"
    assert grid[("llama.cpp", "q8_0")]["ada"].status == "native"
    assert grid[("exllamav3", "K q4, V q6")]["ada"].status == "native"


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "QCHECK_"))}
    return subprocess.run([sys.executable, "-m", "qcheck", *args], capture_output=True, text=True, env=env, timeout=300)


def test_the_cli_spells_k_and_v_as_llama_cpp_does(gguf) -> None:
    """-ctk/-ctv (llama.cpp's own flags) and --kv-cache-dtype K,V ask the same question."""
    answers = []
    for flags in (["-ctk", "q8_0", "-ctv", "q4_0"], ["--cache-type-k", "q8_0", "--cache-type-v", "q4_0"],
                  ["--kv-cache-dtype", "q8_0,q4_0"]):
        # a kernel question: the bare test GGUF names no heads, so its KV size (and the start-up) is unknown
        proc = cli("check", gguf, "--engine", "llama.cpp", "--gpu", "rtx-4090", *flags, "--kernels-only", "--json")
        assert proc.returncode == 0, proc.stderr
        verdict = json.loads(proc.stdout)["verdicts"][0]
        answers.append([d for d in verdict["dimensions"] if d["dimension"] == "kv-cache"])
    assert answers[0] == answers[1] == answers[2] and answers[0][0]["status"] == "fallback"
    k_only = cli("check", gguf, "--engine", "llama.cpp", "--gpu", "rtx-4090", "-ctk", "q8_0", "--require-native",
                 "--kernels-only")
    assert k_only.returncode == 1 and "K q8_0, V f16" in k_only.stdout
    metal = cli("check", gguf, "--engine", "llama.cpp", "--gpu", "m3-max", "-ctk", "q8_0", "-ctv", "q4_0")
    assert metal.returncode == 1 and "quantized V cache was requested, but this requires Flash Attention" in metal.stdout
