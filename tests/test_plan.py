"""Deployment planning: per-engine memory data, fit in both directions, offload, unified memory, speed."""

from __future__ import annotations

import math

import pytest

from qcheck.matrix import load_matrix
from qcheck.matrix.gpu_perf import parse_perf
from qcheck.matrix.memory_params import parse_memory
from qcheck.matrix.schema import MatrixDataError
from qcheck.memory import GIB, apply_memory
from qcheck.model import Inspection, Quantization, TensorInfo, Verdict
from qcheck.request import Deploy
from support.memory_helpers import estimate, with_shape

LLAMA_8B = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
            "intermediate_size": 14336, "torch_dtype": "bfloat16"}


def _ins(size: int = 4_920_000_000, **kw) -> Inspection:
    base = dict(path="m.gguf", container="gguf", size_bytes=size, num_layers=32, hidden_size=4096,
                num_attention_heads=32, num_kv_heads=8, vocab_size=128256, context_length=131072,
                parameters=8_030_000_000)
    base.update(kw)
    return Inspection(**base)


def _tensors(layers: int, layer_bytes: int, embd: int, out: int, experts: int = 0) -> dict[str, TensorInfo]:
    t = {"token_embd.weight": TensorInfo("token_embd.weight", "Q4_K", (1, 1), nbytes=embd),
         "output.weight": TensorInfo("output.weight", "Q6_K", (1, 1), nbytes=out)}
    for i in range(layers):
        t[f"blk.{i}.attn_q.weight"] = TensorInfo(f"blk.{i}.attn_q.weight", "Q4_K", (1, 1),
                                                 nbytes=layer_bytes - experts)
        if experts:
            t[f"blk.{i}.ffn_up_exps.weight"] = TensorInfo(f"blk.{i}.ffn_up_exps.weight", "Q4_K", (1, 1),
                                                          nbytes=experts)
    return t


def test_every_gpu_engine_with_memory_data_names_its_sources():
    m = load_matrix()
    with_data = {e.id for e in m.engines.values() if e.memory is not None}
    assert {"llama.cpp", "ollama", "lm-studio", "vllm", "sglang", "tensorrt-llm", "transformers", "mlx"} <= with_data
    for eid in with_data:
        assert m.engines[eid].memory.sources and all(s.ref and s.version for s in m.engines[eid].memory.sources)


@pytest.mark.parametrize(("raw", "check"), [
    ({"formula": "vllm", "placement": "tensor"}, "missing-source"),
    ({"formula": "vllm", "placement": "tensor", "gpu_memory_utilisation": 0.9, "sources": {"a": {"ref": "r", "version": "1"}}}, "unknown-key"),
    ({"formula": "vllm", "placement": "tensor", "gpu_memory_utilization": 1.5, "sources": {"a": {"ref": "r", "version": "1"}}}, "bad-value"),
    ({"formula": "tgi", "placement": "tensor", "sources": {"a": {"ref": "r", "version": "1"}}}, "bad-type"),
    ({"formula": "llama.cpp", "placement": "tensor", "n_ubatch": 51.2, "sources": {"a": {"ref": "r", "version": "1"}}}, "bad-type"),
    ({"formula": "ollama", "placement": "tensor", "default_context_by_vram": [[48, 1], [24, 2]], "sources": {"a": {"ref": "r", "version": "1"}}}, "bad-type"),
    ({"formula": "llama.cpp", "placement": "split", "sources": {"a": {"ref": "r", "version": "1"}}}, "bad-type"),
])
def test_memory_tables_are_validated(raw, check):
    with pytest.raises(MatrixDataError, match=rf"\[{check}\]"):
        parse_memory(raw, "x", "engines/x.toml")


