"""One dequantiser per stored layout, as the format registry names them (``Layout.dequantiser``).

``qcheck.eval.simulate`` hands each quantised weight the classifier found (a ``QLinear``: module prefix,
layout id, tensor names) to its layout's function here, with a ``WeightSource`` to read tensors and the
quantisation config. The layout is not recognised a second time: each function only checks that the parts
it reads are there (returning None when they are not, so the tensors fall through to the "matches no
layout qcheck can dequantise" error) and reads what only the config can say (bit widths of packs, GPTQ v1
vs v2, FP8 block size, MLX modes).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from qcheck.errors import InputError


@dataclass
class WeightSource:
    """What a layout dequantiser reads: tensors by name (torch, loaded on demand), the checkpoint's tensor
    infos and side configs, and its quantisation config block."""

    load: Callable[[str], Any]
    infos: dict[str, Any]
    configs: dict[str, Any]
    qcfg: dict[str, Any]
    _modules: dict[str, dict[str, Any]] | None = field(default=None, repr=False)

    def leaves(self, prefix: str) -> dict[str, Any]:
        """leaf name -> tensor info of every tensor directly under ``prefix`` (``prefix.<leaf>``)."""
        if self._modules is None:
            self._modules = {}
            for name, info in self.infos.items():
                p, _, leaf = name.rpartition(".")
                self._modules.setdefault(p, {})[leaf] = info
        return self._modules.get(prefix, {})

    def get(self, prefix: str, leaf: str) -> Any:
        return self.load(full(prefix, leaf))


@dataclass
class Dequantised:
    """One weight in float: parameter name -> tensor, the note's label, and the tensors it consumed
    (leaf names under ``prefix``; the rest of the module's tensors are copied, dropped or refused)."""

    tensors: dict[str, Any]
    label: str
    used: set[str]
    prefix: str

    def consumed(self) -> set[str]:
        return {full(self.prefix, leaf) for leaf in self.used}


def full(prefix: str, leaf: str) -> str:
    return f"{prefix}.{leaf}" if prefix else leaf


def quant_config(configs: dict[str, Any]) -> dict[str, Any]:
    """The quantisation block wherever the producer put it (config.json, nested text config, side files)."""
    cfg = configs.get("config.json") or {}
    candidates = [cfg.get("quantization_config")]
    for key in ("text_config", "llm_config"):
        sub = cfg.get(key)
        if isinstance(sub, dict):
            candidates.append(sub.get("quantization_config"))
    for name in ("quantize_config.json", "quant_config.json"):
        candidates.append(configs.get(name))
    for c in candidates:
        if isinstance(c, dict):
            return c
    return {}


# ------------------------------------------------------------------------------------------ config values

def _mlx_params(configs: dict[str, Any], prefix: str) -> tuple[int, int, str]:
    """(bits, group_size, mode) for one MLX module: the ``quantization`` block, then its per-module override."""
    cfg = configs.get("config.json") or {}
    q = cfg.get("quantization") or cfg.get("quantization_config") or {}
    if not isinstance(q, dict):
        q = {}
    bits, group, mode = q.get("bits", 4), q.get("group_size", 64), q.get("mode", "affine")
    override = q.get(prefix)
    if isinstance(override, dict):
        bits, group = override.get("bits", bits), override.get("group_size", group)
        mode = override.get("mode", mode)
    if isinstance(bits, bool) or isinstance(group, bool) or not isinstance(bits, int) or not isinstance(group, int):
        raise InputError(f"MLX quantization bits/group_size are not integers ({bits!r}, {group!r})",
                         where=f"module {prefix}")
    return bits, group, str(mode).lower()


def _ct_bits(qcfg: dict[str, Any], packed_cols: int, in_f: int, prefix: str) -> int:
    """compressed-tensors num_bits: the config's when it has one value, else recomputed from the packed width."""
    bits = set()
    groups = qcfg.get("config_groups")
    if isinstance(groups, dict):
        for g in groups.values():
            w = g.get("weights") if isinstance(g, dict) else None
            if isinstance(w, dict) and isinstance(w.get("num_bits"), int):
                bits.add(w["num_bits"])
    fits = [b for b in range(1, 9) if math.ceil(in_f * b / 32) == packed_cols]
    if len(bits) == 1 and next(iter(bits)) in fits:
        return next(iter(bits))
    if len(fits) == 1:
        return fits[0]
    raise InputError(f"cannot tell the bit width of weight_packed ({packed_cols} words for {in_f} inputs; "
                     f"config says {sorted(bits) or 'nothing'})", where=f"module {prefix}")


def _config_int(qcfg: dict[str, Any], keys: tuple[str, ...], default: int, prefix: str) -> int:
    """An integer quantisation field (the first of ``keys`` present), refusing non-integers from hostile configs."""
    for key in keys:
        if key in qcfg:
            value = qcfg[key]
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"quantization_config.{key} must be an integer, not {value!r}",
                                 where=f"module {prefix}")
            return value
    return default


