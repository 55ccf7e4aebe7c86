"""Human text for ``qcheck inspect``: a one-line summary, aligned details, a per-type table, then
warnings and findings. Plain text only: stable when piped, the same on every terminal."""

from __future__ import annotations

from typing import Any

from qcheck.formats import REGISTRY, Format
from qcheck.model import Adapter, Inspection, KvScales, Quantization

_ACT_BITS = {"float8_e4m3": 8, "float8_e5m2": 8, "int8": 8, "fp4_e2m1": 4, "int4": 4}


def human_count(n: int | None) -> str:
    """8030261248 -> ``8.0B``; 1443072 -> ``1.44M``."""
    if n is None:
        return "?"
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            value = n / div
            return f"{value:.1f}{unit}" if value >= 10 or unit in ("T", "B") else f"{value:.2f}{unit}"
    return str(n)


def human_bytes(n: int | None) -> str:
    """Decimal units, as model cards and the Hub show sizes: ``4.92 GB``."""
    if n is None:
        return "? bytes"
    for div, unit in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n} bytes"


def _scheme(q: Quantization) -> str | None:
    """``W8A8``/``W4A16`` for methods with a nominal weight width."""
    fmt = REGISTRY.get(q.method)
    if q.weight_bits is None or (fmt is not None and not fmt.nominal_scheme):
        return None
    act = _ACT_BITS.get(q.activation_dtype or "", 16)
    return f"W{q.weight_bits}A{act}"


def _granularity(q: Quantization) -> str | None:
    if q.block_size:
        return f"{'x'.join(map(str, q.block_size))} block"
    if q.group_size == -1 or q.scale_granularity == "per-channel":
        return "per-channel"
    if q.group_size:
        return f"group {q.group_size}"
    if q.scale_granularity:
        return q.scale_granularity
    return None


def quant_phrase(q: Quantization) -> str:
    """``FP8 W8A8 (float8_e4m3, per-channel weights, float8_e4m3 activations), compressed-tensors``."""
    if q.method == "gguf":
        ft = q.gguf_file_type or "unknown file type"
        bpw = f" ({q.bits_per_weight:.2f} bits/weight)" if q.bits_per_weight else ""
        return f"GGUF {ft}{bpw}"
    if q.method == "none":
        return f"{(q.weight_dtype or 'float').upper().replace('BFLOAT', 'BF').replace('FLOAT', 'FP')} (unquantised)"
    fmt = REGISTRY.get(q.method) or Format(q.method, q.method)
    head = " ".join(p for p in (fmt.label, _scheme(q)) if p)
    if fmt.shows_bits_per_weight and q.bits_per_weight:
        head += f" {q.bits_per_weight:.2f} bpw"
    details = []
    if q.weight_dtype:
        details.append(q.weight_dtype)
    gran = _granularity(q)
    if gran:
        details.append(f"{gran} weights" if fmt.granularity_of_weights else gran)
    if fmt.format_first and q.format:
        details.insert(0, q.format)
    if q.scale_dtype and fmt.shows_scale_dtype:
        details.append(f"{q.scale_dtype} scales")
    if q.activation_dtype:
        details.append(f"{q.activation_scheme + ' ' if q.activation_scheme else ''}{q.activation_dtype} activations")
    if q.act_order:
        details.append("act-order")
    if q.zero_point:
        details.append("zero point")
    text = head + (f" ({', '.join(details)})" if details else "")
    if q.producer:
        text += f", {q.producer}"
    return text


def adapter_phrase(adapter: Adapter) -> str:
    """``LoRA r=16, alpha 32, targets q_proj, v_proj, base meta-llama/Llama-3.1-8B``: the adapter in one line."""
    parts = [adapter.label + (f" r={adapter.rank}" if adapter.rank else "")]
    if adapter.max_rank and adapter.max_rank != adapter.rank:
        parts.append(f"max rank {adapter.max_rank}")
    if adapter.rank_pattern:
        parts.append("per-module ranks (rank_pattern)")
    if adapter.alpha is not None:
        parts.append(f"alpha {adapter.alpha}")
    if adapter.use_dora:
        parts.append("DoRA")
    targets = [str(t) for t in adapter.target_modules]
    parts.append(f"targets {', '.join(targets)}" if targets else "no target modules found")
    if adapter.modules_to_save:
        parts.append(f"also saves {', '.join(map(str, adapter.modules_to_save))}")
    if adapter.base_model:
        parts.append(f"base {adapter.base_model}")
    return ", ".join(parts)


def describe(inspection: Inspection) -> str:
    """The one-line summary: ``LlamaForCausalLM 8.0B params, GGUF Q4_K_M (4.89 bits/weight), 4.92 GB``."""
    if inspection.container == "pickle":
        return f"pickle checkpoint (never unpickled, not inspected), {human_bytes(inspection.size_bytes)}"
    if inspection.adapter is not None:
        base = inspection.adapter.base_model
        return (f"{inspection.adapter.label} adapter"
                f"{' for ' + base if base else ''}, {human_count(inspection.parameters)} params, "
                f"{quant_phrase(inspection.quantization)}, {human_bytes(inspection.size_bytes)}")
    who = inspection.architecture or inspection.model_type or "unknown architecture"
    return (f"{who} {human_count(inspection.parameters)} params, {quant_phrase(inspection.quantization)}, "
            f"{human_bytes(inspection.size_bytes)}")


def _files(insp: Inspection) -> str | None:
    names = [f.name for f in insp.files]
    if not names:
        return None
    if len(names) <= 6:
        return ", ".join(names)
    return f"{len(names)} ({', '.join(names[:3])}, ...)"


