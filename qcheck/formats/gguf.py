"""GGUF (llama.cpp): a container whose tensor types are the format; classified by ``qcheck.classify.gguf``
from the header, simulated whole-file with gguf-py's dequantisers."""

from typing import Any

from qcheck.formats.record import Format, Layout, Ref, Variant


def _gguf(name: str, file_type: str, types: dict[str, int], **inspection: Any) -> Variant:
    return Variant(name, {"producer": "llama.cpp", "gguf_file_type": file_type, "tensor_types": types},
                   {"container": "gguf", "gguf_split_count": 1, **inspection})


FORMAT = Format(
    method="gguf",
    label="GGUF",
    layouts=(Layout("gguf", Ref("qcheck.eval.simulate:gguf_state")),),
    simulated=True,
    nominal_scheme=False,
    variants=(
        _gguf("Q4_K_M (Q4_K + Q6_K + F32)", "Q4_K_M", {"Q4_K": 193, "Q6_K": 33, "F32": 65}),
        _gguf("Q8_0", "Q8_0", {"Q8_0": 226, "F32": 65}),
        _gguf("IQ2_XXS (i-quants)", "IQ2_XXS", {"IQ2_XXS": 160, "Q2_K": 33, "Q4_K": 33, "F32": 65}),
        _gguf("MXFP4 MoE (gpt-oss)", "MXFP4_MOE", {"MXFP4": 72, "Q8_0": 100, "F32": 200}, moe=True),
        _gguf("NVFP4", "NVFP4", {"NVFP4": 196, "BF16": 30, "F32": 65}),
        _gguf("TQ1_0 (ternary)", "TQ1_0", {"TQ1_0": 196, "Q4_K": 30, "F32": 65}),
    ),
)