def _fp8_block(qcfg: dict[str, Any]) -> tuple[int, int] | None:
    block = qcfg.get("weight_block_size")
    groups = qcfg.get("config_groups")
    if block is None and isinstance(groups, dict):
        for g in groups.values():
            w = g.get("weights") if isinstance(g, dict) else None
            if isinstance(w, dict) and w.get("block_structure"):
                block = w["block_structure"]
    if isinstance(block, (list, tuple)) and len(block) == 2 and all(isinstance(b, int) and b > 0 for b in block):
        return int(block[0]), int(block[1])
    return None


def _non_monotonic(g_idx: Any | None) -> bool:
    if g_idx is None or g_idx.numel() < 2:
        return False
    return bool((g_idx[1:] < g_idx[:-1]).any())


def _fp8_granularity(w: Any, s: Any) -> str:
    if s.numel() == 1:
        return "per-tensor"
    if s.shape[0] == w.shape[0] and (s.ndim == 1 or s.shape[-1] == 1):
        return "per-channel"
    if s.shape[0] == w.shape[0]:
        return "per-group"
    return "block"


# ------------------------------------------------------------------------------------------ GPTQ / AWQ

_QWEIGHT = ("qweight", "qzeros", "scales")


def _awq_version(src: WeightSource, prefix: str) -> str:
    """An AWQ config's ``version``: only GEMM packs are simulated (checked before any qweight is read)."""
    qcfg = src.qcfg
    version = str(qcfg.get("version", "gemm")).lower() if qcfg.get("quant_method") == "awq" else "gemm"
    if version != "gemm":
        raise InputError(f"AWQ version {version!r} is not simulated (only the GEMM layout is)",
                         where=f"module {prefix}")
    return version


def gptq(src: WeightSource, q: Any) -> Dequantised | None:
    """GPTQ ``qweight`` [in*bits/32, out] + ``qzeros`` + ``scales`` (+ ``g_idx``), v1 or v2 zero points."""
    from qcheck.eval.dequant import gptq as gptq_

    prefix, leaves = q.name, src.leaves(q.name)
    if not set(_QWEIGHT) <= leaves.keys():
        return None
    _awq_version(src, prefix)
    qw, qz, sc = (src.get(prefix, k) for k in _QWEIGHT)
    g_idx = src.get(prefix, "g_idx") if "g_idx" in leaves else None
    fmt = src.qcfg.get("checkpoint_format") or src.qcfg.get("format") or "gptq"
    fmt = fmt if fmt in ("gptq", "gptq_v2") else "gptq"
    bits = _config_int(src.qcfg, ("bits",), 4, prefix)
    weight = gptq_.dequant_gptq(qw, qz, sc, g_idx, f"module {prefix}", bits=bits, checkpoint_format=fmt)
    label = f"GPTQ {fmt} {bits}-bit" + (" act-order" if _non_monotonic(g_idx) else "")
    return Dequantised({full(prefix, "weight"): weight}, label, {*_QWEIGHT, "g_idx"}, prefix)


def awq_gemm(src: WeightSource, q: Any) -> Dequantised | None:
    """AutoAWQ GEMM ``qweight`` [in, out*bits/32] + ``qzeros`` + ``scales``."""
    from qcheck.eval.dequant import awq

    prefix, leaves = q.name, src.leaves(q.name)
    if not set(_QWEIGHT) <= leaves.keys():
        return None
    _awq_version(src, prefix)
    qw, qz, sc = (src.get(prefix, k) for k in _QWEIGHT)
    bits = _config_int(src.qcfg, ("bits", "w_bit"), 4, prefix)
    weight = awq.dequant_awq(qw, qz, sc, f"module {prefix}", bits=bits)
    return Dequantised({full(prefix, "weight"): weight}, "AWQ GEMM", {*_QWEIGHT, "g_idx"}, prefix)


