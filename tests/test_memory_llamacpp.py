"""qcheck's llama.cpp memory formula against llama.cpp's own buffer log.

Tiny GGUFs of several architectures (llama GQA/MHA, qwen2 with biases, qwen3 with head_dim != n_embd/n_head,
qwen3moe, gemma3 with sliding-window layers and tied output, gpt-oss with attention sinks, biases and every other
layer sliding), vocabularies and sizes are loaded on the CPU by
llama-cpp-python at several contexts and ubatch sizes; llama.cpp logs its model, KV cache, compute and output
buffers. The stated tolerance (docs/memory.md):

* KV cache and output buffer: exact (arithmetic on the header, padding as llama.cpp pads);
* weights (model buffer, CPU repacking off as on a GPU): within 0.5% + 1 MiB (tensor alignment);
* compute buffer: within COMPUTE_REL of the measured size + COMPUTE_ABS MiB, with and without flash
  attention (the largest error is qwen3-style attention with flash attention at a short context: -28%).

Each load is built as a front end builds its context (tests/memory_gguf.py, llama.cpp's C API): llama-cpp-python's
(one sequence, every ubatch token an output row), llama-server's default at b11312 (4 slots on one KV pool, one
output row per slot: ``-np`` auto) and an explicit ``-np 2`` (two streams), with flash attention on and off.
"""

from __future__ import annotations

import dataclasses

import pytest
from memory_gguf import MIB, Arch, load_buffers, write_model

from qcheck.matrix import load_matrix
from qcheck.memory import llamacpp_compute_bytes
from qcheck.model_shape import shape_from
from qcheck.request import EngineKnobs
from support.memory_helpers import estimate

llama_cpp = pytest.importorskip("llama_cpp")
pytestmark = [pytest.mark.llamacpp]

COMPUTE_REL, COMPUTE_ABS = 0.30, 0.5

ARCHS = [
    Arch("llama", n_embd=128, n_layer=2, n_head=4, n_head_kv=2, n_ff=344, n_vocab=1000),
    Arch("llama", n_embd=256, n_layer=3, n_head=8, n_head_kv=8, n_ff=512, n_vocab=8000),
    Arch("qwen2", n_embd=192, n_layer=2, n_head=6, n_head_kv=2, n_ff=512, n_vocab=4000),
    Arch("qwen3", n_embd=128, n_layer=2, n_head=4, n_head_kv=2, n_ff=384, n_vocab=3000, head_dim=64),
    Arch("qwen3moe", n_embd=128, n_layer=2, n_head=4, n_head_kv=2, n_ff=256, n_vocab=2000, n_expert=8,
         n_expert_used=2, n_ff_exp=64),
    Arch("gemma3", n_embd=128, n_layer=6, n_head=4, n_head_kv=1, n_ff=256, n_vocab=2000, head_dim=64, swa=512,
         tied=True),
    Arch("gpt-oss", n_embd=128, n_layer=4, n_head=8, n_head_kv=2, n_ff=96, n_vocab=2000, head_dim=32, n_expert=8,
         n_expert_used=2, n_ff_exp=96, swa=128),
]
LOADS = [(1024, 512, True), (4096, 512, False), (4096, 128, True), (2000, 256, False), (2048, 2048, True)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("mem")
    return {a.label(): write_model(d / f"{a.label().replace('/', '_')}.gguf", a) for a in ARCHS}


def _predict(path, n_ctx: int, n_ubatch: int, flash_attn: bool = True):
    from qcheck.classify import classify
    from qcheck.readers import load_checkpoint

    ck = load_checkpoint(str(path))
    ins = classify(ck)
    mem = load_matrix().engine("llama.cpp").memory
    # llama-cpp-python's regime: one sequence, every ubatch token an output row (n_outputs_max 0 = n_batch)
    mem = dataclasses.replace(mem, params={**mem.params, "n_ubatch": n_ubatch, "flash_attn": int(flash_attn),
                                           "n_seq": 1, "kv_unified": 0, "server_output_rows": 0})
    # the Inspection's own shape record (what classify read from the headers): the path every command takes
    est = estimate(ins, context=n_ctx, engine="llama.cpp", engine_memory=mem, device="RAM")
    parts = {p.name: p.bytes for p in est.parts}
    return est, parts, ins, ck


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a.label())
@pytest.mark.parametrize(("n_ctx", "n_ubatch", "flash_attn"), LOADS)
def test_formula_matches_llamacpp_buffers(models, arch, n_ctx, n_ubatch, flash_attn):
    path = models[arch.label()]
    measured = load_buffers(path, n_ctx=n_ctx, n_ubatch=n_ubatch, n_batch=max(n_ubatch, 512), flash_attn=flash_attn)
    assert measured.kv > 0 and measured.compute > 0, measured.log[-2000:]
    est, parts, _, _ = _predict(path, n_ctx, n_ubatch, flash_attn)
    assert est.kv_cache_bytes / MIB == pytest.approx(measured.kv, abs=0.01)
    assert parts["output buffer"] / MIB == pytest.approx(measured.output, abs=0.01)
    assert est.weights_bytes / MIB == pytest.approx(measured.model, rel=0.005, abs=1.0)
    got = parts["compute buffer"] / MIB
    assert abs(got - measured.compute) <= COMPUTE_REL * measured.compute + COMPUTE_ABS, \
        f"compute buffer: formula {got:.2f} MiB, llama.cpp {measured.compute:.2f} MiB"


