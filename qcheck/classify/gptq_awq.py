"""GPTQ and AWQ integer packs (``qweight``/``qzeros``/``scales`` [+``g_idx``]) and their configs
(docs/research/formats.md §4.6, §4.7).

GPTQ packs along the input rows: ``qweight [in*bits/32, out]``, ``g_idx [in]``. AutoAWQ GEMM packs
along the output columns: ``qweight [in, out*bits/32]``. Both have ``scales [in/group, out]``. So
bits and group size are recomputed from shapes and checked against the config, which can be stale.
"""

from __future__ import annotations

from collections.abc import Mapping

from qcheck.classify.base import Draft, Hints, QLinear, exact_div, prod, row_group
from qcheck.classify.configs import ConfigView, as_int, excluded_modules, first
from qcheck.classify.dtypes import container_word, int_word
from qcheck.classify.table import candidates
from qcheck.model import TensorInfo
from qcheck.readers.dtype_bits import SAFETENSORS_BITS

#: the integer words a ``qweight`` can pack into (GPTQ/AWQ exports use I32)
_INT_WORDS = frozenset({"I8", "U8", "I16", "U16", "I32", "U32", "I64", "U64"})


def scan(tensors: Mapping[str, TensorInfo], claimed: set[str], hints: Hints) -> list[QLinear]:
    """``qweight`` packs: GPTQ (along inputs, ``g_idx``), AWQ GEMM (along outputs) or AWQ GEMV."""
    out: list[QLinear] = []
    for name in candidates(tensors, hints.table, lasts=("qweight",)):
        t = tensors[name]
        if name in claimed or not name.endswith(".qweight") or len(t.shape) < 2:
            continue
        prefix = name[: -len(".qweight")]
        scales = tensors.get(f"{prefix}.scales")
        if scales is None or len(scales.shape) < 2:
            continue
        qzeros = tensors.get(f"{prefix}.qzeros")
        g_idx = tensors.get(f"{prefix}.g_idx")
        if g_idx is not None and (len(g_idx.shape) != 1 or g_idx.shape[0] <= 0):
            g_idx = None
        lead = prod(t.shape[:-2])
        rows, cols = t.shape[-2], t.shape[-1]
        srows, out_dim = scales.shape[-2], scales.shape[-1]
        pack = _word_bits(t.dtype)
        if pack is None:
            continue
        names = [name, scales.name] + ([qzeros.name] if qzeros else []) + ([g_idx.name] if g_idx else [])
        bits_hint, group_hint = hints.for_module(prefix)
        if g_idx is None and cols != out_dim and srows == rows and srows > 1:
            out.append(_awq_gemv(prefix, names, t, scales, pack, bits_hint, group_hint))
            continue
        if g_idx is not None or cols == out_dim:
            layout = "gptq"
            in_dim = g_idx.shape[-1] if g_idx is not None else None
            if in_dim is None:
                in_dim = rows * pack // bits_hint if bits_hint else None
            bits = pack * rows / in_dim if in_dim else None
        else:
            layout = "awq-gemm"
            in_dim = rows
            bits = pack * cols / out_dim if out_dim else None
        group, whole = row_group(in_dim, srows, hints.for_module(prefix)[1])
        if bits is not None and bits.is_integer():
            bits = int(bits)
        logical = lead * in_dim * out_dim if in_dim else None
        out.append(QLinear(name=prefix, method="gptq" if layout == "gptq" else "awq", layout=layout, tensors=names,
                           logical=logical, bits=bits, group_size=group, whole_row=whole,
                           granularity="per-channel" if group == -1 else "group",
                           weight_dtype=int_word(bits), scale_dtype=container_word(scales.dtype),
                           zero_point=None))
    return out


