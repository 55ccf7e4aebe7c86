"""Finding the quantisation config: config.json, nested text/llm configs, and the side files.

Producers put it in different places (docs/research/formats.md §1, §7.2): ``quantization_config`` at the top level
or under ``text_config``/``llm_config`` (multimodal), ``compression_config`` (old compressed-tensors),
``quantization`` (MLX, no ``quant_method``), ``hf_quant_config.json`` (ModelOpt),
``quantize_config.json``/``quant_config.json`` (GPTQ/AWQ), ``quantization_config.json`` (EXL3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qcheck.model import Checkpoint

NESTED_KEYS = ("text_config", "llm_config", "language_config", "thinker_config", "text_model_config")
QUANT_KEYS = ("quantization_config", "compression_config")
SIDE_FILES = ("quantize_config.json", "quant_config.json")


@dataclass
class ConfigView:
    """What the JSON files of a checkpoint say, before any tensor is looked at."""

    config: dict[str, Any] = field(default_factory=dict)  # config.json
    model: dict[str, Any] = field(default_factory=dict)  # the language model's numbers (nested if multimodal)
    quant: dict[str, Any] | None = None  # the quantization config found
    quant_where: str | None = None  # where it was found, for messages
    quant_method: str | None = None  # quant_method lower-cased ("" when the dict has none)
    mlx: dict[str, Any] | None = None  # an MLX ``quantization`` block
    mlx_where: str | None = None
    hf_quant: dict[str, Any] | None = None  # hf_quant_config.json (ModelOpt)
    side: dict[str, dict[str, Any]] = field(default_factory=dict)  # quantize_config.json / quant_config.json
    exl3: dict[str, Any] | None = None  # quantization_config.json (EXL3)


def _dict(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def read_configs(ckpt: Checkpoint) -> ConfigView:
    """Collect every config a classifier may need into one view; missing files are simply absent."""
    view = ConfigView()
    cfg = _dict(ckpt.configs.get("config.json")) or {}
    view.config = cfg
    view.model = cfg
    for key in NESTED_KEYS:
        nested = _dict(cfg.get(key))
        if nested is None:
            continue
        if "hidden_size" not in cfg and ("hidden_size" in nested or "num_hidden_layers" in nested):
            view.model = {**nested, "architectures": cfg.get("architectures") or nested.get("architectures")}
            break

    places: list[tuple[str, dict[str, Any]]] = [("config.json", cfg)]
    places += [(f"config.json: {k}", d) for k in NESTED_KEYS if (d := _dict(cfg.get(k))) is not None]
    for where, holder in places:
        for key in QUANT_KEYS:
            q = _dict(holder.get(key))
            if q is None:
                continue
            # compressed-tensors' nested form {"quantization_config": {...}, "sparsity_config": ...}
            inner = _dict(q.get("quantization_config"))
            if inner is not None and "quant_method" not in q and "config_groups" in inner:
                q = {**inner, "quant_method": inner.get("quant_method", "compressed-tensors")}
            if view.quant is None:
                view.quant = q
                view.quant_where = f"{where}: {key}".replace("config.json: ", "config.json ", 1)
                if key == "compression_config" and "quant_method" not in q:
                    view.quant_method = "compressed-tensors"
        mlx = _dict(holder.get("quantization"))
        if mlx is not None and view.mlx is None and ("bits" in mlx or "group_size" in mlx or "mode" in mlx):
            view.mlx = mlx
            view.mlx_where = f"{where} quantization" if where != "config.json" else "config.json quantization"
    if view.quant is not None and view.quant_method is None:
        qm = view.quant.get("quant_method")
        view.quant_method = str(qm).strip().lower() if isinstance(qm, str) else ""
    if (view.mlx is None and view.quant is not None and not view.quant_method and "config_groups" not in view.quant
            and "bits" in view.quant and "group_size" in view.quant):
        # mlx-lm writes its block to quantization_config too (save_config); without quant_method it is MLX's
        view.mlx, view.mlx_where = view.quant, view.quant_where
    view.hf_quant = _dict(ckpt.configs.get("hf_quant_config.json"))
    for name in SIDE_FILES:
        d = _dict(ckpt.configs.get(name))
        if d is not None:
            view.side[name] = d
    view.exl3 = _dict(ckpt.configs.get("quantization_config.json"))
    return view


def first(d: dict[str, Any] | None, *keys: str) -> Any:
    """The first present, non-null value among ``keys``."""
    if not d:
        return None
    for k in keys:
        v = d.get(k)
        if v is not None:
            return v
    return None


def as_int(value: Any) -> int | None:
    """A config number as an int (``4``, ``4.0``, ``"4"``); anything else (booleans, NaN, infinities, values
    beyond 2**53 included) is None, so a malformed config field reads as absent instead of raising
    (``qcheck.typed``, the one typed boundary)."""
    from qcheck.typed import as_int as typed_int

    return typed_int(value)


#: every key name a method uses for "modules left unquantised" (docs/research/formats.md §7, item 3)
EXCLUDE_KEYS = ("ignore", "exclude_modules", "modules_to_not_convert", "ignored_layers", "llm_int8_skip_modules",
                "skip_modules", "exclude", "linear_weights_not_to_quantize")


def excluded_modules(*configs: dict[str, Any] | None) -> list[str]:
    """Excluded module names/patterns from every key spelling and GPTQModel ``-:`` rules; order kept,
    duplicates dropped. (MLX ``"module": false`` overrides are read by ``mlx.apply_config``: in other
    families a false value is a flag, not a module.)"""
    out: list[str] = []
    seen: set[str] = set()  # a hostile config may list millions: membership must not scan ``out``

    def add(item: Any) -> None:
        if isinstance(item, str) and item and item not in seen:
            seen.add(item)
            out.append(item)

    for cfg in configs:
        if not cfg:
            continue
        for key in EXCLUDE_KEYS:
            value = cfg.get(key)
            if isinstance(value, str):
                add(value)
            elif isinstance(value, list):
                for item in value:
                    add(item)
        dynamic = cfg.get("dynamic")
        if isinstance(dynamic, dict):
            for key in dynamic:
                if isinstance(key, str) and key.startswith("-:"):
                    add(key[2:])
    return out
