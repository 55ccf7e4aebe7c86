"""The engine settings users set are inputs: parsed as the engines parse them (CLI and gate policy alike), and each
changes the estimate the way the engine's own accounting does (docs/memory.md)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from qcheck.errors import UsageError
from qcheck.knobs import KNOBS, parse_knob
from qcheck.matrix import load_matrix
from qcheck.memory import GIB, MIB
from qcheck.model import Inspection, TensorInfo
from qcheck.request import EngineKnobs
from support.memory_helpers import estimate

KNOB = {k.field: k for k in KNOBS}
LLAMA_8B = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
            "intermediate_size": 14336, "torch_dtype": "bfloat16"}
H100 = 79.19  # an "80 GB" H100 as the CUDA driver reports it


def _ins(size: int = 16_060_522_496, container: str = "safetensors", **kw) -> Inspection:
    base = dict(path="m", container=container, size_bytes=size, num_layers=32, hidden_size=4096,
                num_attention_heads=32, num_kv_heads=8, vocab_size=128256, context_length=131072,
                dtype="bfloat16" if container != "gguf" else None)
    base.update(kw)
    return Inspection(**base)


@pytest.mark.parametrize(("field", "raw", "want"), [
    ("kv_cache_memory", "8G", 8 * 2**30), ("kv_cache_memory", "8g", 8 * 10**9), ("kv_cache_memory", "123", 123),
    ("max_num_batched_tokens", "25.6k", 25_600), ("max_num_batched_tokens", "4K", 4096),
    ("flash_attn", "on", True), ("flash_attn", "off", False), ("flash_attn", "auto", None),
    ("flash_attn", True, True), ("fit", "off", False), ("n_gpu_layers", "all", -1), ("n_gpu_layers", "auto", None),
    ("n_gpu_layers", "30", 30), ("gpu_memory_utilization", "0.9", 0.9), ("gpu_memory_utilization", 1, 1.0),
    ("enforce_eager", True, True), ("n_parallel", 2, 2),
])
def test_values_are_parsed_as_the_engines_parse_them(field: str, raw: object, want: object) -> None:
    assert parse_knob(KNOB[field], raw) == want


@pytest.mark.parametrize(("field", "raw"), [
    ("kv_cache_memory", "1.5G"), ("gpu_memory_utilization", "1.5"), ("gpu_memory_utilization", "nan"),
    ("gpu_memory_utilization", "inf"), ("gpu_memory_utilization", "0"), ("flash_attn", "maybe"),
    ("fit", "auto"), ("n_parallel", "two"), ("n_parallel", 2.5), ("enforce_eager", "yes"), ("n_ubatch", True),
])
def test_bad_values_are_usage_errors_naming_the_flag(field: str, raw: object) -> None:
    with pytest.raises(UsageError, match=KNOB[field].flags[0]):
        parse_knob(KNOB[field], raw)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "qcheck", *args], capture_output=True, text=True, timeout=120)


def test_the_cli_flags_reach_the_estimate_and_bad_ones_exit_2(tmp_path) -> None:
    from support.hubserver import gguf_bytes

    path = tmp_path / "m-Q8_0.gguf"
    gguf_bytes(str(path))
    proc = _cli("check", str(path), "-e", "llama.cpp", "-g", "rtx-4090", "-np", "2", "-ub", "256", "-fa", "off",
                "--json")
    assert proc.returncode == 0, proc.stderr
    mem = json.loads(proc.stdout)["verdicts"][0]["memory"]  # any knob asks the memory question
    assert mem is not None
    compute = next(p["how"] for p in mem["parts"] if p["name"] == "compute buffer")
    assert "n_ubatch 256" in compute and "flash attention off" in compute
    assert any("2 slots (-np)" in a for a in mem["assumptions"])
    for bad in (["--gpu-memory-utilization", "1.5"], ["-fa", "sometimes"], ["--kv-cache-memory-bytes", "1.5G"],
                ["-np", "0"]):
        proc = _cli("check", str(path), "-e", "vllm", "-g", "h100", *bad)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr


def test_the_policy_memory_section_takes_the_same_settings(tmp_path) -> None:
    from qcheck.policy import PolicyError, load_policy

    (tmp_path / "m.gguf").write_bytes(b"")
    base = 'models = ["m.gguf"]\n[[targets]]\nengine = ["vllm"]\ngpu = ["h100"]\n[memory]\ncontext = 4096\n'
    good = tmp_path / "good.toml"
    good.write_text(base + 'gpu-memory-utilization = 0.85\nn-gpu-layers = "all"\nflash-attn = true\n'
                           'kv-cache-memory = "8G"\nenforce-eager = true\n')
    policy = load_policy(good)
    assert policy.memory.knobs == EngineKnobs(gpu_memory_utilization=0.85, n_gpu_layers=-1, flash_attn=True,
                                              kv_cache_memory=8 * 2**30, enforce_eager=True)
    request = policy.request_for(policy.models[0], policy.targets[0])
    assert request.deploy.knobs == policy.memory.knobs
    for line, key in (("gpu-memory-utilization = 1.5", "memory.gpu-memory-utilization"),
                      ("gpu-memory-utilization = nan", "memory.gpu-memory-utilization"),
                      ("parallel = 0", "memory.parallel"), ('flash-attn = "sometimes"', "memory.flash-attn"),
                      ("max-num-seqs = [1]", "memory.max-num-seqs"), ("gpu-memory-utilisation = 0.9", "memory")):
        bad = tmp_path / "bad.toml"
        bad.write_text(base + line + "\n")
        with pytest.raises(PolicyError) as err:
            load_policy(bad)
        assert key in str(err.value), str(err.value)


# ------------------------------------------------------------------------------------------------ vLLM
def test_vllm_enforce_eager_and_batch_settings_change_the_overhead() -> None:
    plain = estimate(_ins(), context=8192, config=LLAMA_8B, engine="vllm", gpu_memory_gib=H100)
    eager = estimate(_ins(), context=8192, config=LLAMA_8B, engine="vllm", gpu_memory_gib=H100,
                     knobs=EngineKnobs(enforce_eager=True))
    graphs = next(p.bytes for p in plain.parts if p.name == "CUDA graphs")
    assert "CUDA graphs" not in {p.name for p in eager.parts}
    assert eager.kv_available_bytes - plain.kv_available_bytes == graphs
    mem = load_matrix().engine("vllm").memory
    fewer = estimate(_ins(), context=8192, config=LLAMA_8B, engine="vllm", gpu_memory_gib=H100,
                     knobs=EngineKnobs(max_num_seqs=64))
    act = next(p.bytes for p in fewer.parts if p.name == "activation peak")
    # 64 rows: the forward pass (4 hidden-sized and 3 feed-forward-sized BF16 activations per token) sets the peak
    forward = 8192 * (4 * 4096 + 3 * 14336) * 2
    sampler = 64 * 128256 * 14 + 8192 * 4096 * 2 + 2 * 64 * 4096 * 2
    assert forward > sampler
    assert act == forward + int(mem.get("cublas_workspace_mib")) * 2**20
    roomy = estimate(_ins(), context=8192, config=LLAMA_8B, engine="vllm", gpu_memory_gib=H100,
                     knobs=EngineKnobs(gpu_memory_utilization=0.95))
    assert roomy.usable_bytes == math.ceil(int(H100 * GIB) * 0.95)
    assert roomy.kv_available_bytes - plain.kv_available_bytes == roomy.usable_bytes - plain.usable_bytes


def test_vllm_kv_cache_memory_fixes_the_pool() -> None:
    """--kv-cache-memory-bytes: vLLM allocates that KV cache whatever the context and skips its budget; the context's
    KV must fit in it."""
    pool = 4 * GIB
    est = estimate(_ins(), context=16384, config=LLAMA_8B, engine="vllm", gpu_memory_gib=H100,
                   knobs=EngineKnobs(kv_cache_memory=pool))
    assert est.kv_available_bytes == pool and est.fits is True  # 16384 tokens x 128 KiB = 2 GiB
    assert est.total_bytes == est.weights_bytes + pool + est.activation_bytes + est.fixed_bytes
    assert est.max_context == 32768  # 4 GiB / 128 KiB per token
    too_long = estimate(_ins(), context=65536, config=LLAMA_8B, engine="vllm", gpu_memory_gib=H100,
                        knobs=EngineKnobs(kv_cache_memory=pool))
    assert too_long.fits is False


def test_vllm_033_refuses_a_utilization_above_free_memory_and_034_does_not() -> None:
    """0.33 checks free memory at start against gpu_memory_utilization x total: 1.0 leaves nothing for the CUDA
    context. 0.34's extensible KV cache defaults to 1.0 and measures instead."""
    est = estimate(_ins(), context=8192, config=LLAMA_8B, engine="vllm", gpu_memory_gib=H100, version="0.33.0",
                   knobs=EngineKnobs(gpu_memory_utilization=1.0))
    assert est.fits is False and est.refusal and "vLLM refuses to start" in est.refusal
    new = estimate(_ins(), context=8192, config=LLAMA_8B, engine="vllm", gpu_memory_gib=H100, version="0.34.0")
    assert new.refusal is None and new.fits is True
    act = next(p.bytes for p in new.parts if p.name == "activation peak")
    margin = max(GIB, int(0.75 * act))
    assert new.usable_bytes == int(H100 * GIB) - 625 * MIB - margin
    assert "extensible KV cache" in new.reserve


