"""vLLM's profile run and weight layouts as qcheck builds them from the engine's operations, per release
(qcheck/memory/vllm_profile.py, qcheck/memory/held.py, the [memory] table of matrices/engines/vllm.toml).

Each expected figure is written out from the tensors vLLM allocates (its wheels, named in the table's sources), so a
change to a constant, a release entry or a layout shows up here before it shows up in the validation table."""

from __future__ import annotations

import pytest
from packaging.version import Version

from qcheck.matrix import load_matrix
from qcheck.matrix.memory_params import parse_memory
from qcheck.matrix.schema import MatrixDataError
from qcheck.memory.held import MXFP4_LAYOUTS, TensorSplit, mxfp4_backend, mxfp4_expert_bytes
from qcheck.memory.vllm_profile import ProfileRun, capture_sizes, pow2
from qcheck.model import AttentionLayout, ModelShape

VLLM = load_matrix().engine("vllm").memory
LLAMA_8B = ModelShape(hidden=4096, vocab=128256, n_head=32, n_ff=14336, n_layers=32)
#: GPT-OSS-20B's dimensions: 24 layers of 32 experts of 2880, 4 routed per token
GPT_OSS_20B = ModelShape(hidden=2880, vocab=201088, n_head=64, n_ff=2880, n_layers=24, n_expert=32,
                         n_expert_used=4, n_ff_exp=2880)


def at(version: str):
    return VLLM.at(Version(version))


@pytest.mark.parametrize(("largest", "count"), [(0, 0), (1, 1), (2, 2), (4, 3), (7, 3), (8, 4), (248, 34),
                                                (255, 34), (256, 35), (512, 51)])
def test_capture_sizes_follow_vllms_list(largest, count):
    # 1, 2, 4, then every 8 below 256, then every 16 up to the largest size
    sizes = [s for s in [1, 2, 4, *range(8, 256, 8), *range(256, 513, 16)] if s <= largest]
    assert capture_sizes(largest) == count == len(sizes)


@pytest.mark.parametrize(("version", "per_entry"), [
    ("0.11.0", 2 + 4 + 32),  # BF16 logits, their FP32 copy, torch.sort's values, indices, arange and radix buffers
    ("0.16.0", 2 + 4 + 32),
    ("0.17.0", 2 + 4 + 8),  # the in-place Triton top-k/top-p: probabilities and mask
    ("0.21.0", 2 + 4 + 8),  # FlashInfer
    ("0.33.0", 2 + 4 + 8),
])
def test_sampler_bytes_per_vocabulary_entry_per_release(version, per_entry):
    run = ProfileRun(LLAMA_8B, at(version), tokens=8192, seqs=1024)
    assert run.row_bytes() == per_entry
    buffer = min(pow2(1024), 132) * 128256 * 4 if Version("0.17") <= Version(version) < Version("0.21") else 0
    alive = 8192 * 4096 * 2 + 2 * 1024 * 4096 * 2
    assert run.sampler() == 1024 * 128256 * per_entry + buffer + alive


def test_an_fp32_model_has_no_fp32_copy_of_its_logits():
    run = ProfileRun(LLAMA_8B, at("0.19.0"), tokens=2048, seqs=256, act_bytes=4)
    assert run.row_bytes() == 4 + 8


def test_forward_pass_and_the_peak_for_a_dense_model():
    run = ProfileRun(LLAMA_8B, at("0.19.0"), tokens=8192, seqs=1024)
    # residual, normed input, attention output, MLP output + gate, up, their product, BF16
    assert run.forward() == 8192 * (4 * 4096 + 3 * 14336) * 2
    peak, how = run.peak()
    assert peak == max(run.forward(), run.sampler()) + 32 * 2**20
    assert "sampler run sets the peak" in how and "cuBLAS workspace 32 MiB" in how
    # tensor parallelism splits the MLP, not the hidden states
    assert ProfileRun(LLAMA_8B, at("0.19.0"), 8192, 1024, tp=2).forward() == 8192 * (4 * 4096 + 3 * 7168) * 2


@pytest.mark.parametrize(("version", "kept"), [("0.11.0", False), ("0.14.0", False), ("0.15.0", True),
                                               ("0.19.0", True)])
def test_the_fused_moe_workspace_outlives_the_forward_pass_from_015(version, kept):
    run = ProfileRun(GPT_OSS_20B, at(version), tokens=8192, seqs=1024)
    # TritonExperts.workspace_shapes: M x top_k x max(N/2, K) and M x top_k x max(N, K), N = 2 x 2880, K = 2880
    ws = 8192 * 4 * (2880 + 5760) * 2
    assert run.moe_workspace() == ws
    assert run.forward() == 8192 * 4 * 2880 * 2 + ws  # no dense MLP beside the experts
    without = ProfileRun(GPT_OSS_20B, at(version), 8192, 1024, monolithic_moe=True)
    assert run.sampler() - without.sampler() == (ws if kept else 0)
    assert without.moe_workspace() == 0  # the MXFP4 Triton kernel (matmul_ogs) keeps none