def test_gpu_perf_entries_are_validated():
    src = {"bandwidth_gbs": "https://example.com/ds (3.35 TB/s)", "bf16": "https://example.com/ds (989 dense)"}
    ok = {"perf": [{"gpu": "h100", "bandwidth_gbs": 3350, "tflops": {"bf16": 989}, "sources": src}]}
    perf, unified = parse_perf(ok, "gpus.toml", {"h100"}, {"hopper"})
    assert perf["h100"].bandwidth_gbs == 3350 and unified == frozenset()
    assert perf["h100"].source_of("bf16") == "bf16: https://example.com/ds (989 dense)"
    for bad, check in (({"perf": [{"gpu": "h999", "bandwidth_gbs": 1, "sources": src}]}, "unknown-gpu"),
                       ({"perf": [{"gpu": "h100", "bandwidth_gbs": -1, "sources": src}]}, "bad-type"),
                       ({"perf": [{"gpu": "h100", "bandwidth_gbs": 1, "tflops": {"fp3": 1}, "sources": src}]},
                        "unknown-format"),
                       # a figure without a source, a source naming no figure, a source without a URL
                       ({"perf": [{"gpu": "h100", "bandwidth_gbs": 1, "tflops": {"bf16": 1, "fp8": 2},
                                   "sources": src}]}, "missing-source"),
                       ({"perf": [{"gpu": "h100", "bandwidth_gbs": 1, "sources": src}]}, "unknown-key"),
                       ({"perf": [{"gpu": "h100", "bandwidth_gbs": 1, "sources": {"bandwidth_gbs": "a datasheet"}}]},
                        "missing-source"),
                       ({"perf": [{"gpu": "h100", "bandwidth_gbs": 1, "source": "s"}]}, "unknown-key"),
                       ({"unified_memory": {"gpus": ["nope"], "source": "s"}}, "unknown-gpu")):
        with pytest.raises(MatrixDataError, match=rf"\[{check}\]"):
            parse_perf(bad, "gpus.toml", {"h100"}, {"hopper"})


def test_every_shipped_perf_figure_names_the_page_it_was_read_from():
    perf = load_matrix().gpus.perf
    assert len(perf) >= 20
    for gid, p in perf.items():
        figures = {"bandwidth_gbs", *p.tflops}
        assert set(p.sources) == figures, gid
        assert all(p.sources[f].startswith("https://") for f in figures), gid
    # dense, not the sparse figures datasheets print with an asterisk (H100 SXM BF16: 989 dense, 1,979 sparse)
    assert perf["h100"].tflops == {"bf16": 989, "fp8": 1979, "int8": 1979}
    assert "sparse" in perf["h100"].sources["bf16"] and "dense" in perf["h100"].sources["bf16"]
    # no source found: the figure is unknown rather than guessed (A10 tensor figures, L40S INT8)
    assert perf["a10"].tflops == {} and "int8" not in perf["l40s"].tflops


def test_an_engine_without_memory_data_gets_unknown_overhead_not_vllms():
    est = estimate(_ins(), context=8192, config=LLAMA_8B, engine="exllamav2", gpu_memory_gib=24)
    assert est.overhead_known is False and est.activation_bytes == 0 and est.fixed_bytes == 0
    assert est.fits is None and "overhead unknown (exllamav2 has no memory data)" in est.summary()
    # weights + KV alone beyond the GPU: certainly does not fit
    big = estimate(_ins(size=40 * GIB), context=8192, config=LLAMA_8B, engine="exllamav2", gpu_memory_gib=24)
    assert big.fits is False


