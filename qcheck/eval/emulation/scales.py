"""The per-tensor FP8 KV-cache scales a checkpoint ships (``k_scale``, ``v_scale``, one ``kv_scale`` for both, and
``q_scale``), by decoder layer, as vLLM and SGLang load them (vllm model_executor/layers/quantization/kv_cache.py
:106-160: a single ``kv_scale`` serves K and V; a checkpoint without them runs with 1.0; only per-tensor scales)."""

from __future__ import annotations

import re
from pathlib import Path

from qcheck.errors import InputError
from qcheck.eval.emulation.kv import KVScales
from qcheck.limits import DEFAULT_LIMITS, Limits

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_LEAVES = {"k_scale": "k", "v_scale": "v", "kv_scale": "kv", "q_scale": "q"}


def checkpoint_kv_scales(path: str, limits: Limits = DEFAULT_LIMITS) -> KVScales:
    """The KV scales of a safetensors checkpoint (file or directory); empty for GGUF files and checkpoints without."""
    p = Path(path)
    if not p.exists() or p.suffix == ".gguf":
        return KVScales()
    from qcheck.readers import load_checkpoint

    checkpoint = load_checkpoint(str(p), limits)
    if checkpoint.container != "safetensors":
        return KVScales()
    wanted = {name: _LEAVES[name.rpartition(".")[2]] for name in checkpoint.tensors
              if name.rpartition(".")[2] in _LEAVES and _LAYER.search(name)}
    if not wanted:
        return KVScales()
    from qcheck.eval.simulate import read_tensor

    root = p if p.is_dir() else p.parent
    k: dict[int, float] = {}
    v: dict[int, float] = {}
    q: dict[int, float] = {}
    for name, side in sorted(wanted.items()):
        match = _LAYER.search(name)
        assert match is not None
        layer = int(match.group(1))
        count = checkpoint.tensors[name].numel  # from the bounded header: refused before any data is read
        if count != 1:
            raise InputError(f"a {count}-value KV cache scale: vLLM and SGLang take only per-tensor FP8 KV scales",
                             where=f"tensor {name}")
        tensor = read_tensor(root, checkpoint, name)
        value = float(tensor.float().reshape(()))
        if not value > 0 or value != value or value == float("inf"):
            raise InputError(f"KV cache scale {value} is not a positive finite number", where=f"tensor {name}")
        if side in ("k", "kv"):
            k[layer] = value
        if side in ("v", "kv"):
            v[layer] = value
        if side == "q":
            q[layer] = value
    return KVScales(k=k, v=v, q=q)