def _awq_gemv(prefix: str, names: list[str], t: TensorInfo, scales: TensorInfo, pack: int, bits_hint: int | None,
              group_hint: int | None) -> QLinear:
    """AutoAWQ GEMV (``WQLinear_GEMV``): ``qweight [out, in*bits/32]``, ``scales [out, ceil(in/group/8)*8]``
    (zero-padded to a multiple of 8), so the group comes from the config when the padding hides it."""
    bits = bits_hint or 4
    out_dim, cols = t.shape[-2], t.shape[-1]
    in_dim = cols * pack // bits
    scols = scales.shape[-1]
    group: int | None = group_hint
    if not (group_hint and group_hint > 0 and -(-in_dim // group_hint // 8) * 8 == scols):
        group = exact_div(in_dim, scols)
    return QLinear(name=prefix, method="awq", layout="awq-gemv", tensors=names,
                   logical=prod(t.shape[:-2]) * out_dim * in_dim, bits=bits, group_size=group, granularity="group",
                   weight_dtype=int_word(bits), scale_dtype=container_word(scales.dtype))


def _word_bits(dtype: str) -> int | None:
    """Bits of the integer word a ``qweight`` packs into; a float or unknown dtype packs nothing (no guess)."""
    upper = dtype.upper()
    return SAFETENSORS_BITS[upper] if upper in _INT_WORDS else None


def _bits_group(d: dict | None) -> tuple[int | None, int | None]:
    return as_int(first(d, "bits", "w_bit")), as_int(first(d, "group_size", "q_group_size"))


def apply_config(view: ConfigView, draft: Draft, family: str, tensor_method: str | None) -> None:
    """``gptq``/``awq``/``auto-round`` configs in config.json and quantize_config.json/quant_config.json."""
    q = view.quant or {}
    side_name, side = next(iter(view.side.items()), (None, None))
    method = view.quant_method or ""
    draft.config_method = method or (side_name and f"({side_name})")
    if family == "auto-round":
        packing = str(first(q, "packing_format", "backend") or "").lower()
        family = "awq" if "awq" in packing else "gptq"
        draft.producer = "auto-round"
        draft.format = packing or None
    draft.expected_method = family
    bits, group = _bits_group(q) if q else (None, None)
    sbits, sgroup = _bits_group(side)
    if q and side is not None:
        for label, a, b in (("bits", bits, sbits), ("group_size", group, sgroup)):
            if a is not None and b is not None and a != b:
                draft.mismatch(side_name or "quantize_config.json",
                               f"{label} {b} disagrees with {view.quant_where} {label} {a}")
    draft.expected_bits = bits if bits is not None else sbits
    draft.expected_group = group if group is not None else sgroup
    both = {**(side or {}), **q}
    draft.excluded = excluded_modules(side, q)
    if family == "gptq":
        desc = first(q, "desc_act")
        desc = first(side, "desc_act") if desc is None else desc
        draft.act_order = bool(desc) if isinstance(desc, bool) else None
        sym = first(both, "sym")
        draft.zero_point = (not sym) if isinstance(sym, bool) else None
        fmt = first(both, "checkpoint_format", "format")
        draft.format = draft.format or (str(fmt) if fmt else None)
        if draft.producer is None:
            draft.producer = _gptq_producer(both)
    else:
        zp = first(both, "zero_point")
        draft.zero_point = bool(zp) if isinstance(zp, bool) else None
        ver = first(both, "version")
        draft.format = draft.format or (str(ver).lower() if ver else None)
        if draft.producer is None:
            backend = str(first(both, "backend") or "").lower()
            draft.producer = "llm-awq" if backend == "llm-awq" else "autoawq"
        layouts = {x.layout for x in draft.qlinears if x.method == "awq"}
        if draft.format in ("gemv", "gemv_fast") and "awq-gemm" in layouts:
            draft.mismatch(view.quant_where or "config", f"AWQ version {draft.format!r}, but the qweight/scales "
                                                         "shapes are the GEMM layout")
        elif draft.format == "gemm" and "awq-gemv" in layouts:
            draft.mismatch(view.quant_where or "config", "AWQ version 'gemm', but the qweight/scales shapes are "
                                                         "the GEMV layout")


def _gptq_producer(cfg: dict) -> str:
    meta = cfg.get("meta")
    quantizer = meta.get("quantizer") if isinstance(meta, dict) else None
    from qcheck.typed import as_str

    text = (as_str(quantizer) or "").lower()
    if "gptqmodel" in text:
        return "gptqmodel"
    if "optimum" in text:
        return "optimum"
    return "auto-gptq"