def test_llamacpp_fit_margin_and_vllm_reservation_are_in_the_memory_line():
    cpp = estimate(_ins(), context=8192, config=LLAMA_8B, engine="llama.cpp", gpu_memory_gib=24)
    # --fit keeps 1 GiB free beside the CUDA context it finds in use
    assert cpp.usable_bytes == 24 * GIB - 522 * 2**20 - 1024 * 2**20
    assert "fits in 22.5 GiB usable (24.0 GiB - 0.51 GiB CUDA context - 1.0 GiB --fit margin)" in cpp.summary()
    # llama-server (b9460 on) reserves one output row per slot (4 with -np auto): the FFN stage sets the compute
    # buffer, 512 x (3 x 14336 + 4 x 4096) x 4 B + the F16 mask over 8192 cells
    compute = next(p for p in cpp.parts if p.name == "compute buffer")
    assert compute.bytes == 512 * (3 * 14336 + 4 * 4096) * 4 + 8192 * 512 * 2 and compute.basis == "formula"
    # before b9460 every ubatch token is an output row: the 266.5 MiB llama.cpp logged for Llama-3-8B at 8k
    old = estimate(_ins(), context=8192, config=LLAMA_8B, engine="llama.cpp", gpu_memory_gib=24, version="b9000")
    compute = next(p for p in old.parts if p.name == "compute buffer")
    assert compute.bytes == 512 * (128256 + 2 * 4096) * 4
    vllm = estimate(_ins(), context=8192, config=LLAMA_8B, engine="vllm", gpu_memory_gib=24)
    assert vllm.usable_bytes == math.ceil(24 * GIB * 0.92) and "gpu_memory_utilization 0.92 x 24.00 GiB" in \
        vllm.summary()
    olla = estimate(_ins(), config=LLAMA_8B, engine="ollama", gpu_memory_gib=16)
    assert olla.context == 4096 and "ollama's default for a GPU of 16 GiB" in " ".join(olla.assumptions)
    assert estimate(_ins(), config=LLAMA_8B, engine="ollama", gpu_memory_gib=40).context == 32768


@pytest.mark.parametrize("engine", ["llama.cpp", "vllm", "sglang", "tensorrt-llm", "transformers"])
def test_max_context_and_max_batch_are_the_edges_of_fitting(engine):
    ins = _ins(size=14 * GIB)
    est = estimate(ins, context=8192, config=LLAMA_8B, engine=engine, gpu_memory_gib=24)
    assert est.fits and est.max_context and est.max_batch
    if est.max_context < 131072:
        assert estimate(ins, context=est.max_context, config=LLAMA_8B, engine=engine, gpu_memory_gib=24).fits
        assert not estimate(ins, context=est.max_context + 1, config=LLAMA_8B, engine=engine,
                                   gpu_memory_gib=24).fits
    assert estimate(ins, context=8192, batch=est.max_batch, config=LLAMA_8B, engine=engine,
                           gpu_memory_gib=24).fits
    assert not estimate(ins, context=8192, batch=est.max_batch + 1, config=LLAMA_8B, engine=engine,
                               gpu_memory_gib=24).fits


def _gpu_bytes(k: int, output_first: bool, *, layers: int, per: int, out: int, kv_layer: int, buffers: int) -> int:
    """GPU bytes of -ngl k, counted as llama.cpp's load_tensors counts at a build (i_gpu_start, act_gpu_layers)."""
    if output_first:  # the output layer, then k - 1 repeating layers
        return (out if k else 0) + min(max(k - 1, 0), layers) * (per + kv_layer) + buffers
    return min(k, layers) * (per + kv_layer) + (out if k > layers else 0) + buffers


@pytest.mark.parametrize(("build", "output_first"), [("b11312", True), ("b7698", True), ("b7347", False),
                                                     ("b6000", False)])
def test_llamacpp_offload_counts_layers_that_fit_beside_the_buffers(build, output_first):
    """-ngl N as the build counts it: since PR #18148 (in b7698, not in b7347) the output layer goes first, then the
    last N-1 repeating layers; before, the last N repeating layers and the output layer only above n_layer."""
    layers, per, out = 32, 1 * GIB, 800 * 2**20
    tensors = _tensors(layers, per, embd=500 * 2**20, out=out)
    ins = _ins(size=layers * per + 1300 * 2**20)
    est = estimate(ins, context=8192, config=LLAMA_8B, engine="llama.cpp", gpu_memory_gib=16,
                   tensors=tensors, version=build)
    assert est.fits is False and est.host_bytes == 500 * 2**20  # token_embd stays in RAM
    off = est.offload
    sizes = dict(layers=layers, per=per, out=out, kv_layer=2 * 8 * 128 * 2 * 8192,  # per layer at 8k, f16
                 buffers=est.activation_bytes + est.fixed_bytes)
    n = off.ngl
    assert _gpu_bytes(n, output_first, **sizes) <= est.usable_bytes < _gpu_bytes(n + 1, output_first, **sizes)
    assert off.gpu_bytes == _gpu_bytes(n, output_first, **sizes)
    assert off.rule == ("output-first" if output_first else "output-last") and off.output_on_gpu is output_first
    assert off.summary.startswith(f"offload {n} of 33 layers: -ngl {n} of 33")
    assert f"does not fit {est.usable_bytes / GIB:.1f} GiB usable" in est.summary()


