"""4-bit floating point packs: NVFP4 (E2M1 + E4M3 scale per 16), MXFP4/MXFP6 (E8M0 scale per 32),
in the ModelOpt, compressed-tensors, gpt-oss and native-dtype layouts (docs/research/formats.md §4.4, §4.5).

Header rule: a U8 weight holds two FP4 values per byte, so ``in = 2 * packed_cols``; the scale's last
dim gives the group (``in / scale_cols``) and its dtype tells NVFP4 (F8_E4M3) from MX (U8/F8_E8M0).
"""

from __future__ import annotations

from collections.abc import Mapping

from qcheck.classify.base import Draft, Hints, QLinear, exact_div, prod, sibling
from qcheck.classify.configs import ConfigView, excluded_modules
from qcheck.classify.dtypes import container_word
from qcheck.classify.table import candidates, ending, with_sibling
from qcheck.model import TensorInfo

_E8M0 = ("U8", "F8_E8M0")


def scan(tensors: Mapping[str, TensorInfo], claimed: set[str], hints: Hints) -> list[QLinear]:
    """U8/F4/F6 weights with FP8 (NVFP4) or E8M0 (MX) group scales, and gpt-oss ``*_blocks``."""
    out: list[QLinear] = []
    names = candidates(tensors, hints.table, dtypes=("U8", "F4", "F6_E2M3", "F6_E3M2"))
    # names alone rule most tensors out (a weight needs its weight_scale beside it): no record is built for them
    packed = set(with_sibling(tensors, hints.table, names, (".weight", ".weight_packed"), "weight_scale"))
    blocks = set(ending(names, ("_blocks", ".blocks")))
    for name in names:
        if name in claimed or (name not in packed and name not in blocks):
            continue
        t = tensors[name]
        dt = t.dtype.upper()
        if name in packed and dt in ("U8", "F4", "F6_E2M3", "F6_E3M2") and len(t.shape) >= 2:
            q = _packed_linear(tensors, name, t)
            if q is not None:
                out.append(q)
        elif name in blocks and dt == "U8" and len(t.shape) >= 2 and t.shape[-1] == 16:
            q = _gpt_oss(tensors, name, t)
            if q is not None:
                out.append(q)
    return out


def _packed_linear(tensors: Mapping[str, TensorInfo], name: str, t: TensorInfo) -> QLinear | None:
    prefix, _, suffix = name.rpartition(".")
    scale = sibling(tensors, prefix, "weight_scale")
    if scale is None or len(scale.shape) < 1 or scale.shape[-1] <= 0:
        return None
    sdt = scale.dtype.upper()
    dt = t.dtype.upper()
    if dt == "U8":
        in_dim = 2 * t.shape[-1]
        logical = 2 * t.numel
        bits: float = 4
    else:  # native F4 / F6: the header shape is already logical
        in_dim = t.shape[-1]
        logical = t.numel
        bits = 4 if dt == "F4" else 6
    if len(scale.shape) >= 2 and scale.shape[-2] != t.shape[-2]:
        return None  # not one scale row per output row: not an FP4 group layout
    group = exact_div(in_dim, scale.shape[-1])
    q = QLinear(name=prefix, method="", layout="", tensors=[name, scale.name], logical=logical, bits=bits,
                group_size=group, granularity="group")
    if sdt == "F8_E4M3":
        if dt not in ("U8", "F4"):
            return None
        q.method, q.weight_dtype, q.scale_dtype = "nvfp4", "fp4_e2m1", "float8_e4m3"
        g2 = sibling(tensors, prefix, "weight_scale_2", "weight_global_scale")
        if g2 is not None:
            q.tensors.append(g2.name)
        if suffix == "weight_packed" or (g2 is not None and g2.name.endswith("weight_global_scale")):
            q.layout, q.producer = "nvfp4-compressed-tensors", "compressed-tensors"
        else:
            q.layout, q.producer = "nvfp4-modelopt", "modelopt" if g2 is not None else None
        inp = sibling(tensors, prefix, "input_scale", "input_global_scale")
        if inp is not None:
            q.tensors.append(inp.name)
            q.input_scale = True
    elif sdt in _E8M0:
        if dt == "F6_E2M3" or dt == "F6_E3M2":
            q.method, q.weight_dtype = "mxfp6", container_word(dt)
        else:
            q.method, q.weight_dtype = "mxfp4", "fp4_e2m1"
        q.scale_dtype = "e8m0"
        q.layout = "mxfp4-compressed-tensors" if suffix == "weight_packed" else f"{q.method}-packed"
        if suffix == "weight_packed":
            q.producer = "compressed-tensors"
        inp = sibling(tensors, prefix, "input_scale")
        if inp is not None:
            q.tensors.append(inp.name)
            q.input_scale = True
    else:
        return None
    return q


def _gpt_oss(tensors: Mapping[str, TensorInfo], name: str, t: TensorInfo) -> QLinear | None:
    """``*_blocks`` U8 [..., in/32, 16] + ``*_scales`` U8 [..., in/32] (transformers Mxfp4GptOssExperts)."""
    if name.endswith("_blocks"):
        base, sep = name[: -len("_blocks")], "_"
    else:
        base, sep = name[: -len(".blocks")], "."
    scales = tensors.get(f"{base}{sep}scales")
    if scales is None or tuple(scales.shape) != tuple(t.shape[:-1]):
        return None
    return QLinear(name=base, method="mxfp4", layout="mxfp4-gpt-oss", tensors=[name, scales.name],
                   logical=prod(t.shape[:-1]) * 32, bits=4, group_size=32, granularity="group",
                   weight_dtype="fp4_e2m1", scale_dtype="e8m0", producer="gpt-oss")


def apply_config(view: ConfigView, draft: Draft, family: str, tensor_method: str | None) -> None:
    """transformers/gpt-oss ``quant_method: mxfp4`` (Mxfp4Config: modules_to_not_convert only)."""
    q = view.quant or {}
    draft.expected_method = "mxfp4"
    draft.expected_bits = 4
    draft.expected_group = 32
    draft.config_method = view.quant_method
    draft.excluded = excluded_modules(q)
    if any(x.layout == "mxfp4-gpt-oss" for x in draft.qlinears):
        draft.producer = "gpt-oss"
