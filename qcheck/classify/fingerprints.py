"""Which method a set of tensors is, without any config (formats.md §6), and which family reads a config.

Scanners run in a fixed order, most specific first (a bitsandbytes ``quant_state`` beats a plain U8
weight; ``qweight`` beats ``weight``), and each tensor belongs to at most one quantised weight.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from qcheck.classify import bnb, compressed_tensors, exllama, fp8, gptq_awq, mlx, modelopt, mx, others
from qcheck.classify.base import Hints, QLinear
from qcheck.classify.configs import ConfigView
from qcheck.model import TensorInfo

Scanner = Callable[[dict[str, TensorInfo], set[str], Hints], list[QLinear]]


def scan_all(tensors: dict[str, TensorInfo], metadata: dict[str, Any], hints: Hints) -> list[QLinear]:
    """Every quantised weight the tensor names, dtypes and shapes show."""
    scanners: list[Scanner] = [
        bnb.scan,
        exllama.scan,
        lambda t, c, h: others.scan(t, c, h, metadata),
        gptq_awq.scan,
        compressed_tensors.scan,
        mx.scan,
        modelopt.scan,
        mlx.scan,
        fp8.scan,
    ]
    claimed: set[str] = set()
    found: list[QLinear] = []
    for scan in scanners:
        for q in scan(tensors, claimed, hints):
            if any(n in claimed for n in q.tensors):
                continue
            claimed.update(q.tensors)
            found.append(q)
    return found


#: quant_method (lower-case) -> family that reads the config
FAMILIES: dict[str, str] = {
    "fp8": "fp8", "fbgemm_fp8": "fp8",
    "compressed-tensors": "compressed-tensors", "compressed_tensors": "compressed-tensors",
    "modelopt": "modelopt", "modelopt_fp4": "modelopt", "modelopt_mixed": "modelopt", "modelopt_mxfp8": "modelopt",
    "gptq": "gptq", "gptq_v2": "gptq", "marlin": "gptq", "gptq_marlin": "gptq", "bitblas": "gptq",
    "gptq_bitblas": "gptq",
    "awq": "awq", "awq_marlin": "awq", "gemm": "awq",
    "auto-round": "auto-round", "intel/auto-round": "auto-round", "auto_round": "auto-round",
    "mxfp4": "mxfp4", "gpt_oss_mxfp4": "mxfp4",
    "bitsandbytes": "bitsandbytes",
    "exl2": "exl2", "exl3": "exl3",
    "hqq": "hqq", "torchao": "torchao", "aqlm": "aqlm", "quark": "quark",
    "metal": "mlx", "mlx": "mlx",
    "eetq": "named", "quanto": "named",
}


def config_family(view: ConfigView) -> str | None:
    """The family whose reader understands this checkpoint's config, or None without any config.

    ``hf_quant_config.json`` means ModelOpt whatever config.json says; an MLX ``quantization`` block
    without ``quant_method`` means MLX; a lone quantize_config.json means GPTQ (or AWQ by its keys).
    """
    if view.hf_quant is not None:
        return "modelopt"
    method = view.quant_method
    if method:
        if method in FAMILIES:
            return FAMILIES[method]
        return "named" if method in others.NAMED_ONLY else "unknown-method"
    if view.mlx is not None:
        return "mlx"
    if view.quant is not None and "config_groups" in view.quant:
        return "compressed-tensors"
    if view.exl3 is not None and str(view.exl3.get("quant_method") or "exl3").lower() == "exl3":
        return "exl3"
    for side in view.side.values():
        if "w_bit" in side or "zero_point" in side or str(side.get("version") or "").lower() in ("gemm", "gemv"):
            return "awq"
        if "bits" in side:
            return "gptq"
    return None