def test_release_entries_change_what_the_code_changed():
    assert at("0.8.5").get("batch_small_gpus") == () and "a100" in at("0.9.0").get("batch_small_gpus")
    assert at("0.9.0").get("context_in_budget") == 1 and not at("0.9.1").get("context_in_budget")
    assert at("0.11.0").get("non_torch_mib") == 140 and at("0.19.0").get("non_torch_mib") == 256
    assert at("0.19.0").get("graphs_subtracted") == 0 and at("0.21.0").get("graphs_subtracted") == 1
    assert at("0.11.0").get("mxfp4_moe_backends")[0] == "hopper:triton-strided"
    assert at("0.19.0").get("mxfp4_moe_backends")[0] == "hopper:triton"


@pytest.mark.parametrize(("arch", "vendor", "backend"), [("hopper", "nvidia", "triton"), ("ampere", "nvidia", "marlin"),
                                                         ("blackwell", "nvidia", "flashinfer-trtllm"),
                                                         ("cdna3", "amd", "rocm"), (None, None, "marlin")])
def test_mxfp4_kernel_per_architecture(arch, vendor, backend):
    assert mxfp4_backend(at("0.19.0").get("mxfp4_moe_backends"), arch, vendor) == backend


def test_mxfp4_expert_bytes_per_kernel_layout():
    """One GPT-OSS-20B MoE layer (32 experts, hidden 2880, width 2880): stored, Marlin-padded, Triton-swizzled."""
    stored = 32 * (3 * 2880 * 2880 // 2 + 3 * 2880 * 2880 // 32 + (2 * 2880 + 2880) * 2)
    assert mxfp4_expert_bytes(32, 2880, 2880, None) == stored
    # Marlin: hidden to 3072 (256), width to 2944 (128), BF16 biases
    h, w = 3072, 2944
    assert mxfp4_expert_bytes(32, 2880, 2880, MXFP4_LAYOUTS["marlin"]) == 32 * (
        3 * w * h // 2 + 3 * w * h // 32 + (2 * w + h) * 2)
    # Triton on Hopper: width to 2880 (already a multiple of 64); values in 64-byte tiles (1440 bytes per row to
    # 1472), scales in 256-row tiles (5760 and 2880 rows to 5888 and 3072), the loaded scales kept, FP32 biases
    w = 2880
    values = 1472 * 5760 + 1472 * 2880
    scales = 5888 * 90 + 3072 * 90
    kept = 3 * 2880 * 2880 // 32
    assert mxfp4_expert_bytes(32, 2880, 2880, MXFP4_LAYOUTS["triton"]) == 32 * (
        values + scales + kept + (2 * w + 2880) * 4)


def test_tensor_parallel_ranks_copy_kv_heads_and_routers():
    """8 KV heads at tp 16: each rank holds one whole head instead of half of one; norms are whole on every rank."""
    lay = AttentionLayout(kv_heads=8, k_dim=128, v_dim=128, full_layers=80)
    shape = ModelShape(hidden=8192, vocab=128256, n_head=64, n_ff=28672, n_layers=80, total_bytes=141_000_000_000,
                       other_bytes=16384, from_tensors=True, attention=lay)
    split = TensorSplit(shape, None)
    copied = int(80 * (128 + 128) * 8192 * 2 * (1 - 8 / 16))
    assert split.on_rank(16) == -(-141_000_000_000 // 16) + int(16384 * (1 - 1 / 16)) + copied
    assert split.on_rank(8) == -(-141_000_000_000 // 8) + int(16384 * (1 - 1 / 8))  # one head each: no copy
    assert split.on_rank(1) == 141_000_000_000


@pytest.mark.parametrize(("key", "value", "check"), [
    ("mxfp4_moe_backends", ["hopper:cutlass-someday"], "bad-value"),
    ("mxfp4_moe_backends", [], "bad-type"),
    ("nvls_gpus", "h100", "bad-type"),
    ("sampler_sort", 2, "bad-value"),
    ("graph_capture_max", 51.2, "bad-type"),
])
def test_the_new_keys_are_validated(key, value, check):
    raw = {"formula": "vllm", "placement": "tensor", key: value, "sources": {"a": {"ref": "r", "version": "1"}}}
    with pytest.raises(MatrixDataError, match=rf"\[{check}\]"):
        parse_memory(raw, "x", "engines/x.toml")