def _details(insp: Inspection) -> list[tuple[str, str]]:
    q = insp.quantization
    rows: list[tuple[str, Any]] = [
        ("path", insp.path),
        ("container", insp.container + (f" ({insp.gguf_split_count} split files)"
                                        if (insp.gguf_split_count or 1) > 1 else "")),
        ("files", _files(insp)),
        ("revision", insp.revision),
        ("architecture", insp.architecture),
        ("model type", insp.model_type if insp.model_type != insp.architecture else None),
        ("name", insp.name),
        ("parameters", f"{insp.parameters:,} ({human_count(insp.parameters)})" if insp.parameters is not None
         else None),
        ("size", f"{insp.size_bytes:,} bytes ({human_bytes(insp.size_bytes)})" if insp.size_bytes else None),
        ("adapter", adapter_phrase(insp.adapter) if insp.adapter is not None else None),
        ("method", q.method),
        ("producer", q.producer),
        ("config", q.config_method),
        ("format", q.format),
        ("file type", q.gguf_file_type),
        ("weight bits", q.weight_bits),
        ("bits/weight", f"{q.bits_per_weight:.4g}" if q.bits_per_weight is not None else None),
        ("group size", {-1: "-1 (per-channel)"}.get(q.group_size, q.group_size) if q.group_size is not None
         else None),
        ("block size", "x".join(map(str, q.block_size)) if q.block_size else None),
        ("scales", q.scale_granularity),
        ("weight dtype", q.weight_dtype),
        ("scale dtype", q.scale_dtype),
        ("activations", (f"{q.activation_dtype} ({q.activation_scheme})" if q.activation_scheme
                         else q.activation_dtype) if q.activation_dtype else
         ("not quantised" if q.method not in ("none", "gguf", "unknown") else None)),
        ("zero point", {True: "yes (asymmetric)", False: "no (symmetric)"}.get(q.zero_point)  # type: ignore[arg-type]
         if q.zero_point is not None else None),
        ("act-order", {True: "yes", False: "no"}[q.act_order] if q.act_order is not None else None),
        ("excluded", ", ".join(q.excluded) if q.excluded else None),
        ("KV cache", q.kv_cache_dtype or "not specified by the checkpoint"),
        ("KV scales", _kv_scales_line(q.kv_scales)),
        ("dtype", insp.dtype),
        ("context", f"{insp.context_length:,}" if insp.context_length else None),
        ("layers", insp.num_layers),
        ("hidden size", insp.hidden_size),
        ("heads", f"{insp.num_attention_heads} (KV {insp.num_kv_heads})" if insp.num_attention_heads and
         insp.num_kv_heads else insp.num_attention_heads),
        ("head dim", insp.head_dim),
        ("vocab", insp.vocab_size),
        ("experts", f"{insp.num_experts} ({insp.num_experts_used} active)" if insp.moe and insp.num_experts_used
         else (insp.num_experts if insp.moe else None)),
        ("tensors", insp.tensor_count if insp.container != "pickle" else None),
    ]
    return [(k, str(v)) for k, v in rows if v is not None and v != ""]


def _kv_scales_line(scales: KvScales | None) -> str | None:
    """``k/v 32 of 32 layers, q/prob none (static, kv_cache_scheme)``; None when there is nothing to say."""
    if scales is None or not (scales.declared_by or scales.k_scales or scales.v_scales or scales.q_scales):
        return None
    n = scales.attention_layers

    def cover(a: int, b: int) -> str:
        got = min(a, b)
        return "none" if not got else f"{got} of {n} layers" if n else f"{got} layers"

    line = f"k/v {cover(scales.k_scales, scales.v_scales)}, q/prob {cover(scales.q_scales, scales.prob_scales)}"
    if scales.declared_by:
        line += f" ({'static' if scales.static else 'dynamic'}, {scales.declared_by})"
    return line


def _table(insp: Inspection) -> list[str]:
    stats = insp.type_stats
    if not stats:
        return []
    total = sum(r["bytes"] or 0 for r in stats) or 0
    header = ("type", "tensors", "elements", "bytes", "share")
    body = []
    for r in stats:
        b = r["bytes"]
        share = f"{100 * b / total:.1f}%" if b is not None and total else "?"
        body.append((str(r["type"]), f"{r['tensors']:,}", f"{r['elements']:,}", f"{b:,}" if b is not None else "?",
                     share))
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(5)]
    lines = []
    for row in [header, *body]:
        cells = [row[0].ljust(widths[0])] + [row[i].rjust(widths[i]) for i in range(1, 5)]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def render_inspection(insp: Inspection) -> str:
    """The ``qcheck inspect`` text: summary line, aligned details, type table, then what needs attention."""
    lines = [describe(insp), ""]
    details = _details(insp)
    width = max(len(k) for k, _ in details)
    lines += [f"  {k.ljust(width)}  {v}" for k, v in details]
    table = _table(insp)
    if table:
        lines += ["", "Tensor types:", *table]
    if insp.pickle_globals:
        lines += ["", "Pickle imports (never executed):", *[f"  {g}" for g in insp.pickle_globals]]
    if insp.findings:
        lines += ["", "Findings:"]
        lines += [f"  [{f.kind}] {f.where}: {f.message}" for f in insp.findings]
    if insp.warnings:
        lines += ["", "Warnings:", *[f"  - {w}" for w in insp.warnings]]
    return "\n".join(lines) + "\n"


def render(result: Any) -> str:
    """Text for an ``InspectResult`` (or anything with an ``inspection``)."""
    return render_inspection(result.inspection)
