"""Which quant fits: one row per model of a repo or directory (each GGUF quant, or safetensors variant) on the
chosen engine x GPU, with its size, bits per weight, status, memory fit (fits / needs offload / does not fit)
and the largest context that fits.

This is ``qcheck check TARGET --gpu G``'s answer when TARGET holds several models (instead of asking to pick
one); ``--all`` keeps the per-model detail. The rows come from the same verdicts and memory estimates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from qcheck.check import ResultSet

GIB = 1024**3
_DTYPE_BITS = {"bfloat16": 16.0, "float16": 16.0, "float32": 32.0}


def human(size: int | None) -> str:
    """Bytes for a table cell: '4.58 GiB', '214 KiB'."""
    if not size:
        return "?"
    for unit, scale in (("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:.2f} {unit}" if unit == "GiB" else f"{size / scale:.0f} {unit}"
    return f"{size} B"


def _fit(memory: dict[str, Any] | None) -> str:
    if not memory:
        return "unknown"
    if memory.get("fits") is True:
        return "fits"
    if memory.get("fits") is None:
        return "unknown" if memory.get("gpu_memory_bytes") else "no memory figure"
    offload = memory.get("offload")
    if offload:
        if offload.get("n_cpu_moe") is not None:
            return f"offload: --n-cpu-moe {offload['n_cpu_moe']}"
        if offload.get("ngl"):
            return f"offload: -ngl {offload['ngl']}/{offload['n_layers']}"
        return "does not fit"
    if memory.get("gpus_needed"):
        return f"needs {memory['gpus_needed']} GPUs"
    return "does not fit"


def quant_rows(results: Sequence[Any]) -> list[dict[str, Any]]:
    """One row per (model, verdict), smallest model first."""
    rows = []
    for result in results:
        ins = result.inspection
        q = ins.quantization
        from qcheck.hub.select import quant_label

        label = (quant_label(ins.path.rsplit("/", 1)[-1].rsplit(":", 1)[-1]) or q.gguf_file_type
                 or (q.method if q.method != "none" else (ins.dtype or "unquantised")))
        for v in result.verdicts:
            mem = v.memory or {}
            rows.append({
                "path": ins.path, "quant": str(label or q.method), "size_bytes": ins.size_bytes,
                "bits_per_weight": q.bits_per_weight or _DTYPE_BITS.get((ins.dtype or "").lower()), "engine": v.engine, "gpu": v.gpu or v.arch,
                "status": v.status, "fit": _fit(mem), "fits": mem.get("fits"),
                "max_context": mem.get("max_context") if mem.get("fits") or (mem.get("max_context_gpus") or 1) > 1
                else None,
                "max_context_gpus": mem.get("max_context_gpus") or 1,
                "model_context": mem.get("model_context"), "context": mem.get("context"),
                "decode_tokens_per_s": (mem.get("speed") or {}).get("decode_tokens_per_s"),
            })
    rows.sort(key=lambda r: (r["size_bytes"] or 0, r["path"], r["engine"], r["gpu"] or ""))
    return rows


#: at most this many variant subdirectories are tabled
MAX_VARIANTS = 64


def variant_dirs(target: str) -> list[str]:
    """Subdirectories of a local directory that hold no weights itself, each with a ``config.json`` and
    ``*.safetensors`` (a repo of safetensors variants: bf16/, fp8/, awq/ ...); empty when it is not one."""
    import os

    if not os.path.isdir(target) or os.path.islink(target):
        return []
    try:
        entries = sorted(os.scandir(target), key=lambda e: e.name)
    except OSError:
        return []
    if any(e.is_file() and e.name.endswith((".safetensors", ".gguf", ".bin", ".pt", ".pth")) for e in entries):
        return []
    found = []
    for e in entries:
        if not e.is_dir(follow_symlinks=False) or e.name.startswith("."):
            continue
        try:
            names = set(os.listdir(e.path))
        except OSError:
            continue
        if "config.json" in names and any(n.endswith(".safetensors") for n in names):
            found.append(e.path)
        if len(found) >= MAX_VARIANTS:
            break
    return found if len(found) >= 2 else []


@dataclass
class QuantTable(ResultSet):
    """A check-set with the which-quant-fits table on top (the JSON adds ``quants``)."""

    quants: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_set(cls, rs: ResultSet) -> QuantTable:
        return cls(rs.target, rs.results, rs.kind, rs.schema, quants=quant_rows(rs.results))

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        data["quants"] = self.quants
        return data


def render_text(table: QuantTable) -> str:
    """The table for people: quant, size, bits/weight, engine x GPU, status, fit, max context, decode ceiling."""
    head = ["quant", "size", "bpw", "engine x gpu", "status", "memory", "max context", "decode tok/s*"]
    body = []
    for r in table.quants:
        size = human(r["size_bytes"])
        bpw = f"{r['bits_per_weight']:.2f}" if r["bits_per_weight"] else "?"
        ctx = "-" if r["max_context"] is None else str(r["max_context"])
        if r["max_context"] is not None and r["model_context"] and r["max_context"] >= r["model_context"]:
            ctx += " (all)"
        if r["max_context"] is not None and r["max_context_gpus"] > 1:
            ctx += f" on {r['max_context_gpus']} GPUs"
        dec = "-" if r["decode_tokens_per_s"] is None else f"{r['decode_tokens_per_s']:,.0f}"
        body.append([r["quant"], size, bpw, f"{r['engine']} x {r['gpu']}", r["status"], r["fit"], ctx, dec])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=False)]
    lines = [f"{table.target}: {len({r['path'] for r in table.quants})} models", ""]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=False)).rstrip())
    for row in body:
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=False)).rstrip())
    ctxs = {r["context"] for r in table.quants if r["context"]}
    lines.append("")
    lines.append("memory at context " + ", ".join(str(c) for c in sorted(ctxs)) + " (docs/memory.md); max context: "
                 "the largest that fits one GPU at the batch (or the GPUs it needs); * decode: an upper bound from memory bandwidth "
                 "(estimate)")
    lines.append(f"--all shows each model's detail; {len(table.quants)} row(s) (exit {table.exit_code})")
    return "\n".join(lines) + "\n"