# ------------------------------------------------------------------------------------------------ SGLang
def test_sglang_mem_fraction_static_heuristic_and_knobs() -> None:
    """SGLang 0.5.23 on an H100 (81,559 MiB in nvidia-smi): reserved 512 + 8192 x 1.5 + 128 + 256 x 2 + 58 prefill
    graph sizes x 8 = 13,904 MiB -> 0.830; the KV pool is that fraction of the memory free before the load."""
    from qcheck.memory.device import device_memory
    from qcheck.memory.estimate import MemoryTarget, estimate_memory
    from qcheck.request import Deploy
    from support.memory_helpers import with_shape

    matrix = load_matrix()
    ins = with_shape(_ins(), config=LLAMA_8B)

    def sglang(**knobs):  # type: ignore[no-untyped-def]
        dev = device_memory(matrix.gpus, "h100", "nvidia", "GPU")
        target = MemoryTarget("sglang", matrix.engine("sglang").memory, "GPU", dev.gib, None, "0.5.23", dev)
        return estimate_memory(ins, Deploy(context=8192, knobs=EngineKnobs(**knobs)), target)

    est = sglang()
    assert any("mem_fraction_static 0.83 = (81,559 - 13,904 reserved MiB)" in a for a in est.assumptions)
    start = int(79.19 * GIB) - 625 * MIB
    assert est.kv_available_bytes == pytest.approx(0.83 * start - est.weights_bytes, abs=2)
    set_fraction = sglang(mem_fraction_static=0.9)
    assert set_fraction.kv_available_bytes == pytest.approx(0.9 * start - est.weights_bytes, abs=2)
    # chunked_prefill_size 2048: 512 + 3072 + 128 + 512 + 42 prefill graph sizes x 8 = 4,560 MiB, but SGLang keeps at
    # least 10 GiB on GPUs above 60 GiB: (81,559 - 10,240) / 81,559 = 0.874
    smaller_chunk = sglang(chunked_prefill_size=2048)
    assert any("mem_fraction_static 0.874 = (81,559 - 10,240 reserved MiB)" in a for a in smaller_chunk.assumptions)


