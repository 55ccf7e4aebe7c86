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
from qcheck.memory.base import EngineFamily, activation_part, fixed_parts, search_max
from qcheck.memory.device import DeviceMemory
from qcheck.memory.llamacpp import LlamaCppFamily, llamacpp_compute_bytes
from qcheck.memory.records import Part
from qcheck.memory.servers import SGLangFamily, TensorRTFamily, VLLMFamily
from qcheck.model import Inspection, ModelShape
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
               tp: int = 1, model: Inspection | None = None) -> EngineFamily:
    """The memory model of an engine's ``[memory]`` table at a version (the loader accepts only formulas listed
    here); ``model`` is the inspection judged (its dtype and quantisation)."""
    return FAMILIES[mem.formula](mem, shape, device, knobs or EngineKnobs(), tp, model)