def test_llamacpp_offload_between_the_builds_fits_both_countings():
    """b7347 < build < b7698: the merge build of PR #18148 is not established, so the plan fits both countings."""
    layers, per, out = 32, 1 * GIB, 800 * 2**20
    tensors = _tensors(layers, per, embd=500 * 2**20, out=out)
    ins = _ins(size=layers * per + 1300 * 2**20)
    est = estimate(ins, context=8192, config=LLAMA_8B, engine="llama.cpp", gpu_memory_gib=16, tensors=tensors,
                   version="b7500")
    off = est.offload
    sizes = dict(layers=layers, per=per, out=out, kv_layer=2 * 8 * 128 * 2 * 8192,
                 buffers=est.activation_bytes + est.fixed_bytes)

    def both(k: int) -> int:
        return max(_gpu_bytes(k, True, **sizes), _gpu_bytes(k, False, **sizes))

    assert off.rule == "either" and off.output_on_gpu is None
    assert off.gpu_bytes == both(off.ngl) <= est.usable_bytes < both(off.ngl + 1)
    assert "(either counting)" in off.summary


def test_moe_offload_keeps_experts_of_the_first_layers_in_ram():
    layers, per, experts = 48, 2 * GIB, int(1.8 * GIB)
    tensors = _tensors(layers, per, embd=300 * 2**20, out=300 * 2**20, experts=experts)
    ins = _ins(size=layers * per + 600 * 2**20, moe=True, num_experts=128, num_experts_used=8, num_layers=48)
    cfg = dict(LLAMA_8B, num_hidden_layers=48)
    est = estimate(ins, context=4096, config=cfg, engine="llama.cpp", gpu_memory_gib=24, tensors=tensors)
    off = est.offload
    assert off.n_cpu_moe is not None and 0 < off.n_cpu_moe <= 48
    assert off.moe_gpu_bytes <= est.usable_bytes
    assert f"--n-cpu-moe {off.n_cpu_moe}" in off.summary
    # one fewer layer's experts in RAM would not fit
    assert off.moe_gpu_bytes + experts > est.usable_bytes


def _verdict(engine: str, gpu: str | None, arch: str, status: str = "native", kernel: str | None = None) -> Verdict:
    return Verdict(engine=engine, engine_version=None, gpu=gpu, arch=arch, compute_capability=None, status=status,
                   kernel=kernel)


def test_cpu_targets_say_in_ram_and_unified_memory_uses_the_wired_limit():
    ins = _ins()
    cpu, mac = _verdict("llama.cpp", "cpu", "x86"), _verdict("mlx", "m3-max", "apple")
    apply_memory([cpu, mac], with_shape(ins, config=LLAMA_8B), Deploy(context=8192), load_matrix())
    assert "GiB in RAM" in cpu.memory.summary() and cpu.memory.device == "RAM"
    assert cpu.memory.host_bytes == 0 and cpu.memory.fits is None
    assert mac.memory.device == "unified" and mac.memory.usable_bytes == int(128 * GIB * 0.75)
    assert "75% of 128.0 GiB unified memory" in mac.memory.summary()