def awq_gemv(src: WeightSource, q: Any) -> Dequantised | None:
    """AutoAWQ GEMV packs are refused by name (only GEMM is simulated)."""
    version = str(src.qcfg.get("version") or "gemv").lower()
    raise InputError(f"AWQ version {'gemv' if version == 'gemm' else version!r} is not simulated "
                     "(only the GEMM layout is)", where=f"module {q.name}")


# ------------------------------------------------------------------------------------------ compressed-tensors

def weight_packed(src: WeightSource, q: Any) -> Dequantised | None:
    """compressed-tensors ``weight_packed`` + ``weight_scale``: NVFP4 with ``weight_global_scale``, integer
    ``pack-quantized`` with ``weight_shape``, MXFP4 with E8M0 (uint8) scales."""
    import torch

    from qcheck.eval.dequant import compressed, fp4

    prefix, leaves = q.name, src.leaves(q.name)
    where = f"module {prefix}"
    if not {"weight_packed", "weight_scale"} <= leaves.keys():
        return None
    packed, scale = src.get(prefix, "weight_packed"), src.get(prefix, "weight_scale")
    used = {"weight_packed", "weight_scale"}
    if "weight_global_scale" in leaves:
        g = fp4.global_value(src.get(prefix, "weight_global_scale"), where)
        weight = fp4.dequant_nvfp4(packed, scale, 1.0 / g, where)
        label = "NVFP4 (compressed-tensors)"
        used.add("weight_global_scale")
    elif "weight_shape" in leaves:
        shape = src.get(prefix, "weight_shape")
        in_f = int(shape.reshape(-1)[-1]) if shape.numel() == 2 else 0
        if in_f <= 0:
            raise InputError(f"weight_shape {shape.tolist()} is not an [out, in] pair of positive sizes", where=where)
        bits = _ct_bits(src.qcfg, packed.shape[-1], in_f, prefix)
        zp = src.get(prefix, "weight_zero_point") if "weight_zero_point" in leaves else None
        gi = src.get(prefix, "weight_g_idx") if "weight_g_idx" in leaves else None
        weight = compressed.dequant_pack_quantized(packed, scale, shape, where, bits=bits, weight_zero_point=zp,
                                                   weight_g_idx=gi)
        label = f"compressed-tensors pack-quantized int{bits}"
        used |= {"weight_shape", "weight_zero_point", "weight_g_idx"}
    elif scale.dtype == torch.uint8:
        weight = fp4.dequant_mxfp4(packed, scale, where)
        label = "MXFP4 (compressed-tensors)"
    else:
        raise InputError(f"weight_packed with a {scale.dtype} weight_scale and no weight_shape or "
                         "weight_global_scale matches no compressed-tensors layout", where=where)
    return Dequantised({full(prefix, "weight"): weight}, label, used, prefix)


def int_quantized(src: WeightSource, q: Any) -> Dequantised | None:
    """compressed-tensors ``int-quantized``: an I8 ``weight`` + ``weight_scale`` (+ zero point, ``g_idx``)."""
    from qcheck.eval.dequant import compressed

    prefix, leaves = q.name, src.leaves(q.name)
    w_info = leaves.get("weight")
    if w_info is None or w_info.dtype != "I8" or "weight_scale" not in leaves:
        return None
    zp = src.get(prefix, "weight_zero_point") if "weight_zero_point" in leaves else None
    gi = src.get(prefix, "weight_g_idx") if "weight_g_idx" in leaves else None
    weight = compressed.dequant_int_quantized(src.get(prefix, "weight"), src.get(prefix, "weight_scale"),
                                              f"module {prefix}", weight_zero_point=zp, weight_g_idx=gi)
    return Dequantised({full(prefix, "weight"): weight}, "INT8 (compressed-tensors int-quantized)",
                       {"weight", "weight_scale", "weight_zero_point", "weight_g_idx"}, prefix)


# ------------------------------------------------------------------------------------------ FP8 / FP4

