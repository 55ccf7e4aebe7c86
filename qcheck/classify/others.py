"""Less common methods: HQQ, torchao, AQLM, AMD Quark, quanto/EETQ, and quant_method strings qcheck
knows by name only (docs/research/formats.md §4.11-§4.14)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from qcheck.classify.base import Draft, Hints, QLinear, exact_div, sibling
from qcheck.classify.configs import ConfigView, as_int, excluded_modules, first
from qcheck.classify.dtypes import config_word, container_word, int_word, tensor_nbytes
from qcheck.classify.table import candidates
from qcheck.model import TensorInfo
from qcheck.typed import as_dict

HQQ_META = ("nbits", "group_size", "shape", "axis", "packing", "unpack_view_dtype", "view_as_float", "quant_scale",
            "quant_zero", "compute_dtype", "offload_meta", "encoded_state_dict", "stores_quant_config",
            "channel_wise", "optimize", "round_zero")
#: longest torchao per-tensor JSON string parsed (real ones are a few hundred bytes)
MAX_META_JSON = 65536


def _find(d: Any, key: str, depth: int = 0) -> Any:
    """First value of ``key`` anywhere in a nested dict (HQQ nests its params per layer tag)."""
    if depth > 6 or not isinstance(d, dict):
        return None
    if key in d and not isinstance(d[key], dict):
        return d[key]
    for v in d.values():
        found = _find(v, key, depth + 1)
        if found is not None:
            return found
    return None


def hqq_hints(q: dict[str, Any] | None) -> Hints:
    """HQQ nests nbits/group_size per layer tag: the first found applies."""
    return Hints(bits=as_int(_find(q, "nbits")), group_size=as_int(_find(q, "group_size")))


def view_hints(view: ConfigView) -> Hints:
    """HQQ's bits/group for the scanner, from its nested config."""
    return hqq_hints(view.quant)


def scan_hqq(tensors: Mapping[str, TensorInfo], claimed: set[str], hints: Hints) -> list[QLinear]:
    """HQQ ``W_q`` + ``scale`` + ``zero`` (+ its per-layer metadata tensors)."""
    out = []
    for name in candidates(tensors, hints.table, lasts=("W_q",)):
        t = tensors[name]
        if name in claimed or not name.endswith(".W_q"):
            continue
        prefix = name[: -len(".W_q")]
        scale, zero = sibling(tensors, prefix, "scale"), sibling(tensors, prefix, "zero")
        if scale is None or zero is None:
            continue
        bits, group = hints.for_module(prefix)
        nbytes = tensor_nbytes(t)
        logical = nbytes * 8 // bits if bits and nbytes is not None else None
        names = [name, scale.name, zero.name] + [n for m in HQQ_META if (n := f"{prefix}.{m}") in tensors]
        out.append(QLinear(name=prefix, method="hqq", layout="hqq", tensors=names, logical=logical, bits=bits,
                           group_size=group, granularity="group", weight_dtype=int_word(bits),
                           scale_dtype=container_word(scale.dtype), zero_point=True, producer="hqq"))
    return out


def scan_aqlm(tensors: Mapping[str, TensorInfo], claimed: set[str], hints: Hints) -> list[QLinear]:
    """AQLM ``codes`` [out/og, in/ig, ncb] + ``codebooks`` [ncb, 2**nbits, og, ig] + ``scales``."""
    out = []
    for name in candidates(tensors, hints.table, lasts=("codes",)):
        t = tensors[name]
        if name in claimed or not name.endswith(".codes") or len(t.shape) != 3:
            continue
        prefix = name[: -len(".codes")]
        books = sibling(tensors, prefix, "codebooks")
        scales = sibling(tensors, prefix, "scales")
        if books is None or scales is None or len(books.shape) != 4:
            continue
        ncb, size, og, ig = books.shape
        nbits = size.bit_length() - 1 if size > 0 and size & (size - 1) == 0 else None
        logical = t.shape[0] * og * t.shape[1] * ig
        bits = ncb * nbits / (og * ig) if nbits and og * ig > 0 else None
        out.append(QLinear(name=prefix, method="aqlm", layout="aqlm", tensors=[name, books.name, scales.name],
                           logical=logical, bits=bits, granularity=None, weight_dtype=None,
                           scale_dtype=container_word(scales.dtype), producer="aqlm"))
    return out