def test_speed_estimate_turns_a_fallback_into_a_number():
    fp8 = Inspection(path="m", container="safetensors", size_bytes=8 * 10**9, parameters=8 * 10**9, num_layers=32,
                     hidden_size=4096, num_attention_heads=32, num_kv_heads=8, vocab_size=128256,
                     quantization=Quantization(method="fp8"))
    native = _verdict("vllm", "l40s", "ada", kernel="CUTLASS FP8 scaled_mm (W8A8)")
    marlin = _verdict("vllm", "l40s", "ada", status="fallback", kernel="Marlin FP8 weight-only (W8A16)")
    apply_memory([native, marlin], with_shape(fp8, config=LLAMA_8B), Deploy(context=4096), load_matrix())
    n, f = native.memory.speed, marlin.memory.speed
    assert n is not None and f is not None
    assert (n.compute_format, f.compute_format) == ("fp8", "bf16")
    # a 4096-token prompt: 2 x 8e9 FLOPs per token for the weights, plus attention: each token's query meets the
    # (4096 + 1) / 2 keys before it on average, QK and AV over 32 heads of 128 + 128, in 32 layers
    flops = 2 * 8e9 + 2 * 32 * (128 + 128) * 32 * (4096 + 1) / 2
    assert n.prefill_tokens_per_s == round(733e12 / flops) and f.prefill_tokens_per_s == round(362e12 / flops)
    assert n.prefill_prompt_tokens == 4096 and n.prefill_seconds == round(4096 / (733e12 / flops), 3)
    kv = 2 * 32 * 8 * 128 * 2 * 4096  # bf16 KV at 4k
    assert n.decode_tokens_per_s == round(864e9 / (8e9 + kv), 1)
    assert "FP8 kernels would allow 2.0x" in f.summary and "estimate" in f.label
    assert marlin.memory.speed.summary.startswith("estimate: decode <= ")
    # every figure used says where it was read; a figure nobody could source is unknown, and said so
    assert f.source.startswith("bandwidth_gbs: https://") and "; bf16: https://" in f.source
    # a ceiling, not a prediction: the engine's own published calibration is stated, not applied
    assert "vLLM single-stream decode" in f.calibration and f.calibration in f.summary
    assert "llama.cpp" not in f.calibration  # vLLM's line never carries llama.cpp's calibration
    gguf = Inspection(path="m.gguf", container="gguf", size_bytes=4 * 10**9, parameters=8 * 10**9, num_layers=32,
                      hidden_size=4096, num_attention_heads=32, num_kv_heads=8, vocab_size=128256,
                      quantization=Quantization(method="gguf"))
    mmq = _verdict("llama.cpp", "l40s", "ada", kernel="MMQ")
    apply_memory([mmq], with_shape(gguf, config=LLAMA_8B), Deploy(context=4096), load_matrix())
    assert mmq.memory.speed.compute_format == "int8" and mmq.memory.speed.prefill_tokens_per_s is None
    assert "prefill: unknown (no sourced INT8 throughput for this GPU)" in mmq.memory.speed.summary


def test_a_chosen_tensor_parallel_size_is_judged_per_gpu():
    l70 = dict(LLAMA_8B, num_hidden_layers=80, hidden_size=8192, num_attention_heads=64)
    ins = _ins(size=141_100_000_000, container="safetensors", num_layers=80, hidden_size=8192,
               num_attention_heads=64)
    one = estimate(ins, context=8192, config=l70, engine="vllm", gpu_memory_gib=80)
    two = estimate(ins, context=8192, config=l70, engine="vllm", gpu_memory_gib=80, tp=2)
    assert one.fits is False and one.gpus_needed == 2
    assert two.fits is True and two.tp == 2 and two.per_gpu_bytes == one.per_gpu_bytes
    assert f"with --tp 2: {two.per_gpu_bytes / GIB:.1f} GiB per GPU; fits in 73.6 GiB usable" in two.summary()
    assert two.max_context and two.max_context > 8192  # at 2 GPUs there is room for more context
    four_small = estimate(ins, context=8192, config=l70, engine="vllm", gpu_memory_gib=24, tp=4)
    assert four_small.fits is False and "does not fit 22.1 GiB usable (gpu_memory_utilization 0.92 x 24.00 GiB) at " \
        "--tp 4" in four_small.summary()


