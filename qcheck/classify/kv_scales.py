"""KV-cache scales from the tensor headers: which attention layers ship ``k_scale``/``v_scale`` (and ``q_scale``/
``prob_scale`` for FP8 attention), checked against what the config declares.

An engine that stores the cache in FP8 multiplies by these scales; where a layer has none, vLLM and SGLang use
1.0 ("Using KV cache scaling factor 1.0 for fp8_e4m3"), which clips every K/V value above FP8's range (448 for
e4m3). The names are those vLLM's loader remaps (``model_loader/weight_utils.py`` ``maybe_remap_kv_scale_name``,
Quark's ``k_proj.output_scale``): ``.k_scale``, ``.v_scale``, ``.kv_scale`` (one scale for both, deprecated),
``.k_cache.scale``/``.v_cache.scale``, ``.q_scale``/``.q.scale``, ``.prob_scale``, and the Quark
``{k,v,q}_proj.output_scale`` / ``.prob_output_scale``. Header-only and C-speed over the name column: a MoE
checkpoint lists 10^5 tensors.
"""

from __future__ import annotations

import re

from qcheck.classify.base import Draft
from qcheck.classify.table import TensorTable
from qcheck.model import KvScales

#: last name component -> which scale it is (the component before it may refine it, see _SCALE_BY_PAIR)
_SCALE_BY_LAST = {"k_scale": "k", "v_scale": "v", "kv_scale": "kv", "q_scale": "q", "prob_scale": "prob",
                  "prob_output_scale": "prob"}
#: (component before the last, last) -> which scale (``k_cache.scale``, Quark ``k_proj.output_scale`` ...)
_SCALE_BY_PAIR = {("k_cache", "scale"): "k", ("v_cache", "scale"): "v", ("q", "scale"): "q",
                  ("k_proj", "output_scale"): "k", ("v_proj", "output_scale"): "v", ("q_proj", "output_scale"): "q"}
#: weights that mark a layer as an attention layer (a projection producing K)
_ATTENTION_MARKS = ("k_proj.", "qkv_proj.", "kv_a_proj_with_mqa.", "query_key_value.", "c_attn.", "Wqkv.",
                    "wqkv.", "qkqkv_proj.")
#: a layer index in a tensor name: the prefix up to and including the index is the layer's identity
_LAYER = re.compile(r"^(.*?(?:^|\.)(?:layers|h|blocks|block)\.\d+)\.")
#: towers whose attention caches nothing (vision/audio encoders of multimodal checkpoints)
_NOT_CACHED = ("vision", "visual", "image", "audio", "speech", "vit.", "encoder.")
#: at most this many missing layers are named
SHOWN = 8


def kv_scales(table: TensorTable, draft: Draft) -> KvScales:
    """The scale tensors per attention layer of a safetensors checkpoint, and what its config declares."""
    out = KvScales(declared_by=draft.kv_cache_declared, static=draft.kv_cache_static)
    attention: set[str] = set()
    joined = table.joined()
    for mark in _ATTENTION_MARKS:
        if mark in joined:
            attention.update(_layer(n) for n in table.names if mark in n)
    attention.discard("")
    attention = {a for a in attention if not any(t in a.lower() for t in _NOT_CACHED)}
    kinds: dict[str, set[str]] = {"k": set(), "v": set(), "q": set(), "prob": set()}
    scale_lasts = (*_SCALE_BY_LAST, "scale", "output_scale")
    for name in table.select(lasts=scale_lasts):
        head, _, last = name.rpartition(".")
        kind = _SCALE_BY_PAIR.get((head.rpartition(".")[2], last)) or _SCALE_BY_LAST.get(last)
        layer = _layer(name)
        if kind is None or not layer:
            continue
        for k in ("k", "v") if kind == "kv" else (kind,):
            kinds[k].add(layer)
    out.attention_layers = len(attention)
    out.k_scales, out.v_scales = len(kinds["k"] & attention), len(kinds["v"] & attention)
    out.q_scales, out.prob_scales = len(kinds["q"] & attention), len(kinds["prob"] & attention)
    if not attention:  # names outside the usual layer layout: count the scales themselves
        out.k_scales, out.v_scales = len(kinds["k"]), len(kinds["v"])
        out.q_scales, out.prob_scales = len(kinds["q"]), len(kinds["prob"])
    if out.declared_by or kinds["k"] or kinds["v"]:  # a plain checkpoint lacks them all: nothing to point at
        missing = attention - (kinds["k"] & kinds["v"])
        out.missing = sorted(missing, key=_natural)[:SHOWN]
    return out


def check_declared(scales: KvScales, kv_dtype: str | None, draft: Draft) -> None:
    """A config that declares a static quantised KV cache whose scale tensors are missing (on some or every
    attention layer) is a config/tensor mismatch: the engines that honour the declaration use 1.0 there."""
    if not scales.declared_by or not scales.static or scales.kv_complete or not scales.attention_layers:
        return
    covered = min(scales.k_scales, scales.v_scales)
    example = f" (e.g. {scales.missing[0]})" if scales.missing else ""
    draft.mismatch(scales.declared_by, f"declares a static {kv_dtype or 'quantised'} KV cache, but k_scale/v_scale "
                                       f"tensors cover {covered} of {scales.attention_layers} attention layers"
                                       f"{example}: engines that read the declaration use a scale of 1.0 there")


def _layer(name: str) -> str:
    m = _LAYER.match(name)
    return m.group(1) if m else ""


def _natural(text: str) -> tuple[str, int]:
    head, _, index = text.rpartition(".")
    return head, int(index) if index.isascii() and index.isdigit() else -1