def _torchao_types(metadata: dict[str, Any]) -> dict[str, str]:
    """tensor name -> torchao ``_type`` from ``__metadata__`` (``tensor_names`` + one JSON per tensor)."""
    types: dict[str, str] = {}
    for key, raw in metadata.items():
        if key == "tensor_names" or not isinstance(raw, str) or not raw.startswith("{") or len(raw) > MAX_META_JSON:
            continue
        try:
            value = json.loads(raw)
        except (ValueError, RecursionError):  # hostile nesting must not escape as an internal error
            continue
        if isinstance(value, dict) and isinstance(value.get("_type"), str):
            types[key] = value["_type"]
    return types


def _torchao_names(metadata: dict[str, Any]) -> list[str]:
    raw = metadata.get("tensor_names")
    if not isinstance(raw, str) or len(raw) > 64 * MAX_META_JSON:
        return []
    try:
        names = json.loads(raw)
    except (ValueError, RecursionError):
        return []
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []


def scan_torchao(tensors: Mapping[str, TensorInfo], claimed: set[str], hints: Hints) -> list[QLinear]:
    """torchao tensor subclasses flattened into safetensors: ``__metadata__["tensor_names"]`` lists the
    parameters, each with a JSON ``{"_type": "Float8Tensor", "_data": ..., "_tensor_data_names": [...]}``;
    the parts are named ``{module}._{param}_{attr}`` (torchao safetensors_support.py, current) or
    ``{param}:{attr}`` (earlier versions)."""
    metadata = hints.metadata
    if "tensor_names" not in metadata:
        return []
    types = _torchao_types(metadata)
    groups: dict[str, list[str]] = {}
    for param in _torchao_names(metadata):
        if types.get(param, "Tensor") in ("Tensor", "torch.Tensor"):
            continue
        module, _, leaf = param.rpartition(".")
        prefixes = (f"{param}:", f"{module}._{leaf}_" if module else f"_{leaf}_")
        parts = [n for n in tensors if n.startswith(prefixes) and n not in claimed]
        if parts:
            groups[param] = parts
    out = []
    for param, names in groups.items():
        module, _, leaf = param.rpartition(".")
        qdata = tensors.get(f"{param}:qdata") or tensors.get(f"{module}._{leaf}_qdata")
        if qdata is None:
            continue
        ttype = types.get(param, "")
        logical: int | None
        if "Float8" in ttype or qdata.dtype.upper().startswith("F8"):
            bits, wdt = 8, container_word(qdata.dtype) if qdata.dtype.upper().startswith("F8") else "float8_e4m3"
            logical = qdata.numel
        elif "Int4" in ttype:
            bits, wdt = 4, "int4"
            nbytes = tensor_nbytes(qdata)
            logical = nbytes * 2 if nbytes is not None else None  # two int4 per byte; a dtype of no known size: unknown
        else:
            bits, wdt = 8, "int8"
            logical = qdata.numel
        scale = tensors.get(f"{param}:scale") or tensors.get(f"{module}._{leaf}_scale")
        prefix = module if leaf == "weight" else param
        out.append(QLinear(name=prefix, method="torchao", layout=f"torchao-{ttype or 'tensor'}", tensors=sorted(names),
                           logical=logical, bits=bits, granularity=None, weight_dtype=wdt,
                           scale_dtype=container_word(scale.dtype) if scale else None, producer="torchao"))
    return out


# --- config readers ----------------------------------------------------------------------------------

