"""One memory model per engine family, behind one interface (``qcheck.memory.base.EngineFamily``): llama.cpp and
the engines built on it (``qcheck.memory.llamacpp``), the serving engines that size a KV pool from what is left
(vLLM, SGLang, TensorRT-LLM: ``qcheck.memory.servers``), and here transformers and MLX.

The parameters (llama.cpp's ``n_ubatch`` and ``--fit`` margin, vLLM's ``gpu_memory_utilization`` and batch
defaults, SGLang's reserved-memory heuristic ...) come from the engine's ``[memory]`` table in
``matrices/engines/<id>.toml`` at the judged version, with their sources; a family only combines them.
docs/memory.md derives each formula and gives its measured or published error.
"""

from __future__ import annotations

from qcheck.matrix.memory_params import EngineMemory
from qcheck.memory.base import EngineFamily, search_max
from qcheck.memory.device import DeviceMemory
from qcheck.memory.llamacpp import LlamaCppFamily, llamacpp_compute_bytes
from qcheck.memory.records import MIB, Part
from qcheck.memory.servers import SGLangFamily, TensorRTFamily, VLLMFamily
from qcheck.model import ModelShape
from qcheck.request import EngineKnobs

__all__ = ["FAMILIES", "EngineFamily", "family_for", "llamacpp_compute_bytes", "search_max"]


class TransformersFamily(EngineFamily):
    """transformers: the whole prompt goes through one forward pass."""

    formula = "transformers"

    def overhead(self, ctx: int, batch: int, tp: int = 1) -> list[Part]:
        return [activation_part(self.shape, self.mem, max(1, ctx), batch,
                                "prefill of the whole prompt in one forward pass"), *fixed_parts(self.mem)]


class MLXFamily(EngineFamily):
    """mlx-lm: prefill in steps of ``prefill_step_size`` tokens."""

    formula = "mlx"

    def overhead(self, ctx: int, batch: int, tp: int = 1) -> list[Part]:
        step = int(self.mem.get("max_num_batched_tokens", 2048))
        return [activation_part(self.shape, self.mem, min(step, ctx) * batch, batch,
                                f"prefill step of {step} tokens"), *fixed_parts(self.mem)]


FAMILIES: dict[str, type[EngineFamily]] = {
    cls.formula: cls for cls in (LlamaCppFamily, VLLMFamily, TensorRTFamily, SGLangFamily, TransformersFamily,
                                 MLXFamily)
}


def family_for(mem: EngineMemory, shape: ModelShape, device: DeviceMemory, knobs: EngineKnobs | None = None,
               tp: int = 1) -> EngineFamily:
    """The memory model of an engine's ``[memory]`` table at a version (the loader accepts only formulas listed
    here)."""
    return FAMILIES[mem.formula](mem, shape, device, knobs or EngineKnobs(), tp)


def activation_part(shape: ModelShape, mem: EngineMemory, tokens: int, rows: int, what: str) -> Part:
    """The activations' peak of one forward pass: per token, bytes per hidden unit (and per feed-forward unit
    when the engine's data has that term: gate, up and their product are alive at once) plus the logits rows."""
    per = float(mem.get("activation_bytes_per_token_hidden", 24))
    per_ff = mem.get("activation_bytes_per_token_ff")
    ff = 0
    if per_ff is not None:
        ff = shape.n_ff or 4 * shape.hidden
        if shape.n_expert and shape.n_ff_exp and shape.n_expert_used:
            ff = max(shape.n_ff if shape.n_ff != shape.n_ff_exp else 0, shape.n_expert_used * shape.n_ff_exp)
    size = int(tokens * (shape.hidden * per + ff * float(per_ff or 0)) + rows * shape.vocab * 4)
    ff_text = f" + ff {ff} x {float(per_ff):g} B" if per_ff is not None else ""
    # with the feed-forward term the formula was fitted to measured runs (transformers: docs/memory.md)
    basis = "formula" if per_ff is not None else "estimate"
    return Part("activations", size, basis,
                f"{what}: {tokens} tokens x (hidden {shape.hidden} x {per:g} B{ff_text}) + {rows} logits rows x "
                f"vocab {shape.vocab} x 4 B")


def fixed_parts(mem: EngineMemory) -> list[Part]:
    out = []
    if mem.get("runtime_mib") is not None:
        out.append(Part("runtime", int(mem.get("runtime_mib") * MIB), "estimate",
                        "CUDA context, cuBLAS/NCCL workspaces (non-torch memory; qcheck's estimate)"))
    return out
