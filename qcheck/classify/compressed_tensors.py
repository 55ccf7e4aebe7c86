"""compressed-tensors (llm-compressor) configs and the integer layouts it writes (docs/research/formats.md §4.2).

Tensor side: ``weight_packed`` I32 ``[out, in*bits/32]`` + ``weight_scale [out, in/group]``
(``pack-quantized``), and int8 ``weight`` + ``weight_scale`` (``int-quantized``; also Quark/ModelOpt
INT8). Config side: ``config_groups`` (one scheme each), top-level/per-group ``format``, ``ignore``,
``kv_cache_scheme``. Several groups with different schemes are reported as mixed precision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qcheck.classify.base import Draft, Hints, QLinear, exact_div, prod, row_group, sibling
from qcheck.classify.configs import ConfigView, as_int, excluded_modules
from qcheck.classify.dtypes import container_word, int_word
from qcheck.classify.table import candidates
from qcheck.model import TensorInfo
from qcheck.typed import as_dict


def scan(tensors: Mapping[str, TensorInfo], claimed: set[str], hints: Hints) -> list[QLinear]:
    """``weight_packed`` integer packs and int8/int32 ``weight`` + ``weight_scale`` pairs."""
    out: list[QLinear] = []
    for name in candidates(tensors, hints.table, dtypes=("I32", "U32", "I64", "I8")):
        t = tensors[name]
        if name in claimed or len(t.shape) < 2:
            continue
        dt = t.dtype.upper()
        if name.endswith(".weight_packed") and dt in ("I32", "U32", "I64"):
            q = _packed(tensors, name, t, hints)
        elif name.endswith(".weight") and dt in ("I8", "I32"):
            q = _int_weight(tensors, name, t, hints)
        else:
            q = None
        if q is not None:
            out.append(q)
    return out


def _zero_and_idx(tensors: Mapping[str, TensorInfo], prefix: str, q: QLinear) -> None:
    zp = sibling(tensors, prefix, "weight_zero_point")
    if zp is not None:
        q.tensors.append(zp.name)
        q.zero_point = True
    gi = sibling(tensors, prefix, "weight_g_idx")
    if gi is not None:
        q.tensors.append(gi.name)
    for extra in ("weight_shape", "input_scale", "input_zero_point", "input_global_scale"):
        e = sibling(tensors, prefix, extra)
        if e is not None:
            q.tensors.append(e.name)
            if extra.startswith("input_"):
                q.input_scale = True


def _packed(tensors: Mapping[str, TensorInfo], name: str, t: TensorInfo, hints: Hints) -> QLinear | None:
    prefix = name[: -len(".weight_packed")]
    scale = sibling(tensors, prefix, "weight_scale")
    if scale is None:
        return None
    pack = 64 if t.dtype.upper() == "I64" else 32
    rows, cols = prod(t.shape[:-1]), t.shape[-1]
    bits_hint, group_hint = hints.for_module(prefix)
    scols = scale.shape[-1] if scale.shape else 1
    in_dim = None
    group = None
    whole = False
    if scols > 1 and group_hint and group_hint > 0:
        in_dim = scols * group_hint
        group = group_hint
    if in_dim is None and bits_hint:
        in_dim = cols * pack // bits_hint
        if group is None:
            group, whole = row_group(in_dim, scols, group_hint)
    bits: float | None = pack * cols / in_dim if in_dim else None
    if bits is not None and bits.is_integer():
        bits = int(bits)
    q = QLinear(name=prefix, method="int8" if bits == 8 else "int4", layout="pack-quantized",
                tensors=[name, scale.name], logical=rows * in_dim if in_dim else None, bits=bits,
                group_size=group, whole_row=whole, granularity="per-channel" if group == -1 else "group",
                weight_dtype=int_word(bits), scale_dtype=container_word(scale.dtype), zero_point=False,
                producer="compressed-tensors")
    _zero_and_idx(tensors, prefix, q)
    return q


def _int_weight(tensors: Mapping[str, TensorInfo], name: str, t: TensorInfo, hints: Hints) -> QLinear | None:
    prefix = name[: -len(".weight")]
    scale = sibling(tensors, prefix, "weight_scale")
    if scale is None or sibling(tensors, prefix, "SCB") is not None:
        return None
    rows, cols = prod(t.shape[:-1]), t.shape[-1]
    if t.dtype.upper() == "I8":
        bits: float | None = 8
        logical: int | None = t.numel
        in_dim: int | None = cols
    else:  # I32 words of packed int4 (Quark ``pack_method: reorder``): [out, in*bits/32]
        bits_hint, _ = hints.for_module(prefix)
        bits = bits_hint or 4
        in_dim = cols * 32 // int(bits)
        logical = rows * in_dim
    s = scale.shape
    if scale.numel == 1:
        gran, group = "per-tensor", None
    elif len(s) == 1 or s[-1] == 1:
        gran, group = "per-channel", -1
    else:
        gran, group = "group", exact_div(in_dim, s[-1]) if in_dim else None  # no input columns: no group
    q = QLinear(name=prefix, method="int8" if bits == 8 else "int4", layout="int-quantized", tensors=[name, scale.name],
                logical=logical, bits=bits, group_size=group, granularity=gran, weight_dtype=int_word(bits),
                scale_dtype=container_word(scale.dtype), zero_point=False)
    _zero_and_idx(tensors, prefix, q)
    return q


def scheme_method(weights: dict[str, Any], fmt: str | None) -> str:
    """The canonical method one compressed-tensors weight scheme stands for."""
    bits = as_int(weights.get("num_bits")) or 8
    wtype = str(weights.get("type") or "int").lower()
    group = as_int(weights.get("group_size"))
    strategy = str(weights.get("strategy") or "").lower()
    fmt = (fmt or "").lower()
    if wtype == "float":
        if bits == 8:
            return "mxfp8" if fmt.startswith("mxfp8") or (group == 32 and strategy in ("group", "")) else "fp8"
        if bits == 4:
            if fmt.startswith("mxfp4") or group == 32:
                return "mxfp4"
            return "nvfp4"
        if bits == 6:
            return "mxfp6"
        return "unknown"
    return "int8" if bits == 8 else "int4"


def _act_dtype(args: Any) -> str | None:
    if not isinstance(args, dict):
        return None
    bits = as_int(args.get("num_bits")) or 8
    if str(args.get("type") or "int").lower() == "float":
        return {8: "float8_e4m3", 4: "fp4_e2m1"}.get(bits, f"float{bits}")
    return int_word(bits)


def act_scheme(args: Any) -> str | None:
    """``dynamic per-token``, ``static per-tensor``, ``dynamic per-group 16`` from QuantizationArgs."""
    if not isinstance(args, dict):
        return None
    dynamic = args.get("dynamic")
    when = "dynamic" if dynamic is True or dynamic == "local" else "static"
    strategy = str(args.get("strategy") or "").lower()
    group = as_int(args.get("group_size"))
    if strategy in ("group", "tensor_group") and group:
        return f"{when} per-group {group}"
    if strategy in ("token", "tensor", "channel"):
        return f"{when} per-{strategy}"
    return when


def _granularity(w: dict[str, Any]) -> tuple[str | None, int | None, list[int] | None]:
    strategy = str(w.get("strategy") or "").lower()
    group = as_int(w.get("group_size"))
    if not strategy:
        strategy = "tensor" if group is None else ("channel" if group == -1 else "group")
    if strategy == "tensor":
        return "per-tensor", None, None
    if strategy == "channel":
        return "per-channel", -1, None
    if strategy == "block":
        bs = w.get("block_structure")
        if isinstance(bs, list) and len(bs) == 2:
            return "block", None, [as_int(bs[0]) or 0, as_int(bs[1]) or 0]
        return "block", None, None
    if strategy in ("group", "tensor_group"):
        return "group", group, None
    return strategy, group, None


def apply_config(view: ConfigView, draft: Draft, family: str, tensor_method: str | None) -> None:
    """The scheme of the config group matching the tensors' method (else the first group) describes it."""
    q = view.quant or {}
    draft.producer = "compressed-tensors"
    draft.config_method = view.quant_method or "compressed-tensors"
    draft.excluded = excluded_modules(q)
    top_fmt = q.get("format") if isinstance(q.get("format"), str) else None
    groups = as_dict(q.get("config_groups"))
    schemes: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []
    for gname, scheme in groups.items():
        if not isinstance(scheme, dict) or not isinstance(scheme.get("weights"), dict):
            continue
        fmt = scheme.get("format") if isinstance(scheme.get("format"), str) else top_fmt
        schemes.append((str(gname), scheme_method(scheme["weights"], fmt), scheme, {"format": fmt}))
    if not schemes:
        draft.warn(f"{view.quant_where}: compressed-tensors config has no config_groups with weights")
        draft.format = top_fmt
        return
    chosen = next((s for s in schemes if s[1] == tensor_method), schemes[0])
    gname, method, scheme, extra = chosen
    w = scheme["weights"]
    draft.expected_method = method
    draft.expected_bits = as_int(w.get("num_bits"))
    gran, group, block = _granularity(w)
    draft.scale_granularity = gran
    draft.expected_group = group
    draft.expected_block = block
    draft.activation_dtype = _act_dtype(scheme.get("input_activations"))
    draft.activation_scheme = act_scheme(scheme.get("input_activations"))
    if method in ("fp8", "mxfp8"):
        draft.weight_dtype = "float8_e4m3"
    draft.zero_point = (not w["symmetric"]) if isinstance(w.get("symmetric"), bool) else None
    actorder = w.get("actorder")
    if actorder is not None:
        draft.act_order = actorder is True or (isinstance(actorder, str) and actorder.lower() in
                                               ("group", "weight", "static", "dynamic"))
    draft.format = extra["format"] if top_fmt != "mixed-precision" else f"mixed-precision ({extra['format']})"
    others = sorted({m for _, m, _, _ in schemes if m != method})
    draft.declared_methods = [method, *others]
    if len(schemes) > 1:
        draft.warn("compressed-tensors config has several config_groups: "
                   + ", ".join(f"{g}={m}" for g, m, _, _ in schemes))
    kv = q.get("kv_cache_scheme")
    if isinstance(kv, dict):
        draft.kv_cache_dtype = _act_dtype(kv)
        draft.kv_cache_declared = "kv_cache_scheme"
        draft.kv_cache_static = kv.get("dynamic") is not True  # compressed-tensors: static unless dynamic: true