@pytest.mark.parametrize(("engine", "gpu_gib", "kv_heads", "needed"), [
    ("vllm", 80, 8, 2),       # tensor parallel: each rank holds 8/2 KV heads
    ("sglang", 80, 8, 4),     # SGLang reserves >= 10 GiB on GPUs above 60 GiB
    ("vllm", 48, 8, 4),       # 8 KV heads over 4 ranks
    ("vllm", 80, 2, 2),       # 2 KV heads over 2 ranks: one whole head each
    ("llama.cpp", 48, 8, 3),  # a layer split (any count, not a power of two)
])
def test_max_context_is_judged_at_the_gpu_count_the_model_needs(engine, gpu_gib, kv_heads, needed):
    l70 = dict(LLAMA_8B, num_hidden_layers=80, hidden_size=8192, num_attention_heads=64, num_key_value_heads=kv_heads)
    ins = _ins(size=141_100_000_000, container="safetensors", num_layers=80, hidden_size=8192,
               num_attention_heads=64, num_kv_heads=kv_heads)
    est = estimate(ins, context=8192, config=l70, engine=engine, gpu_memory_gib=gpu_gib)
    assert est.fits is False and est.gpus_needed == needed and est.max_context_gpus == needed
    # the same numbers as judging that GPU count directly (--tp N): fit, largest context and batch
    at_n = estimate(ins, context=8192, config=l70, engine=engine, gpu_memory_gib=gpu_gib, tp=needed)
    assert at_n.fits is True and (est.max_context, est.max_batch) == (at_n.max_context, at_n.max_batch)
    assert est.max_context and est.max_context >= 8192
    # and it is the edge: one more token of context would not fit those GPUs
    if est.max_context < 131072:
        over = estimate(ins, context=est.max_context + 1, config=l70, engine=engine, gpu_memory_gib=gpu_gib,
                               tp=needed)
        assert over.fits is False
    # one GPU cannot hold even the weights, so there is no one-GPU max context; the GPU count it needs is said as
    # more than named, never silently (issue 33)
    assert est.max_context_asked_gpus is None
    assert "no context fits one GPU with the whole model on it" in est.summary()
    assert f"; {est.max_context}" in est.summary() and f"with {needed} GPUs (more than named)" in est.summary()