def _own_config(view: ConfigView, draft: Draft, method: str) -> dict[str, Any]:
    """Methods whose name is their producer and their quant_method: claim them and read the exclusions."""
    q = view.quant or {}
    draft.expected_method = draft.producer = draft.config_method = method
    draft.excluded = excluded_modules(q)
    return q


def apply_hqq(view: ConfigView, draft: Draft, family: str, tensor_method: str | None) -> None:
    """HqqConfig: nbits and group size, ``skip_modules``."""
    q = _own_config(view, draft, "hqq")
    draft.expected_bits = as_int(_find(q, "nbits"))
    draft.expected_group = as_int(_find(q, "group_size"))
    draft.zero_point = True


def apply_torchao(view: ConfigView, draft: Draft, family: str, tensor_method: str | None) -> None:
    """TorchAoConfig: the quant_type name (string or AOBaseConfig ``_type``) says the activation scheme."""
    q = _own_config(view, draft, "torchao")
    qt = q.get("quant_type")
    if isinstance(qt, str):
        draft.format = qt
    elif isinstance(qt, dict):
        inner = qt.get("default")
        default = inner if isinstance(inner, dict) else qt
        if isinstance(default.get("_type"), str):
            draft.format = default["_type"]
    fmt = (draft.format or "").lower()
    if "int8_dynamic_activation" in fmt or "int8dynamicactivation" in fmt:
        draft.activation_dtype, draft.activation_scheme = "int8", "dynamic per-token"
    elif "float8dynamicactivation" in fmt or "float8_dynamic_activation" in fmt:
        draft.activation_dtype, draft.activation_scheme = "float8_e4m3", "dynamic"


def apply_aqlm(view: ConfigView, draft: Draft, family: str, tensor_method: str | None) -> None:
    """AqlmConfig: codebook count and size, group shape."""
    q = _own_config(view, draft, "aqlm")
    ncb, nb = as_int(q.get("num_codebooks")), as_int(q.get("nbits_per_codebook"))
    ig, og = as_int(q.get("in_group_size")), as_int(q.get("out_group_size"))
    if ncb and nb and ig and og:
        draft.format = f"{ncb}x{nb} codebooks, groups {og}x{ig}"


def _quark_method(spec: dict[str, Any]) -> str:
    dtype = str(spec.get("dtype") or "").lower()
    group = as_int(spec.get("group_size"))
    if dtype.startswith("fp8"):
        return "fp8"
    if dtype in ("int8", "uint8"):
        return "int8"
    if dtype in ("int4", "uint4", "int2", "int3"):
        return "int4"
    if dtype.startswith("fp6"):
        return "mxfp6"
    if dtype in ("fp4", "mx4", "mxfp4"):
        fmt = str(spec.get("scale_format") or "").lower()
        return "nvfp4" if group == 16 and fmt != "e8m0" else "mxfp4"
    return "unknown"


def _quark_dtype(spec: Any) -> str | None:
    if not isinstance(spec, dict):
        return None
    d = str(spec.get("dtype") or "").lower()
    if d == "fp4":
        return "fp4_e2m1"
    return config_word(d)


_QUARK_KV_PATTERNS = 64
_QUARK_LAYER_ENTRIES = 4096