# ------------------------------------------------------------------------------------------------ llama.cpp
def _tensors(layers: int, per: int, embd: int, out: int) -> dict[str, TensorInfo]:
    t = {"token_embd.weight": TensorInfo("token_embd.weight", "Q4_K", (1, 1), nbytes=embd),
         "output.weight": TensorInfo("output.weight", "Q6_K", (1, 1), nbytes=out)}
    for i in range(layers):
        t[f"blk.{i}.attn_q.weight"] = TensorInfo(f"blk.{i}.attn_q.weight", "Q4_K", (1, 1), nbytes=per)
    return t


@pytest.mark.parametrize(("build", "output_first"), [("b11312", True), ("b7347", False)])
def test_a_users_ngl_is_judged_as_the_build_places_it(build: str, output_first: bool) -> None:
    """-ngl 10 on both sides of PR #18148: the output layer plus the last 9 repeating layers (b7698 on), or the last 10
    (up to b7347); --fit keeps no margin when -ngl is set (it aborts), so the plan is held to free memory."""
    layers, per, out = 32, GIB, 2 * GIB  # a 262k-vocabulary output layer is larger than a repeating layer
    ins = _ins(size=layers * per + 2500 * MIB, container="gguf")
    tensors = _tensors(layers, per, embd=500 * MIB, out=out)
    est = estimate(ins, context=8192, config=LLAMA_8B, engine="llama.cpp", gpu_memory_gib=16, tensors=tensors,
                   version=build, knobs=EngineKnobs(n_gpu_layers=10))
    plan = est.offload
    kv_layer = 2 * 8 * 128 * 2 * 8192
    buffers = est.activation_bytes + est.fixed_bytes
    want = (out + 9 * (per + kv_layer) if output_first else 10 * (per + kv_layer)) + buffers
    assert plan.user_set and plan.ngl == 10 and plan.gpu_bytes == want and plan.output_on_gpu is output_first
    assert est.usable_bytes == 16 * GIB - 522 * MIB  # free memory, no --fit margin
    assert est.fits is plan.fits is True
    too_many = estimate(ins, context=8192, config=LLAMA_8B, engine="llama.cpp", gpu_memory_gib=16, tensors=tensors,
                        version=build, knobs=EngineKnobs(n_gpu_layers=20))
    assert too_many.fits is False and "llama.cpp fails to load it" in too_many.offload.summary