def test_compute_buffer_grows_with_ubatch_and_the_formula_follows(models):
    path = models[ARCHS[1].label()]
    small = load_buffers(path, n_ctx=2048, n_ubatch=64, flash_attn=True).compute
    large = load_buffers(path, n_ctx=2048, n_ubatch=512, flash_attn=True).compute
    assert large > small * 2
    ins = _predict(path, 2048, 64)[2]
    shape = ins.shape
    assert llamacpp_compute_bytes(shape, 2048, 512) > 2 * llamacpp_compute_bytes(shape, 2048, 64)


def test_shape_reads_per_layer_and_expert_bytes(models):
    path = models[ARCHS[4].label()]
    _, _, ins, ck = _predict(path, 1024, 512)
    shape = ins.shape
    assert shape == shape_from(ins, gguf_metadata=ck.metadata, tensors=ck.tensors)
    assert shape.from_tensors and shape.n_layers == 2 and shape.moe
    expert = 3 * 8 * 64 * 128 * 2  # gate, up, down exps x 8 experts x 64 x 128 x F16
    assert shape.expert_bytes == [expert, expert]
    # one token reads 2 of the 8 experts: 6/8 of the expert bytes are not read
    assert shape.total_bytes - shape.active_bytes_per_token() == pytest.approx(
        shape.embed_bytes + 2 * expert * 6 / 8, abs=2)


def _predict_server(path, ctx: int, knobs: EngineKnobs):
    """qcheck's estimate with llama-server's defaults at b11312 (4 slots on one KV pool, one output row per slot)."""
    from qcheck.classify import classify
    from qcheck.readers import load_checkpoint

    ins = classify(load_checkpoint(str(path)))
    est = estimate(ins, context=ctx, engine="llama.cpp", device="RAM", knobs=knobs)
    return est, {p.name: p.bytes for p in est.parts}


SERVER_LOADS = [(4096, True), (4096, False)]


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a.label())
@pytest.mark.parametrize(("n_ctx", "flash_attn"), SERVER_LOADS)
def test_llama_server_defaults_match_llamacpp_buffers(models, arch, n_ctx, flash_attn):
    """llama-server with no -np: 4 slots sharing one pool of n_ctx cells (a sliding-window cache of n_swa x 4 +
    n_ubatch), one output row per slot (n_outputs_max = 4): the context as llama-server builds it."""
    path = models[arch.label()]
    measured = load_buffers(path, n_ctx=n_ctx, n_ubatch=512, flash_attn=flash_attn, n_seq=4, kv_unified=True,
                            n_outputs_max=4)
    est, parts = _predict_server(path, n_ctx, EngineKnobs(flash_attn=flash_attn))
    assert est.kv_cache_bytes / MIB == pytest.approx(measured.kv, abs=0.01)
    assert parts["output buffer"] / MIB == pytest.approx(measured.output, abs=0.01)
    got = parts["compute buffer"] / MIB
    assert abs(got - measured.compute) <= COMPUTE_REL * measured.compute + COMPUTE_ABS, \
        f"compute buffer: formula {got:.2f} MiB, llama.cpp {measured.compute:.2f} MiB"


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a.label())
@pytest.mark.parametrize("flash_attn", [True, False])
def test_explicit_np_splits_the_context_into_streams(models, arch, flash_attn):
    """-np 2 without -kvu: -c holds both streams (n_ctx / 2 cells each, each with its own window cache), and the
    graph attends over one stream."""
    path = models[arch.label()]
    measured = load_buffers(path, n_ctx=2 * 2048, n_ubatch=512, flash_attn=flash_attn, n_seq=2, n_outputs_max=2)
    est, parts = _predict_server(path, 2048, EngineKnobs(flash_attn=flash_attn, n_parallel=2))
    assert est.kv_cache_bytes / MIB == pytest.approx(measured.kv, abs=0.01)
    assert parts["output buffer"] / MIB == pytest.approx(measured.output, abs=0.01)
    got = parts["compute buffer"] / MIB
    assert abs(got - measured.compute) <= COMPUTE_REL * measured.compute + COMPUTE_ABS, \
        f"compute buffer: formula {got:.2f} MiB, llama.cpp {measured.compute:.2f} MiB"


