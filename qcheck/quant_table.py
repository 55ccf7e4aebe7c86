"""Which quant fits: one row per model of a repo or directory (each GGUF quant, or safetensors variant) on the
chosen engine x GPU, with its size, bits per weight, status, memory fit (fits / needs offload / does not fit)
and the largest context that fits.

This is ``qcheck check TARGET --gpu G``'s answer when TARGET holds several models (instead of asking to pick
one); ``--all`` keeps the per-model detail. The rows come from the same verdicts and memory estimates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from qcheck.check import ResultSet

if TYPE_CHECKING:
    from qcheck.limits import Limits
    from qcheck.memory import MemoryEstimate

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


def _fit(memory: MemoryEstimate | None) -> str:
    if memory is None:
        return "unknown"
    if memory.fits is True:
        return "fits"
    if memory.fits is None:
        return "unknown" if memory.gpu_memory_bytes else "no memory figure"
    offload = memory.offload
    if offload:
        if offload.n_cpu_moe is not None:
            return f"offload: --n-cpu-moe {offload.n_cpu_moe}"
        if offload.ngl:
            return f"offload: -ngl {offload.ngl}/{offload.n_layers}"
        return "does not fit"
    if memory.gpus_needed:
        return f"needs {memory.gpus_needed} GPUs"
    return "does not fit"


def variant_name(path: str) -> str | None:
    """Which safetensors variant a model path names, for a table row: the sub-folder of a Hub repo
    (``org/name:fp8/model.safetensors`` -> ``fp8/``), the branch (``org/name@gptq-4bit-32g`` -> ``@gptq-4bit-32g``),
    both, or a local variant directory's name; None for a GGUF file or a plain repo."""
    import os

    from qcheck.errors import UsageError
    from qcheck.hub.target import origin_of, parse_target

    if os.path.isdir(path):
        return os.path.basename(os.path.normpath(path)) or None
    if path.lower().endswith(".gguf") or origin_of(path) == "local":  # a local file: no branch or folder in it
        return None
    try:
        target = parse_target(path)
    except UsageError:
        return None
    selector = target.selector or ""
    if selector.lower().endswith(".gguf"):
        return None
    branch = target.revision or ""
    folder = selector.rsplit("/", 1)[0] + "/" if "/" in selector else ""
    name = (f"@{branch}" if branch else "") + (" " if branch and folder else "") + folder
    return name or None


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
            mem = v.memory
            speed = mem.speed if mem is not None else None
            rows.append({
                "path": ins.path, "quant": str(label or q.method), "variant": variant_name(ins.path), "size_bytes": ins.size_bytes,
                "bits_per_weight": q.bits_per_weight or _DTYPE_BITS.get((ins.dtype or "").lower()), "engine": v.engine, "gpu": v.gpu or v.arch,
                "status": v.status, "fit": _fit(mem), "fits": mem.fits if mem is not None else None,
                "max_context": mem.max_context if mem is not None and (mem.fits or mem.max_context_gpus > 1)
                else None,
                "max_context_gpus": mem.max_context_gpus if mem is not None else 1,
                "model_context": mem.model_context if mem is not None else None,
                "context": mem.context if mem is not None else None,
                "decode_tokens_per_s": speed.decode_tokens_per_s if speed is not None else None,
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
    try:  # a weight file here (a link loop or other unreadable entry raises: the reader reports it as one line)
        if any(e.name.endswith((".safetensors", ".gguf", ".bin", ".pt", ".pth")) and e.is_file() for e in entries):
            return []
    except OSError:
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
    notes: list[str] = field(default_factory=list)  # e.g. branches that hold no model

    @classmethod
    def from_set(cls, rs: ResultSet, notes: Sequence[str] = ()) -> QuantTable:
        return cls(rs.target, rs.results, rs.kind, rs.schema, quants=quant_rows(rs.results), notes=list(notes))

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        data["quants"] = self.quants
        if self.notes:
            data["notes"] = self.notes
        return data


#: at most this many branches of one repo are tabled (``org/name@*``)
MAX_BRANCHES = 64


def hub_branches(repo_id: str, limits: Limits) -> list[str]:
    """The branch names of a Hub repo (``GET /api/models/{repo}/refs``, one bounded JSON request through the
    Hub client: retries, budget, token redaction), ``main`` first, at most ``MAX_BRANCHES``."""
    import re

    from qcheck.errors import InputError, RemoteError
    from qcheck.hub.http import HubClient, hub_endpoint
    from qcheck.net import Call
    from qcheck.readers.jsonfile import loads_document

    client = HubClient.from_env()
    url = f"{client.endpoint or hub_endpoint()}/api/models/{repo_id}/refs"
    resp = client.request("GET", url, Call(max_bytes=limits.max_json_bytes + 1), repo_id=repo_id, what="repo refs")
    where = f"{repo_id} (repo refs)"
    if len(resp.body) > limits.max_json_bytes:
        raise InputError(f"repo refs are over {limits.max_json_bytes} bytes (limit max_json_bytes)", path=where)
    try:
        data = loads_document(resp.body, name="repo refs", limits=limits, path=where)
    except InputError as exc:
        raise RemoteError(f"the Hub answered something that is not a list of refs: {exc}") from None
    raw = data.get("branches") if isinstance(data, dict) else None
    if not isinstance(raw, list):
        raise RemoteError(f"{where}: the Hub's answer has no list of branches")
    names = []
    for entry in raw:
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and 0 < len(name) <= 256 and re.fullmatch(r"[^\s:@\\]+", name) \
                and ".." not in name:
            names.append(name)
    names.sort(key=lambda n: (n != "main", n))
    return names[:MAX_BRANCHES]


def branch_targets(target: str, limits: Limits) -> list[str]:
    """For ``org/name@*[:selector]`` (every branch of a Hub repo): one target per branch, ``org/name@branch``;
    empty for any other target."""
    from qcheck.hub.target import hub_target

    if "@*" not in target:
        return []
    t = hub_target(target)
    if t is None or t.revision != "*":
        return []
    tail = f":{t.selector}" if t.selector else ""
    return [f"{t.repo_id}@{b}{tail}" for b in hub_branches(t.repo_id, limits)]


def render_text(table: QuantTable) -> str:
    """The table for people: quant, size, bits/weight, engine x GPU, status, fit, max context, decode ceiling."""
    variants = any(r.get("variant") for r in table.quants)
    head = [*(["variant"] if variants else []), "quant", "size", "bpw", "engine x gpu", "status", "memory",
            "max context", "decode tok/s*"]
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
        body.append([*([r.get("variant") or "-"] if variants else []), r["quant"], size, bpw,
                     f"{r['engine']} x {r['gpu']}", r["status"], r["fit"], ctx, dec])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body, strict=False)]
    lines = [f"{table.target}: {len({r['path'] for r in table.quants})} models", ""]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=False)).rstrip())
    for row in body:
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=False)).rstrip())
    ctxs = {r["context"] for r in table.quants if r["context"]}
    lines.append("")
    lines.append("memory at context " + ", ".join(str(c) for c in sorted(ctxs)) + " (docs/memory.md); max context: "
                 "the largest that fits one GPU at the batch (or the GPUs it needs); * decode: an upper bound from memory bandwidth "
                 "and the engine's per-step floor (estimate)")
    for note in table.notes:
        lines.append(note)
    lines.append(f"--all shows each model's detail; {len(table.quants)} row(s) (exit {table.exit_code})")
    return "\n".join(lines) + "\n"
