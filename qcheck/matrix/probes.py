"""Representative checkpoints, one or more per canonical method, for ``qcheck matrix`` and docs/matrix.md.

The variants themselves are data of each format (``Format.variants`` in ``qcheck/formats/``).

A matrix cell is the verdict for a concrete checkpoint, so each method is shown through typical
variants (FP8 per-tensor vs 128x128 block vs weight-only, NVFP4 W4A4 vs W4A16, GGUF mixes with the
tensor types they really contain), with the field values the classifier produces for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qcheck.formats import REGISTRY
from qcheck.model import Inspection, Quantization


@dataclass(frozen=True)
class Probe:
    method: str
    name: str
    quant: dict[str, Any] = field(default_factory=dict)
    inspection: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.method}: {self.name}"

    def build(self) -> Inspection:
        container = self.inspection.get("container", "gguf" if self.method == "gguf" else "safetensors")
        extra = {k: v for k, v in self.inspection.items() if k != "container"}
        extra.setdefault("dtype", "bfloat16")
        return Inspection(path=f"<{self.label}>", container=container,
                          quantization=Quantization(method=self.method, **self.quant), **extra)


#: every format's variants (``qcheck.formats``), in registry order
PROBES: tuple[Probe, ...] = tuple(Probe(fmt.method, v.name, dict(v.quant), dict(v.inspection))
                                  for fmt in REGISTRY for v in fmt.variants)


def probes_for(method: str | None = None) -> list[Probe]:
    """The probes of one method (all when None); an unknown method yields none."""
    return [p for p in PROBES if method is None or p.method == method]
