"""PEFT adapters: ``adapter_config.json`` (+ ``adapter_model.safetensors``) -> ``Inspection.adapter``.

An adapter is not a model: hosted providers and engines judge it by its rank, its target modules and
whether it uses DoRA. The config is a claim; the tensors are the truth. PEFT stores LoRA as
``<module>.lora_A.weight`` ``[r, in]`` and ``<module>.lora_B.weight`` ``[out, r]`` (embeddings:
``lora_embedding_A`` ``[r, vocab]`` / ``lora_embedding_B`` ``[dim, r]``; DoRA adds
``lora_magnitude_vector``), so rank and target modules are recomputed from names and shapes and every
disagreement with the config becomes a warning naming both values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from qcheck.model import Adapter, Checkpoint, Inspection, TensorInfo
from qcheck.typed import as_dict

ADAPTER_CONFIG = "adapter_config.json"
#: ``<module>.lora_A.weight``, ``<module>.lora_A.<adapter name>.weight``, ``<module>.lora_embedding_A[.<name>]``
_LORA = re.compile(r"^(?P<module>.+?)\.lora_(?P<emb>embedding_)?(?P<ab>[AB])(?:\.(?P<name>[^.]+))?(?:\.weight)?$")
_DORA = re.compile(r"\.lora_magnitude_vector(?:\.[^.]+)?(?:\.weight)?$")
#: config values larger than this are not ranks anyone trains (hostile or broken input): ignored with a warning
MAX_RANK = 1 << 16
_SHOWN = 6


def is_adapter(checkpoint: Checkpoint) -> bool:
    """A PEFT adapter: ``adapter_config.json`` was read and the only weights are PEFT's ``adapter_model.*``
    (a full model that merely ships an adapter config beside its shards stays a model)."""
    if ADAPTER_CONFIG not in checkpoint.configs:
        return False
    weights = [f.name.rsplit("/", 1)[-1] for f in checkpoint.files if f.kind in ("safetensors", "pickle")]
    return bool(weights) and all(w.startswith("adapter_model.") for w in weights)


def apply_adapter(checkpoint: Checkpoint, insp: Inspection) -> None:
    """Fill ``insp.adapter`` from adapter_config.json, cross-checked against the LoRA tensors (if readable)."""
    cfg = checkpoint.configs.get(ADAPTER_CONFIG)
    if not isinstance(cfg, dict):
        insp.warnings.append(f"{ADAPTER_CONFIG} is not a JSON object; the adapter fields were not read")
        return
    warn = insp.warnings.append
    modules = _lora_modules(checkpoint.tensors, warn)
    raw_type = cfg.get("peft_type")
    if isinstance(raw_type, str) and raw_type.strip():
        kind = raw_type.strip().lower()
    else:
        kind = "lora" if modules else "unknown"
        warn(f"{ADAPTER_CONFIG} has no peft_type; " + ("LoRA tensors found, reported as lora" if modules else
                                                      "reported as unknown"))
    rank = _rank(cfg.get("r"), warn)
    alpha = cfg.get("lora_alpha")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        alpha = None
    pattern = as_dict(cfg.get("rank_pattern"))
    has_pattern = bool(pattern)
    targets_cfg = cfg.get("target_modules")
    base = cfg.get("base_model_name_or_path")
    to_save = cfg.get("modules_to_save")
    dora_cfg = cfg.get("use_dora") is True
    dora_tensors = any(_DORA.search(n) for n in checkpoint.tensors)

    ranks = {m: r for m, r in modules.items() if r is not None}
    tensor_max = max(ranks.values()) if ranks else None
    derived = sorted({m.rsplit(".", 1)[-1] for m in modules})
    if isinstance(targets_cfg, list) and all(isinstance(t, str) for t in targets_cfg):
        targets = sorted(set(targets_cfg))
    else:
        targets = derived
        if isinstance(targets_cfg, str) and targets_cfg:
            where = "from the tensors" if derived else "unknown: no LoRA tensors"
            warn(f"{ADAPTER_CONFIG} target_modules is the pattern {targets_cfg!r}; target modules {where}")

    if checkpoint.container == "safetensors" and kind == "lora":
        _cross_check(modules, ranks, rank, pattern if has_pattern else {}, targets_cfg, warn)
        if dora_cfg != dora_tensors:
            warn(f"{ADAPTER_CONFIG} says use_dora={str(dora_cfg).lower()}, but the tensors "
                 f"{'have' if dora_tensors else 'have no'} lora_magnitude_vector (DoRA) entries")
    elif checkpoint.container == "pickle":
        warn("adapter weights are a pickle (adapter_model.bin): rank and target modules are as the config "
             "says, not checked against the tensors")

    insp.adapter = Adapter(
        type=kind,
        rank=rank if rank is not None else (tensor_max if not has_pattern else None),
        # the largest rank of any module (rank_pattern can raise single modules above r): what limits apply to
        max_rank=tensor_max if tensor_max is not None else _config_max(rank, pattern if has_pattern else {}),
        alpha=alpha,
        target_modules=targets,
        base_model=base if isinstance(base, str) and base else None,
        modules_to_save=sorted(x for x in to_save if isinstance(x, str)) if isinstance(to_save, list) else [],
        use_dora=dora_cfg or dora_tensors,
        rank_pattern=has_pattern,
    )


def _rank(value: Any, warn: Any) -> int | None:
    if value is None:
        warn(f"{ADAPTER_CONFIG} has no r (rank); the rank is taken from the tensors")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_RANK:
        warn(f"{ADAPTER_CONFIG} r = {value!r} is not a rank (an integer 1..{MAX_RANK}); ignored")
        return None
    return value


def _config_max(rank: int | None, pattern: dict[str, Any]) -> int | None:
    values = [v for v in pattern.values() if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_RANK]
    if rank is not None:
        values.append(rank)
    return max(values) if values else None


def _lora_modules(tensors: Mapping[str, TensorInfo], warn: Any) -> dict[str, int | None]:
    """Module path -> rank from its lora_A/lora_B pair (None when the pair disagrees or is incomplete)."""
    pairs: dict[str, dict[str, TensorInfo]] = {}
    for name, t in tensors.items():
        m = _LORA.match(name)
        if m:
            pairs.setdefault(m.group("module"), {})[m.group("ab")] = t
    out: dict[str, int | None] = {}
    bad: list[str] = []
    for module, pair in pairs.items():
        a, b = pair.get("A"), pair.get("B")
        if a is None or b is None:
            have = (a or b).name  # type: ignore[union-attr]
            bad.append(f"{have} has no lora_{'B' if a else 'A'} partner")
            out[module] = None
            continue
        if len(a.shape) < 2 or len(b.shape) < 2:
            bad.append(f"{a.name} {list(a.shape)} / {b.name} {list(b.shape)} are not matrices")
            out[module] = None
            continue
        if a.shape[0] != b.shape[1]:
            bad.append(f"{module}: lora_A gives rank {a.shape[0]} ({list(a.shape)}), lora_B gives rank "
                       f"{b.shape[1]} ({list(b.shape)})")
            out[module] = None
            continue
        out[module] = a.shape[0]
    if bad:
        more = f" (+{len(bad) - _SHOWN} more)" if len(bad) > _SHOWN else ""
        warn(f"malformed LoRA pairs: {'; '.join(bad[:_SHOWN])}{more}")
    return out


def _covers(target: str, module: str) -> bool:
    """PEFT's list matching: a target names a module when it is the module's path or a dotted suffix of it."""
    return module == target or module.endswith("." + target)


def _cross_check(modules: dict[str, int | None], ranks: dict[str, int], rank: int | None,
                 pattern: dict[str, Any], targets_cfg: Any, warn: Any) -> None:
    """Config rank and target modules against what the tensors hold."""
    if not modules:
        warn(f"{ADAPTER_CONFIG} says LoRA, but no lora_A/lora_B tensors were found")
        return
    if rank is not None:
        allowed = {rank} | {v for v in pattern.values() if isinstance(v, int)}
        off = {m: r for m, r in ranks.items() if r not in allowed}
        if off:
            seen = sorted(set(off.values()))
            example = next(iter(off))
            what = f"r={rank}" + (" (and its rank_pattern)" if pattern else "")
            warn(f"rank mismatch: {ADAPTER_CONFIG} says {what}, but the tensors have rank "
                 f"{', '.join(map(str, seen))} ({len(off)} of {len(ranks)} modules, e.g. {example})")
    if isinstance(targets_cfg, list) and all(isinstance(t, str) for t in targets_cfg):
        unused = sorted(t for t in set(targets_cfg) if not any(_covers(t, m) for m in modules))
        uncovered = sorted(m for m in modules if not any(_covers(t, m) for t in targets_cfg))
        if unused:
            warn(f"{ADAPTER_CONFIG} target_modules names {', '.join(unused)}, but no LoRA tensors adapt "
                 f"{'it' if len(unused) == 1 else 'them'}")
        if uncovered:
            names = sorted({m.rsplit('.', 1)[-1] for m in uncovered})
            warn(f"LoRA tensors adapt {', '.join(names)} ({len(uncovered)} modules, e.g. {uncovered[0]}), which "
                 f"{ADAPTER_CONFIG} target_modules ({', '.join(sorted(set(targets_cfg)))}) does not list")
