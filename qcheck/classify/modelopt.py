"""NVIDIA ModelOpt (TensorRT Model Optimizer): ``hf_quant_config.json`` and ``quant_method: modelopt``
(docs/research/formats.md §4.3), plus its INT4-AWQ layout (U8 packed along the output dim).

``quant_algo`` names the scheme (FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, NVFP4, NVFP4_AWQ,
W4A16_AWQ, W4A8_AWQ, W8A16, W8A8_SQ_PER_CHANNEL, W4A8_NVFP4_FP8, W4A8_MXFP4_FP8, MXFP8,
MIXED_PRECISION); ``kv_cache_quant_algo`` the KV cache; ``exclude_modules``/``ignore`` the skipped modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qcheck.classify.base import Draft, Hints, QLinear, exact_div, sibling
from qcheck.classify.configs import ConfigView, as_int, excluded_modules, first
from qcheck.classify.dtypes import container_word
from qcheck.classify.table import candidates, with_sibling
from qcheck.model import TensorInfo
from qcheck.typed import as_dict

#: quant_algo -> (method, weight bits, activation dtype, granularity, group)
ALGOS: dict[str, tuple[str, int, str | None, str | None, int | None]] = {
    "FP8": ("fp8", 8, "float8_e4m3", "per-tensor", None),
    "FP8_PC_PT": ("fp8", 8, "float8_e4m3", "per-channel", -1),
    "FP8_PER_CHANNEL_PER_TOKEN": ("fp8", 8, "float8_e4m3", "per-channel", -1),
    "FP8_PB_WO": ("fp8", 8, None, "block", None),
    "FP8_PB_REAL": ("fp8", 8, "float8_e4m3", "block", None),
    "NVFP4": ("nvfp4", 4, "fp4_e2m1", "group", 16),
    "NVFP4_AWQ": ("nvfp4", 4, "fp4_e2m1", "group", 16),
    "W4A16_NVFP4": ("nvfp4", 4, None, "group", 16),
    "W4A8_NVFP4_FP8": ("nvfp4", 4, "float8_e4m3", "group", 16),
    "MXFP4": ("mxfp4", 4, None, "group", 32),
    "W4A8_MXFP4_FP8": ("mxfp4", 4, "float8_e4m3", "group", 32),
    "MXFP8": ("mxfp8", 8, "float8_e4m3", "group", 32),
    "W4A16_AWQ": ("awq", 4, None, "group", None),
    "INT4_AWQ": ("awq", 4, None, "group", None),
    "W4A8_AWQ": ("awq", 4, "float8_e4m3", "group", None),
    "W8A16": ("int8", 8, None, "per-channel", -1),
    "INT8_WO": ("int8", 8, None, "per-channel", -1),
    "W8A8_SQ_PER_CHANNEL": ("int8", 8, "int8", "per-channel", -1),
    "INT8_SQ": ("int8", 8, "int8", "per-channel", -1),
}
#: quant_algo -> activation scheme where it is not a static per-tensor scale (vLLM modelopt.py linear methods)
ACT_SCHEMES = {"FP8_PER_CHANNEL_PER_TOKEN": "dynamic per-token", "FP8_PC_PT": "dynamic per-token",
               "FP8_PB_REAL": "dynamic per-token-group 128", "NVFP4": "dynamic per-group 16",
               "NVFP4_AWQ": "dynamic per-group 16", "MXFP8": "dynamic per-group 32",
               "W8A8_SQ_PER_CHANNEL": "dynamic per-token", "INT8_SQ": "dynamic per-token"}
KV_ALGOS = {"FP8": "float8_e4m3", "INT8": "int8", "NVFP4": "fp4_e2m1", "NVFP4_AFFINE": "fp4_e2m1"}


def scan(tensors: Mapping[str, TensorInfo], claimed: set[str], hints: Hints) -> list[QLinear]:
    """ModelOpt INT4-AWQ: ``weight`` U8 ``[out/2, in]`` + ``weight_scale`` (16/32-bit) ``[out, in/block]``."""
    out: list[QLinear] = []
    # names alone rule most tensors out (a weight needs its weight_scale beside it): no record is built for them
    for name in with_sibling(tensors, hints.table, candidates(tensors, hints.table, dtypes=("U8",)), (".weight",),
                             "weight_scale"):
        if name in claimed:
            continue
        prefix = name[: -len(".weight")]
        t = tensors[name]
        if t.dtype.upper() != "U8" or len(t.shape) < 2:
            continue
        scale = sibling(tensors, prefix, "weight_scale")
        if scale is None or scale.dtype.upper() not in ("F16", "BF16", "F32") or len(scale.shape) < 2:
            continue
        if scale.shape[-2] != 2 * t.shape[-2]:
            continue
        in_dim = t.shape[-1]
        q = QLinear(name=prefix, method="awq", layout="int4-awq-modelopt", tensors=[name, scale.name],
                    logical=2 * t.numel, bits=4, group_size=exact_div(in_dim, scale.shape[-1]), granularity="group",
                    weight_dtype="int4", scale_dtype=container_word(scale.dtype), zero_point=False, producer="modelopt")
        for extra in ("pre_quant_scale", "input_scale", "weight_scale_2"):
            e = sibling(tensors, prefix, extra)
            if e is not None:
                q.tensors.append(e.name)
                q.input_scale = q.input_scale or extra == "input_scale"
        out.append(q)
    return out


def _algo(d: dict[str, Any] | None) -> str | None:
    v = first(d, "quant_algo")
    return str(v).upper() if isinstance(v, str) else None


def apply_config(view: ConfigView, draft: Draft, family: str, tensor_method: str | None) -> None:
    """hf_quant_config.json and/or ``quant_method: modelopt``; the two are cross-checked."""
    hq = view.hf_quant or {}
    inner = hq.get("quantization") if isinstance(hq.get("quantization"), dict) else {}
    cfg_q = view.quant if (view.quant_method or "") == "modelopt" else None
    algo = _algo(inner)
    cfg_algo = _algo(cfg_q)
    if algo and cfg_algo and algo != cfg_algo:
        draft.mismatch("hf_quant_config.json", f"quant_algo {algo} disagrees with {view.quant_where} quant_algo "
                                               f"{cfg_algo}")
    algo = algo or cfg_algo
    draft.producer = "modelopt"
    draft.config_method = algo or "modelopt"
    draft.excluded = excluded_modules(inner, cfg_q)
    kv = first(inner, "kv_cache_quant_algo") or first(cfg_q, "kv_cache_quant_algo")
    if kv is None and isinstance(first(cfg_q, "kv_cache_scheme"), str):
        kv = cfg_q["kv_cache_scheme"]  # type: ignore[index]
    if isinstance(kv, str):
        draft.kv_cache_dtype = KV_ALGOS.get(kv.upper(), kv.lower())
        if kv.upper() in KV_ALGOS:
            draft.kv_cache_declared = "kv_cache_quant_algo"
            draft.kv_cache_static = True  # ModelOpt calibrates k/v amax offline and exports them as k_scale/v_scale
    if algo == "MIXED_PRECISION":
        layers = as_dict(as_dict(inner).get("quantized_layers") or as_dict(cfg_q).get("quantized_layers"))
        algos = sorted({str(v.get("quant_algo")).upper() for v in layers.values()
                        if isinstance(v, dict) and v.get("quant_algo")})
        methods = [ALGOS[a][0] for a in algos if a in ALGOS]
        draft.declared_methods = sorted(set(methods))
        draft.format = "MIXED_PRECISION"
        pick = next((a for a in algos if a in ALGOS and ALGOS[a][0] == tensor_method), algos[0] if algos else None)
        if len(algos) > 1:
            draft.warn("ModelOpt MIXED_PRECISION checkpoint: layers use " + ", ".join(algos))
        algo = pick
    if algo is None:
        draft.warn("ModelOpt config has no quant_algo")
        return
    spec = ALGOS.get(algo)
    if spec is None:
        draft.warn(f"unknown ModelOpt quant_algo {algo!r}; classified from tensors")
        return
    method, bits, act, gran, group = spec
    draft.expected_method = method
    draft.expected_bits = bits
    draft.activation_dtype = act
    draft.activation_scheme = ACT_SCHEMES.get(algo, "static per-tensor" if act else None)
    draft.scale_granularity = gran
    g = as_int(first(inner, "group_size")) or as_int(first(cfg_q, "group_size"))
    draft.expected_group = g if g is not None else group
    if gran == "block":
        draft.expected_block = [128, 128]
    if method in ("awq",):
        hz = first(inner, "has_zero_point")
        draft.zero_point = bool(hz) if isinstance(hz, bool) else None
    if draft.format is None:
        draft.format = algo
