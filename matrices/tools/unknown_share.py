"""Share of `unknown` cells per engine over the whole matrix (every probe x version x backend x arch).

Run: PYTHONPATH=. python matrices/tools/unknown_share.py  [--newest] [--arch a,b,...] [--models]
The same cells `qcheck matrix --validate` resolves; `--newest` counts only each engine's newest version;
`--arch` restricts the architectures (to compare data versions over the same cells).

The format probes name no model, so they never reach the architecture dimension. `--models` counts instead the
cells of a few widely deployed model architectures (MODELS: a BF16 safetensors upload and a Q4_K_M GGUF of each)
on every engine x version x GPU architecture: whether the engine loads the model at all.
"""

from __future__ import annotations

import sys
from collections import Counter

from qcheck.matrix.loader import load_matrix
from qcheck.matrix.probes import PROBES
from qcheck.matrix.resolve import EngineRequest, resolve_one
from qcheck.matrix.schema import Target
from qcheck.model import Inspection, Quantization

#: (HF class, config model_type, GGUF general.architecture) of widely deployed text models
MODELS: tuple[tuple[str, str, str], ...] = (
    ("LlamaForCausalLM", "llama", "llama"),
    ("Qwen2ForCausalLM", "qwen2", "qwen2"),
    ("Qwen3ForCausalLM", "qwen3", "qwen3"),
    ("MistralForCausalLM", "mistral", "llama"),
    ("Gemma3ForCausalLM", "gemma3_text", "gemma3"),
    ("Phi3ForCausalLM", "phi3", "phi3"),
    ("DeepseekV3ForCausalLM", "deepseek_v3", "deepseek2"),
    ("GptOssForCausalLM", "gpt_oss", "gpt-oss"),
)


def model_inspections() -> list[Inspection]:
    """A BF16 safetensors checkpoint and a Q4_K_M GGUF of every model in MODELS."""
    out = []
    for hf_class, model_type, gguf_arch in MODELS:
        out.append(Inspection(path=f"<{hf_class} bf16>", container="safetensors", architecture=hf_class,
                              model_type=model_type, dtype="bfloat16", quantization=Quantization(method="none")))
        out.append(Inspection(path=f"<{gguf_arch} Q4_K_M>", container="gguf", architecture=gguf_arch,
                              model_type=gguf_arch, dtype="float16", quantization=Quantization(
                                  method="gguf", gguf_file_type="Q4_K_M",
                                  tensor_types={"F32": 65, "Q4_K": 193, "Q6_K": 33})))
    return out


def shares(newest_only: bool = False, archs: set[str] | None = None,
           models: bool = False) -> dict[str, tuple[int, int]]:
    """engine id -> (unknown cells, all cells)."""
    matrix = load_matrix()
    targets = [Target(label=a.id, arch=a, cc=cc) for a in matrix.gpus.archs.values() for cc in (a.ccs or (None,))
               if archs is None or a.id in archs]
    inspections = model_inspections() if models else [probe.build() for probe in PROBES]
    out: dict[str, tuple[int, int]] = {}
    for engine in matrix.engines.values():
        counts: Counter[str] = Counter()
        versions = engine.versions[-1:] if newest_only else engine.versions
        for version in versions:
            request = EngineRequest(engine, version, None)
            for inspection in inspections:
                for target in targets if engine.needs_gpu else [None]:
                    if target is not None and target.vendor not in engine.hardware:
                        continue
                    counts[resolve_one(matrix, inspection, request, target).status] += 1
        out[engine.id] = (counts["unknown"], sum(counts.values()))
    return out


def main(argv: list[str]) -> int:
    archs = None
    if "--arch" in argv:
        archs = set(argv[argv.index("--arch") + 1].split(","))
    table = shares("--newest" in argv, archs, "--models" in argv)
    total_u = sum(u for u, _ in table.values())
    total = sum(n for _, n in table.values())
    for engine, (u, n) in sorted(table.items()):
        print(f"{engine:14} {u:5}/{n:<5} {100 * u / max(n, 1):5.1f}% unknown")
    print(f"{'all':14} {total_u:5}/{total:<5} {100 * total_u / max(total, 1):5.1f}% unknown")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