def apply_quark(view: ConfigView, draft: Draft, family: str, tensor_method: str | None) -> None:
    """Quark: global weight/input specs, ``exclude``, KV cache from ``kv_cache_group`` output specs."""
    q = view.quant or {}
    draft.producer = "quark"
    draft.config_method = "quark"
    draft.excluded = excluded_modules(q)
    g = as_dict(q.get("global_quant_config"))
    w = g.get("weight")
    if isinstance(w, list):
        w = w[0] if w and isinstance(w[0], dict) else None
    if not isinstance(w, dict):
        draft.warn(f"{view.quant_where}: Quark config has no global_quant_config.weight")
        return
    method = _quark_method(w)
    draft.expected_method = method
    scheme = str(w.get("qscheme") or "").lower()
    group = as_int(w.get("group_size"))
    draft.scale_granularity = {"per_tensor": "per-tensor", "per_channel": "per-channel",
                               "per_group": "group"}.get(scheme, scheme or None)
    draft.expected_group = -1 if scheme == "per_channel" else (group if scheme == "per_group" else None)
    draft.weight_dtype = _quark_dtype(w)
    draft.expected_bits = {"fp8": 8, "int8": 8, "int4": 4, "mxfp4": 4, "nvfp4": 4, "mxfp6": 6}.get(method)
    inp = g.get("input_tensors")
    if isinstance(inp, list):
        inp = inp[0] if inp else None
    draft.activation_dtype = _quark_dtype(inp)
    if isinstance(inp, dict) and draft.activation_dtype:
        when = "dynamic" if inp.get("is_dynamic") else "static"
        qs = str(inp.get("qscheme") or "").lower()
        ig = as_int(inp.get("group_size"))
        draft.activation_scheme = (f"{when} per-group {ig}" if qs == "per_group" and ig else
                                   f"{when} {qs.replace('_', '-')}" if qs else when)
    sym = w.get("symmetric")
    draft.zero_point = (not sym) if isinstance(sym, bool) else None
    export = as_dict(q.get("export"))
    draft.format = first(export, "weight_format", "pack_method")
    kv_group = export.get("kv_cache_group")
    if isinstance(kv_group, list) and kv_group:
        layers = as_dict(q.get("layer_quant_config"))
        # Real Quark configs name two or three KV patterns and a handful of layer entries; bound both so a
        # hostile config cannot make this substring search quadratic in its size.
        keys = [k for k in kv_group[:_QUARK_KV_PATTERNS] if isinstance(k, str)]
        for pattern, spec in list(layers.items())[:_QUARK_LAYER_ENTRIES]:
            text = str(pattern)
            if any(k in text for k in keys) and isinstance(spec, dict):
                draft.kv_cache_dtype = _quark_dtype(spec.get("output_tensors"))
                if draft.kv_cache_dtype:
                    draft.kv_cache_declared = "kv_cache_group"
                    out = as_dict(spec.get("output_tensors"))
                    draft.kv_cache_static = out.get("is_dynamic") is not True
                    break
    if method == "mxfp6":
        # Quark packs FP6 four values into three bytes; the FP4 scanner assumed two per byte
        for ql in draft.qlinears:
            if ql.layout == "mxfp4-packed" and draft.tensors[ql.tensors[1]].shape:
                nbytes = tensor_nbytes(draft.tensors[ql.tensors[0]]) or 0
                ql.method, ql.layout, ql.bits = "mxfp6", "mxfp6-packed", 6
                ql.logical = nbytes * 8 // 6
                ql.weight_dtype = draft.weight_dtype
                cols = draft.tensors[ql.tensors[0]].shape[-1] * 8 // 6
                ql.group_size = exact_div(cols, draft.tensors[ql.tensors[1]].shape[-1])


def apply_named(view: ConfigView, draft: Draft, family: str, tensor_method: str | None) -> None:
    """quanto/EETQ map onto canonical methods; other known names stay ``unknown`` with a warning."""
    q = view.quant or {}
    method = view.quant_method or ""
    draft.config_method = method
    draft.producer = method
    draft.excluded = excluded_modules(q)
    if method == "eetq":
        draft.expected_method, draft.expected_bits = "int8", 8
    elif method == "quanto":
        weights = str(q.get("weights") or "").lower()
        draft.expected_method = {"int8": "int8", "int4": "int4", "int2": "int4", "float8": "fp8"}.get(weights, "unknown")
        draft.activation_dtype = config_word(q.get("activations")) if q.get("activations") else None
    else:
        draft.expected_method = "unknown"
        draft.warn(f"{view.quant_where}: quant_method {method!r} has no qcheck method of its own; reported as unknown")