def test_tensor_parallel_max_context_counts_each_ranks_share_of_kv_heads():
    """8 KV heads on 2 ranks: 4 heads per GPU, so the per-GPU KV at the max context is half the whole KV."""
    l70 = dict(LLAMA_8B, num_hidden_layers=80, hidden_size=8192, num_attention_heads=64)
    ins = _ins(size=141_100_000_000, container="safetensors", num_layers=80, hidden_size=8192,
               num_attention_heads=64)
    est = estimate(ins, context=8192, config=l70, engine="vllm", gpu_memory_gib=80)
    assert est.gpus_needed == 2
    c = est.max_context
    kv_whole = 2 * 80 * 8 * 128 * 2 * c  # bf16, all heads
    # the engine's buffers on each of the 2 GPUs (at 8192 tokens: they do not depend on the context)
    overhead = est.per_gpu_bytes - (-(-est.weights_bytes // 2)) - 2 * 80 * 4 * 128 * 2 * 8192
    per_gpu = -(-est.weights_bytes // 2) + kv_whole // 2 + overhead
    assert per_gpu <= est.usable_bytes < per_gpu + 2 * 80 * 4 * 128 * 2  # within one token of a rank's share


def test_moe_offload_names_the_equivalent_override_tensor_pattern():
    import re

    tensors = _tensors(48, 2 * GIB, embd=300 * 2**20, out=300 * 2**20, experts=int(1.8 * GIB))
    ins = _ins(size=48 * 2 * GIB, moe=True, num_experts=128, num_experts_used=8, num_layers=48)
    off = estimate(ins, context=4096, config=dict(LLAMA_8B, num_hidden_layers=48), engine="llama.cpp",
                          gpu_memory_gib=24, tensors=tensors).offload
    pattern, target = off.override_tensor.rsplit("=", 1)
    assert target == "CPU"
    on_cpu = {i for i in range(48) if re.search(pattern, f"blk.{i}.ffn_up_exps.weight")}
    assert on_cpu == set(range(off.n_cpu_moe))  # -ot keeps exactly the --n-cpu-moe layers' experts in RAM
    assert not re.search(pattern, "blk.0.attn_q.weight")


def test_a_directory_of_safetensors_variants_gets_the_which_quant_fits_table(tmp_path):
    import json
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    examples = Path(__file__).resolve().parents[1] / "examples"
    for name in ("tiny-llama-bf16", "tiny-llama-fp8-channel", "tiny-llama-awq"):
        shutil.copytree(examples / name, tmp_path / name)
    (tmp_path / "README.md").write_text("variants\n")
    proc = subprocess.run([sys.executable, "-m", "qcheck", "check", str(tmp_path), "-e", "vllm", "-g", "h100",
                           "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["quants"]
    assert [(r["quant"], r["status"], r["fit"]) for r in rows] == [
        ("awq", "native", "fits"), ("fp8", "native", "fits"), ("BF16", "native", "fits")]  # smallest first
    assert rows[-1]["bits_per_weight"] == 16.0 and all(r["max_context"] == 2048 for r in rows)
    # without a GPU there is nothing to fit: the directory is still not one checkpoint
    proc = subprocess.run([sys.executable, "-m", "qcheck", "check", str(tmp_path), "-e", "together"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no checkpoint here" in proc.stderr


def test_transformers_activations_count_the_feed_forward_width_as_measured():
    """transformers prefills the whole prompt: per token 8 B per hidden unit + 8 B per feed-forward unit (BF16),
    the fit to bench/bench_transformers_memory.py's measured generate() prefills (docs/memory.md)."""
    est = estimate(_ins(container="safetensors", size=16_060_000_000), context=4096, config=LLAMA_8B,
                          engine="transformers", gpu_memory_gib=80)
    [act] = [p for p in est.parts if p.name == "activations"]
    assert act.bytes == 4096 * (4096 * 8 + 14336 * 8) + 128256 * 4
    assert act.basis == "formula" and "ff 14336 x 8 B" in act.how
    # wider feed-forward, more activations at the same hidden size
    wide = estimate(_ins(container="safetensors", size=16_060_000_000), context=4096,
                           config=dict(LLAMA_8B, intermediate_size=28672), engine="transformers", gpu_memory_gib=80)
    assert wide.activation_bytes - est.activation_bytes == 4096 * 14336 * 8


@pytest.mark.parametrize(("versions", "check"), [
    ([{"versions": "<0.21", "gpu_memory_utilization": 0.9, "sources": ["a"]}], None),
    ([{"versions": "nope", "gpu_memory_utilization": 0.9, "sources": ["a"]}], "bad-version"),
    ([{"versions": "<0.21", "gpu_memory_utilization": 0.9, "sources": ["b"]}], "unknown-source"),
    ([{"versions": "<0.21", "sources": ["a"]}], "missing-key"),
    ([{"versions": "<0.21", "formula": "sglang", "sources": ["a"]}], "unknown-key"),
    ([{"versions": "<0.21", "gpu_memory_utilization": 1.5, "sources": ["a"]}], "bad-value"),
    ([{"versions": "<0.21", "ngl_rule": "middle-out", "sources": ["a"]}], "bad-value"),
    ([{"versions": "<0.21", "extensible_kv": 2, "sources": ["a"]}], "bad-value"),
])
def test_memory_version_entries_are_validated_and_applied_in_order(versions, check):
    from packaging.version import Version

    raw = {"formula": "vllm", "placement": "tensor", "gpu_memory_utilization": 0.92, "sources": {"a": {"ref": "r", "version": "1"}},
           "versions": versions}
    if check is not None:
        with pytest.raises(MatrixDataError, match=rf"\[{check}\]"):
            parse_memory(raw, "x", "engines/x.toml")
        return
    mem = parse_memory(raw, "x", "engines/x.toml")
    assert mem.at(Version("0.19.0")).get("gpu_memory_utilization") == 0.9
    assert mem.at(Version("0.21.0")).get("gpu_memory_utilization") == 0.92
    assert mem.at(Version("0.19.0")).version == "0.19.0" and mem.at(None) is mem