def test_fit_lowers_the_context_when_none_is_given() -> None:
    """llama-server with --fit on and no -c: the trained context (131072, 16 GiB of KV) does not fit a 24 GiB GPU
    with 14 GiB of weights, so --fit lowers it (in steps of 256, not below 4096); with --fit off it stays and the
    model does not fit."""
    ins = _ins(size=14 * GIB, container="gguf")
    fitted = estimate(ins, config=LLAMA_8B, engine="llama.cpp", gpu_memory_gib=24)
    assert fitted.fits is True and 4096 <= fitted.context < 131072 and fitted.context % 256 == 0
    assert any("--fit: context lowered from 131072" in a for a in fitted.assumptions)
    assert estimate(ins, context=fitted.context + 256, config=LLAMA_8B, engine="llama.cpp",
                    gpu_memory_gib=24).fits is False
    off = estimate(ins, config=LLAMA_8B, engine="llama.cpp", gpu_memory_gib=24, knobs=EngineKnobs(fit=False))
    assert off.context == 131072 and off.fits is False and off.offload is not None
    assert off.usable_bytes == 24 * GIB - 522 * MIB  # no margin without --fit
    before_fit = estimate(ins, config=LLAMA_8B, engine="llama.cpp", gpu_memory_gib=24, version="b7347")
    assert before_fit.context == 131072  # no --fit in that build


def test_explicit_parallel_slots_split_the_context() -> None:
    """-np 4 (no -kvu): four streams of the context each, where -np auto shares one pool."""
    ins = _ins(size=4 * GIB, container="gguf")
    shared = estimate(ins, context=8192, config=LLAMA_8B, engine="llama.cpp", gpu_memory_gib=24)
    split = estimate(ins, context=8192, config=LLAMA_8B, engine="llama.cpp", gpu_memory_gib=24,
                     knobs=EngineKnobs(n_parallel=4))
    assert split.kv_cache_bytes == 4 * shared.kv_cache_bytes == 4 * 32 * 8192 * 2 * 8 * 128 * 2


def test_no_mmap_says_the_cpu_weights_are_held_in_ram() -> None:
    ins = _ins(size=4 * GIB, container="gguf")
    mapped = estimate(ins, context=4096, config=LLAMA_8B, engine="llama.cpp", gpu_memory_gib=24)
    held = estimate(ins, context=4096, config=LLAMA_8B, engine="llama.cpp", gpu_memory_gib=24,
                    knobs=EngineKnobs(no_mmap=True))
    assert any("memory-mapped" in a for a in mapped.assumptions)
    assert any(a.startswith("--no-mmap: the weights kept on the CPU are read into RAM") for a in held.assumptions)
    assert held.host_bytes == mapped.host_bytes


def test_llama_cpp_on_unified_memory_keeps_the_fit_margin_inside_the_wired_limit() -> None:
    """Metal: llama.cpp sees the GPU's recommended working set (about 75% of RAM) as the device, and --fit keeps
    1 GiB of it free; with --fit off the whole working set."""
    from qcheck.memory import apply_memory
    from qcheck.model import Verdict
    from qcheck.request import Deploy
    from support.memory_helpers import with_shape

    ins = with_shape(_ins(size=4 * GIB, container="gguf"), config=LLAMA_8B)
    out = []
    for knobs in (EngineKnobs(), EngineKnobs(fit=False)):
        v = Verdict(engine="llama.cpp", engine_version="b11312", gpu="m3-max", arch="apple", compute_capability=None,
                    status="native")
        apply_memory([v], ins, Deploy(context=8192, knobs=knobs), load_matrix())
        out.append(v.memory)
    assert out[0].device == "unified" and out[0].usable_bytes == int(128 * GIB * 0.75) - 1024 * MIB
    assert "--fit margin" in out[0].reserve and out[1].usable_bytes == int(128 * GIB * 0.75)
