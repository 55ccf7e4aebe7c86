"""What an inference engine does to the numbers around a quantised model's weights, reproduced on a transformers
model so a simulated candidate measures what the engine computes: the activations its matrix multiplications
quantise (``activations``), the KV cache it stores and the attention arithmetic over it (``kv``), in the number
formats it uses (``blocks``). ``EmulationRecord`` is what the report says about it, including the effects left out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: engines a simulated candidate can emulate; "weights" is the dequantised weights alone (no engine arithmetic)
SIMULATE_ENGINES = ("auto", "llama.cpp", "vllm", "sglang", "weights")


def engine_for(choice: str, is_gguf: bool) -> str:
    """The engine ``--simulate-engine`` names for a candidate: ``auto`` is llama.cpp for a GGUF file (the engine that
    runs GGUF natively) and vLLM for safetensors checkpoints."""
    if choice == "auto":
        return "llama.cpp" if is_gguf else "vllm"
    return choice


@dataclass
class EmulationRecord:
    """The report's ``simulation`` record of a simulated candidate."""

    engine: str
    activations: str
    kv_cache: dict[str, Any] | None = None
    effects_left_out: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "activations": self.activations, "kv_cache": self.kv_cache,
                "effects_left_out": self.effects_left_out}
