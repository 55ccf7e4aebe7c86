"""The attention backend as a dimension (issue #24): which backend vLLM and SGLang pick for the model's attention
type (MHA/GQA, MLA, learned sinks) on each GPU with each KV-cache dtype, and where that backend refuses.

The model's attention type is read from the headers (config ``kv_lora_rank`` -> MLA, ``self_attn.sinks`` tensors
-> sinks) of real header-only checkpoints, and the check goes through the pipeline (``qcheck.pipeline.run`` with a
``CheckRequest``), on both sides of each rule's version boundary and GPU boundary.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qcheck.check import inspect_target
from qcheck.model import Judgement, Verdict
from qcheck.pipeline import run
from qcheck.request import CheckRequest, Deploy, KVCacheTypes
from qcheck.saved_inspection import inspection_from_json
from support import builders as b


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("attn")
    plain = b.bf16_llama()
    mla = b.bf16_llama()
    mla.configs["config.json"].update(kv_lora_rank=512, qk_rope_head_dim=64, q_lora_rank=None)
    sinks = b.bf16_llama()
    for n in range(b.DEFAULT.layers):
        sinks.tensors[f"model.layers.{n}.self_attn.sinks"] = ("BF16", (b.DEFAULT.heads,))
    return {name: str(fx.write(root / name)) for name, fx in (("plain", plain), ("mla", mla), ("sinks", sinks))}


def verdict(path: str, engine: str, gpu: str, kv: str | None = None) -> tuple[Verdict, int]:
    result = run(CheckRequest(path, (engine,), (gpu,), Deploy(kv_cache=KVCacheTypes.parse(kv))))
    return result.verdicts[0], result.exit_code


def attention(path: str, engine: str, gpu: str, kv: str | None = None) -> Judgement | None:
    return next((d for d in verdict(path, engine, gpu, kv)[0].dimensions if d.dimension == "attention"), None)


def test_the_headers_give_the_attention_type(models: dict[str, str]) -> None:
    mla = inspect_target(models["mla"]).shape.attention
    assert (mla.mla_dim, mla.sinks) == (576, False)
    sinks = inspect_target(models["sinks"])
    assert sinks.shape.attention.sinks and sinks.shape.attention.mla_dim is None
    data = json.loads(json.dumps(sinks.to_json()))
    assert inspection_from_json(data).shape.attention.sinks is True  # a saved inspection keeps it
    data["shape"]["attention"]["sinks"] = "yes"
    with pytest.raises(Exception, match="sinks"):
        inspection_from_json(data)


def test_an_mla_model_with_an_fp8_cache_is_refused_on_ampere(models: dict[str, str]) -> None:
    """FlashMLA and FlashInfer MLA need sm90/sm100, so A100 gets TRITON_MLA, which refuses FP8 below sm89. The KV
    dimension alone said fallback (FlashInfer reads an FP8 cache for standard attention on sm80)."""
    v, code = verdict(models["mla"], "vllm", "a100", "fp8")
    assert v.status == "unsupported" and code == 1
    assert v.reasons[0].startswith("attention: MLA, KV cache fp8: vLLM picks TRITON_MLA")
    assert "native FP8 (fp8e4nv) requires SM89+" in " ".join(v.reasons)
    assert next(d for d in v.dimensions if d.dimension == "kv-cache").status == "fallback"
    assert attention(models["plain"], "vllm", "a100", "fp8").status == "native"  # standard attention: FlashInfer
    assert attention(models["mla"], "vllm", "a100").status == "native"  # an unquantised cache: TRITON_MLA runs
    assert attention(models["mla"], "vllm", "l40s", "fp8").status == "native"  # sm89: FP8 in Triton


@pytest.mark.parametrize(("gpu", "kv", "backend"), [
    ("h100", None, "FLASH_ATTN_MLA"), ("h100", "fp8", "FLASHMLA"), ("b200", "fp8", "FLASHINFER_MLA"),
    ("rtx-5090", None, "TRITON_MLA"), ("a100", None, "TRITON_MLA"),
])
def test_which_mla_backend_vllm_picks(models: dict[str, str], gpu: str, kv: str | None, backend: str) -> None:
    judged = attention(models["mla"], "vllm", gpu, kv)
    assert judged is not None and judged.status == "native"
    assert judged.reasons[0].split("vLLM picks ")[1].startswith(backend)


def test_attention_sinks_take_triton_below_hopper(models: dict[str, str]) -> None:
    v, code = verdict(models["sinks"], "vllm", "rtx-3090", "fp8")
    assert v.status == "unsupported" and code == 1
    assert "'FP8 KV cache is not supported by the Triton attention backend" in " ".join(v.reasons)
    assert "TRITON_ATTN" in attention(models["sinks"], "vllm", "rtx-3090").reasons[0]
    assert "FLASH_ATTN (FlashAttention 3" in attention(models["sinks"], "vllm", "h100", "fp8").reasons[0]
    assert attention(models["sinks"], "vllm", "rtx-4090", "fp8").status == "native"  # sm89: Triton FP8


def test_sglang_defaults_per_gpu_and_attention_type(models: dict[str, str]) -> None:
    assert "fa3" in attention(models["plain"], "sglang", "h100").reasons[0]
    assert "trtllm_mha" in attention(models["plain"], "sglang", "b200").reasons[0]
    assert "flashinfer" in attention(models["plain"], "sglang", "rtx-4090").reasons[0]
    assert "triton" in attention(models["sinks"], "sglang", "rtx-4090").reasons[0]
    assert "flashinfer (FlashInfer MLA" in attention(models["mla"], "sglang", "b200").reasons[0]


def test_the_rules_hold_from_the_version_they_were_read_at(models: dict[str, str]) -> None:
    assert attention(models["mla"], "vllm==0.33.0", "a100", "fp8").status == "unsupported"
    assert attention(models["mla"], "vllm==0.28.0", "a100", "fp8") is None  # not read before 0.33.0: no claim


def test_no_attention_facts_no_judgement(tmp_path: Path) -> None:
    """A GGUF on an engine without attention data, and a model no rule covers, are left to the other dimensions."""
    from support.gguf_helpers import Q, write_gguf

    gguf = str(write_gguf(tmp_path / "m.gguf", [("blk.0.attn_q.weight", (64, 64), Q.Q8_0)])[0])
    assert attention(gguf, "llama.cpp", "rtx-4090") is None
    assert attention(str(b.bf16_llama().write(tmp_path / "t4")), "vllm", "t4") is None  # sm75: not read