def fp8(src: WeightSource, q: Any) -> Dequantised | None:
    """An FP8 ``weight`` with its ``weight_scale`` (or DeepSeek ``weight_scale_inv``): per-tensor, per-channel,
    per-group, 2-D block (block size from the config when the scale shape cannot tell) or MXFP8 E8M0."""
    import torch

    from qcheck.eval.dequant import fp8 as fp8_

    prefix, leaves = q.name, src.leaves(q.name)
    w_info = leaves.get("weight")
    if w_info is None or w_info.dtype not in ("F8_E4M3", "F8_E5M2"):
        return None
    if "weight_scale" not in leaves and "weight_scale_inv" not in leaves:
        return None
    scale_leaf = "weight_scale_inv" if "weight_scale_inv" in leaves else "weight_scale"
    w, s = src.get(prefix, "weight"), src.get(prefix, scale_leaf)
    weight = fp8_.dequant_fp8(w, s, f"module {prefix}", block=_fp8_block(src.qcfg))
    if s.dtype == torch.uint8:
        label = "MXFP8 (E8M0 scale per 32)"
    else:
        label = "FP8 " + ("block" if scale_leaf == "weight_scale_inv" else _fp8_granularity(w, s))
    return Dequantised({full(prefix, "weight"): weight}, label, {"weight", scale_leaf}, prefix)


def nvfp4_modelopt(src: WeightSource, q: Any) -> Dequantised | None:
    """ModelOpt NVFP4: U8 ``weight`` + E4M3 ``weight_scale`` per 16 + global ``weight_scale_2``."""
    from qcheck.eval.dequant import fp4

    prefix, leaves = q.name, src.leaves(q.name)
    w_info = leaves.get("weight")
    if w_info is None or w_info.dtype != "U8" or not {"weight_scale", "weight_scale_2"} <= leaves.keys():
        return None
    where = f"module {prefix}"
    w = src.get(prefix, "weight")
    s, s2 = src.get(prefix, "weight_scale"), src.get(prefix, "weight_scale_2")
    weight = fp4.dequant_nvfp4(w, s, fp4.global_value(s2, where), where)
    return Dequantised({full(prefix, "weight"): weight}, "NVFP4 (ModelOpt)", {"weight", "weight_scale", "weight_scale_2"}, prefix)


def mxfp4_gpt_oss(src: WeightSource, q: Any) -> Dequantised | None:
    """gpt-oss ``<param>_blocks`` + ``<param>_scales``. Blocks are stored [..., out, in]; the HF parameter is
    [..., in, out] (transformers ``convert_moe_packed_tensors`` ends with ``out.transpose(1, 2)``)."""
    from qcheck.eval.dequant import fp4

    prefix, _, base = q.name.rpartition(".")
    leaves = src.leaves(prefix)
    blocks, scales = f"{base}_blocks", f"{base}_scales"
    if blocks not in leaves or scales not in leaves:
        return None
    weight = fp4.dequant_mxfp4_blocks(src.get(prefix, blocks), src.get(prefix, scales),
                                      f"tensor {full(prefix, blocks)}").transpose(-1, -2).contiguous()
    return Dequantised({q.name: weight}, "MXFP4 (gpt-oss blocks)", {blocks, scales}, prefix)


# ------------------------------------------------------------------------------------------ MLX

def mlx(src: WeightSource, q: Any) -> Dequantised | None:
    """MLX: U32 ``weight`` + ``scales`` + ``biases`` (affine), or + ``scales`` only (microscaling modes)."""
    from qcheck.eval.dequant import mlx as mlx_

    prefix, leaves = q.name, src.leaves(q.name)
    w_info = leaves.get("weight")
    if w_info is None or w_info.dtype != "U32" or "scales" not in leaves:
        return None
    where = f"module {prefix}"
    if "biases" in leaves:
        bits, group, _mode = _mlx_params(src.configs, prefix)
        w, s, b = (src.get(prefix, k) for k in ("weight", "scales", "biases"))
        weight = mlx_.dequant_mlx_affine(w, s, b, where, bits=bits, group_size=group)
        return Dequantised({full(prefix, "weight"): weight}, f"MLX affine {bits}-bit g{group}",
                           {"weight", "scales", "biases"}, prefix)
    _bits, group, mode = _mlx_params(src.configs, prefix)
    weight = mlx_.dequant_mlx_fp(src.get(prefix, "weight"), src.get(prefix, "scales"), where, mode=mode,
                                 group_size=group)
    return Dequantised({full(prefix, "weight"): weight}, f"MLX {mode}", {"weight", "scales"}, prefix)
