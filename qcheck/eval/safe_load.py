"""What ``qcheck eval`` lets transformers load: never code, never a pickle.

transformers runs a checkpoint's own Python when its config has ``auto_map`` and remote code is
trusted, and asks on stdin when ``trust_remote_code`` is left unset; it ``torch.load``s
``pytorch_model.bin`` (a pickle) when no safetensors weights it recognises are there, and also any
non-safetensors shard a ``model.safetensors.index.json`` names. So before transformers sees a
directory, qcheck reads its JSON itself (bounded) and refuses:

- custom code: ``auto_map`` in ``config.json`` (or its nested text config) or ``tokenizer_config.json``;
- weights that would not come from safetensors: no ``model.safetensors`` / ``model.safetensors.index.json``
  (what ``from_pretrained(use_safetensors=True)`` accepts), or an index naming a non-safetensors shard.

Every transformers call then passes ``trust_remote_code=False`` (``NO_CODE``) and, for weights,
``use_safetensors=True``: transformers itself refuses what this check might miss.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qcheck.errors import InputError
from qcheck.limits import DEFAULT_LIMITS, Limits

#: keyword arguments for every transformers ``from_pretrained``/``from_config``: never run or ask about code
NO_CODE: dict[str, Any] = {"trust_remote_code": False}
#: the weight files ``from_pretrained(use_safetensors=True)`` takes (transformers ``SAFE_WEIGHTS_NAME`` / ``_INDEX_NAME``)
SAFE_WEIGHTS = "model.safetensors"
SAFE_INDEX = "model.safetensors.index.json"
#: weight files transformers loads with ``torch.load`` (``WEIGHTS_NAME`` / ``WEIGHTS_INDEX_NAME``)
PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json")


def _read(path: Path, limits: Limits) -> dict[str, Any] | None:
    from qcheck.readers import LocalFileSet
    from qcheck.readers.jsonfile import load_json
    from qcheck.source import regular_file

    if not regular_file(path):  # absent; a FIFO, device, broken link or loop is an InputError, never "absent"
        return None
    return load_json(LocalFileSet(path.parent), path.name, limits)


def refuse_custom_code(directory: str, role: str, limits: Limits = DEFAULT_LIMITS) -> None:
    """Raise if the model directory asks transformers to import its own Python (``auto_map``)."""
    root = Path(directory)
    if not root.is_dir():
        return
    for name in ("config.json", "tokenizer_config.json"):
        data = _read(root / name, limits)
        if data is None:
            continue
        nested = [data.get(k) for k in ("text_config", "llm_config", "language_config")]
        if "auto_map" in data or any(isinstance(n, dict) and "auto_map" in n for n in nested):
            raise InputError(f"{name} has auto_map: the {role} ships its own Python code, and qcheck eval never "
                             "runs a checkpoint's code (trust_remote_code is always False); use a model whose "
                             "architecture transformers implements", path=directory)


def refuse_pickle_weights(directory: str, role: str, limits: Limits = DEFAULT_LIMITS) -> None:
    """Raise unless transformers would take this directory's weights from safetensors files only."""
    root = Path(directory)
    if (root / SAFE_WEIGHTS).is_file():
        return
    index = _read(root / SAFE_INDEX, limits)
    if index is not None:
        weight_map = index.get("weight_map")
        shards = set(weight_map.values()) if isinstance(weight_map, dict) else set()
        bad = sorted(str(s) for s in shards if not (isinstance(s, str) and s.endswith(".safetensors")))
        if bad or not shards:
            what = f"names non-safetensors shards ({', '.join(bad[:3])})" if bad else "has no weight_map"
            raise InputError(f"{SAFE_INDEX} {what}: transformers would torch.load them; qcheck eval loads "
                             "weights only from safetensors", path=directory)
        return
    pickles = [n for n in PICKLE_WEIGHTS if (root / n).is_file()]
    others = sorted(p.name for p in root.glob("*.safetensors"))
    if pickles:
        beside = (f" ({', '.join(others[:3])} beside it is not a name transformers loads: it wants {SAFE_WEIGHTS} "
                  f"or {SAFE_INDEX})" if others else "")
        raise InputError(f"pickle-only {role}: transformers would torch.load {pickles[0]}{beside}; qcheck eval loads "
                         "weights only from safetensors: convert the checkpoint to safetensors", path=directory)
    raise InputError(f"no {SAFE_WEIGHTS} or {SAFE_INDEX}: the {role} must be a transformers checkpoint saved as "
                     "safetensors", path=directory)


def check_reference(directory: str, limits: Limits = DEFAULT_LIMITS) -> None:
    """Everything transformers will read from the reference: no code, safetensors weights."""
    refuse_custom_code(directory, "reference", limits)
    refuse_pickle_weights(directory, "reference", limits)
