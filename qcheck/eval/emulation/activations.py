"""The activations llama.cpp's CPU kernels multiply a quantised GGUF weight with, applied to a transformers model.

For a matrix multiplication ggml converts the activation row to the weight type's ``vec_dot_type`` before the dot
product (ggml/src/ggml-cpu/ggml-cpu.c ``type_traits_cpu`` :215-410 and ``ggml_compute_forward_mul_mat`` :1278-1360,
llama.cpp b11312): Q8_0 blocks for Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4, NVFP4 (and Q1_0/Q2_0) weights, Q8_1 for Q4_1 and
Q5_1, Q8_K (256 values, float32 scale) for every K-quant, IQ and TQ type, F16 for F16 weights and BF16 for BF16
weights (the x86 llamafile kernels need both operands in that type, llamafile/sgemm.cpp:3893-3973); F32 weights
take F32. The simulation does the same with a forward pre-hook on each Linear layer a quantised GGUF tensor
became, so the simulated candidate computes what llama.cpp computes up to summation order.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from qcheck.eval.emulation import blocks

#: GGUF weight type -> the block type llama.cpp quantises the activations to (None: float32, unchanged)
LLAMA_CPP_ACTIVATION: dict[str, str | None] = {
    "F32": None, "F16": "f16", "BF16": "bf16",
    **{t: "q8_0" for t in ("Q1_0", "Q2_0", "Q4_0", "Q5_0", "Q8_0", "IQ4_NL", "MXFP4", "NVFP4")},
    "Q4_1": "q8_1", "Q5_1": "q8_1",
    **{t: "q8_K" for t in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S",
                           "IQ1_S", "IQ1_M", "IQ4_XS", "TQ1_0", "TQ2_0")},
}


@dataclass
class ActivationHooks:
    """Pre-hooks placed on a model's Linear layers; ``remove()`` takes them off again."""

    handles: list[Any] = field(default_factory=list)
    #: activation type -> Linear layers quantising their input to it
    counts: Counter[str] = field(default_factory=Counter)
    #: quantised GGUF tensors whose matrix multiplication is not a Linear layer here (stacked MoE experts)
    uncovered: list[str] = field(default_factory=list)

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def describe(self) -> str:
        if not self.counts:
            return "float32 (every weight the model multiplies with is F32)"
        parts = ", ".join(f"{kind} before {n} Linear layer(s)" for kind, n in sorted(self.counts.items()))
        return f"quantised as llama.cpp's CPU kernels do: {parts}"


def _hook(kind: str) -> Any:
    def pre_hook(_module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        x = args[0]
        return (blocks.round_to(x, kind).to(x.dtype), *args[1:])

    return pre_hook


def apply_llama_cpp_activations(model: Any, weight_types: dict[str, str]) -> ActivationHooks:
    """Hook every Linear layer whose weight came from a GGUF tensor of a type in ``LLAMA_CPP_ACTIVATION``
    (``weight_types``: parameter name -> GGUF type name, from ``qcheck.eval.gguf_convert``)."""
    import torch

    hooks = ActivationHooks()
    covered: set[str] = set()
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        param = f"{name}.weight"
        kind = LLAMA_CPP_ACTIVATION.get(weight_types.get(param, ""))
        if kind is None:
            continue
        size = blocks.BLOCK_SIZES.get(kind, 1)
        if module.in_features % size:
            continue  # llama.cpp cannot store such a weight in this type either
        hooks.handles.append(module.register_forward_pre_hook(_hook(kind)))
        hooks.counts[kind] += 1
        covered.add(param)
    hooks.uncovered = sorted(p for p, t in weight_types.items()
                             if p not in covered and LLAMA_CPP_ACTIVATION.get(t) is not None
                             and not p.endswith(("embed_tokens.weight", "wte.weight", "word_embeddings.weight")))
    return hooks
