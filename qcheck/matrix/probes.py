"""Representative checkpoints, one or more per canonical method, for ``qcheck matrix`` and docs/matrix.md.

A matrix cell is the verdict for a concrete checkpoint, so each method is shown through typical
variants (FP8 per-tensor vs 128x128 block vs weight-only, NVFP4 W4A4 vs W4A16, GGUF mixes with the
tensor types they really contain), with the field values the classifier produces for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


def _gguf(name: str, file_type: str, types: dict[str, int], **inspection: Any) -> Probe:
    return Probe("gguf", name, {"producer": "llama.cpp", "gguf_file_type": file_type, "tensor_types": types},
                 {"container": "gguf", "gguf_split_count": 1, **inspection})


PROBES: tuple[Probe, ...] = (
    Probe("none", "BF16", {}, {"dtype": "bfloat16"}),
    Probe("none", "FP16", {}, {"dtype": "float16"}),
    _gguf("Q4_K_M (Q4_K + Q6_K + F32)", "Q4_K_M", {"Q4_K": 193, "Q6_K": 33, "F32": 65}),
    _gguf("Q8_0", "Q8_0", {"Q8_0": 226, "F32": 65}),
    _gguf("IQ2_XXS (i-quants)", "IQ2_XXS", {"IQ2_XXS": 160, "Q2_K": 33, "Q4_K": 33, "F32": 65}),
    _gguf("MXFP4 MoE (gpt-oss)", "MXFP4_MOE", {"MXFP4": 72, "Q8_0": 100, "F32": 200}, moe=True),
    _gguf("NVFP4", "NVFP4", {"NVFP4": 196, "BF16": 30, "F32": 65}),
    _gguf("TQ1_0 (ternary)", "TQ1_0", {"TQ1_0": 196, "Q4_K": 30, "F32": 65}),
    Probe("fp8", "W8A8 per-tensor", {"weight_bits": 8, "weight_dtype": "float8_e4m3", "activation_dtype": "float8_e4m3",
                                     "scale_granularity": "per-tensor", "producer": "compressed-tensors",
                                     "config_method": "compressed-tensors", "format": "float-quantized"}),
    Probe("fp8", "W8A8 block 128x128 (DeepSeek/Qwen FP8)",
          {"weight_bits": 8, "weight_dtype": "float8_e4m3", "activation_dtype": "float8_e4m3",
           "scale_granularity": "block", "block_size": [128, 128], "producer": "deepseek", "config_method": "fp8"}),
    Probe("fp8", "W8A16 weight-only", {"weight_bits": 8, "weight_dtype": "float8_e4m3", "activation_dtype": None,
                                       "scale_granularity": "per-channel", "group_size": -1,
                                       "producer": "compressed-tensors", "config_method": "compressed-tensors",
                                       "format": "float-quantized"}),
    Probe("nvfp4", "W4A4 (ModelOpt NVFP4)", {"weight_bits": 4, "weight_dtype": "fp4_e2m1", "activation_dtype": "fp4_e2m1",
                                             "scale_dtype": "float8_e4m3", "group_size": 16, "scale_granularity": "group",
                                             "producer": "modelopt", "config_method": "NVFP4", "format": "NVFP4"}),
    Probe("nvfp4", "W4A16 weight-only", {"weight_bits": 4, "weight_dtype": "fp4_e2m1", "activation_dtype": None,
                                         "scale_dtype": "float8_e4m3", "group_size": 16, "scale_granularity": "group",
                                         "producer": "compressed-tensors", "config_method": "compressed-tensors",
                                         "format": "nvfp4-pack-quantized"}),
    Probe("mxfp4", "GPT-OSS MoE experts", {"weight_bits": 4, "weight_dtype": "fp4_e2m1", "scale_dtype": "e8m0",
                                           "group_size": 32, "scale_granularity": "group", "producer": "gpt-oss",
                                           "config_method": "mxfp4"}, {"moe": True, "model_type": "gpt_oss"}),
    Probe("mxfp4", "dense W4A4 (OCP MX)", {"weight_bits": 4, "weight_dtype": "fp4_e2m1", "activation_dtype": "fp4_e2m1",
                                           "scale_dtype": "e8m0", "group_size": 32, "scale_granularity": "group",
                                           "producer": "quark", "config_method": "quark"}),
    Probe("mxfp6", "OCP MX FP6", {"weight_bits": 6, "weight_dtype": "fp6_e3m2", "activation_dtype": "fp6_e3m2",
                                  "scale_dtype": "e8m0", "group_size": 32, "scale_granularity": "group",
                                  "producer": "quark", "config_method": "quark"}),
    Probe("mxfp8", "MXFP8 W8A8", {"weight_bits": 8, "weight_dtype": "float8_e4m3", "activation_dtype": "float8_e4m3",
                                  "scale_dtype": "e8m0", "group_size": 32, "scale_granularity": "group",
                                  "producer": "modelopt", "config_method": "MXFP8", "format": "MXFP8"}),
    Probe("awq", "4-bit g128 (AutoAWQ GEMM)", {"weight_bits": 4, "weight_dtype": "int4", "group_size": 128,
                                               "scale_granularity": "group", "zero_point": True, "producer": "autoawq",
                                               "config_method": "awq", "format": "gemm"}, {"dtype": "float16"}),
    Probe("gptq", "4-bit g128", {"weight_bits": 4, "weight_dtype": "int4", "group_size": 128, "scale_granularity": "group",
                                 "zero_point": False, "act_order": False, "producer": "gptqmodel",
                                 "config_method": "gptq", "format": "gptq"}, {"dtype": "float16"}),
    Probe("gptq", "8-bit g128", {"weight_bits": 8, "weight_dtype": "int8", "group_size": 128, "scale_granularity": "group",
                                 "zero_point": False, "act_order": False, "producer": "gptqmodel",
                                 "config_method": "gptq", "format": "gptq"}, {"dtype": "float16"}),
    Probe("int8", "W8A8 (SmoothQuant-style)", {"weight_bits": 8, "weight_dtype": "int8", "activation_dtype": "int8",
                                              "scale_granularity": "per-channel", "group_size": -1,
                                              "producer": "compressed-tensors", "config_method": "compressed-tensors",
                                              "format": "int-quantized"}),
    Probe("int4", "W4A16 (compressed-tensors pack-quantized)",
          {"weight_bits": 4, "weight_dtype": "int4", "activation_dtype": None, "group_size": 128,
           "scale_granularity": "group", "producer": "compressed-tensors", "config_method": "compressed-tensors",
           "format": "pack-quantized"}),
    Probe("bitsandbytes", "NF4", {"weight_bits": 4, "weight_dtype": "nf4", "producer": "bitsandbytes",
                                  "config_method": "bitsandbytes", "format": "nf4"}),
    Probe("mlx", "affine 4-bit g64", {"weight_bits": 4, "weight_dtype": "int4", "group_size": 64, "scale_granularity": "group",
                                      "zero_point": True, "producer": "mlx-lm", "config_method": "mlx", "format": "affine"}),
    Probe("exl2", "EXL2 4.0 bpw", {"bits_per_weight": 4.0, "producer": "exllamav2", "config_method": "exl2"}),
    Probe("exl3", "EXL3 4.0 bpw", {"bits_per_weight": 4.0, "producer": "exllamav3", "config_method": "exl3"}),
    Probe("hqq", "HQQ 4-bit", {"weight_bits": 4, "producer": "hqq", "config_method": "hqq"}),
    Probe("torchao", "torchao int4 weight-only", {"weight_bits": 4, "weight_dtype": "int4", "producer": "torchao",
                                                  "config_method": "torchao"}),
    Probe("aqlm", "AQLM 2-bit", {"weight_bits": 2, "producer": "aqlm", "config_method": "aqlm"}),
    Probe("unknown", "unrecognised quantization", {"config_method": "something-new"}),
)


def probes_for(method: str | None = None) -> list[Probe]:
    """The probes of one method (all when None); an unknown method yields none."""
    return [p for p in PROBES if method is None or p.method == method]