def test_llama_server_reserves_fewer_output_rows_than_the_library(tmp_path):
    """A 32,000-entry vocabulary: llama-cpp-python (every ubatch token an output row) reserves the logits of 512
    rows; llama-server since b9460 (one row per slot) does not, and its compute buffer is several times smaller.
    Both measured, both predicted: the server build (b11312) and a build before b9460."""
    arch = Arch("llama", n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=512, n_vocab=32000)
    path = write_model(tmp_path / "wide-vocab.gguf", arch)
    library = load_buffers(path, n_ctx=2048, n_ubatch=512, flash_attn=True)
    server = load_buffers(path, n_ctx=2048, n_ubatch=512, flash_attn=True, n_seq=4, kv_unified=True, n_outputs_max=4)
    assert library.compute > 4 * server.compute
    _, new = _predict_server(path, 2048, EngineKnobs(flash_attn=True))
    old = _predict(path, 2048, 512, True)[1]
    for got, want in ((new["compute buffer"], server.compute), (old["compute buffer"], library.compute)):
        assert abs(got / MIB - want) <= COMPUTE_REL * want + COMPUTE_ABS, (got / MIB, want)


#: GPT-OSS's attention and MoE shapes (2880 hidden, 64 x 64 query heads, 8 KV heads, 4 experts of 2880 routed per
#: token, a 128-token window on every other layer), experts in MXFP4 as the published GGUFs hold them; two layers (one
#: sliding, one full) and a small vocabulary keep the file at 175 MB: the compute buffer depends on neither
GPT_OSS_SHAPED = Arch("gpt-oss", n_embd=2880, n_layer=2, n_head=64, n_head_kv=8, n_ff=2880, n_vocab=2000, head_dim=64,
                      n_expert=4, n_expert_used=4, n_ff_exp=2880, swa=128, n_ctx_train=131072)


@pytest.fixture(scope="module")
def gpt_oss_shaped(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("oss") / "gpt-oss-shaped.gguf", GPT_OSS_SHAPED, wtype="Q8_0",
                       expert_wtype="MXFP4")


@pytest.mark.parametrize("n_ctx", [4096, 16384, 31744])
def test_gpt_oss_compute_buffer_as_llama_server_builds_it(gpt_oss_shaped, n_ctx):
    """llama-server's defaults (4 slots on one pool, one output row each, no repacking, flash attention): the FFN
    stage holds the 4 routed experts' gate, up and activated product (3 x 4 x 2880), three hidden-sized tensors and
    the attention output (64 x 64) per ubatch token in F32, beside both attention masks (the full one over n_ctx
    cells, the sliding one over 4 x 128 + 512). At 31744 cells llama.cpp logs 124.39 MiB (the figure a user's
    gpt-oss-20b log shows: 124.4); the formula before it counted 4 hidden-sized tensors and no attention output."""
    measured = load_buffers(gpt_oss_shaped, n_ctx=n_ctx, n_ubatch=512, flash_attn=True, n_seq=4, kv_unified=True,
                            n_outputs_max=4)
    est, parts = _predict_server(gpt_oss_shaped, n_ctx, EngineKnobs(flash_attn=True))
    t, mask = 512, (n_ctx * 512 + (4 * 128 + 512) * 512) * 2
    assert parts["compute buffer"] == t * (3 * 4 * 2880 + 3 * 2880 + 64 * 64) * 4 + mask
    assert parts["compute buffer"] / MIB == pytest.approx(measured.compute, abs=0.02)
    # one full layer over n_ctx cells and one sliding layer over 4 x 128 + 512 cells, 8 x 64 K and V in F16
    assert est.kv_cache_bytes == (n_ctx + 4 * 128 + 512) * 8 * 64 * 2 * 2
    assert est.kv_cache_bytes / MIB == pytest.approx(measured.kv, abs=0.01)
    assert parts["output buffer"] / MIB == pytest.approx(measured.output, abs=0.01)
    assert est.weights_bytes / MIB == pytest.approx(measured.model, rel=0.005, abs=1.0)
