"""FP8 weights (E4M3/E5M2): per-tensor, per-channel, 128x128 block (DeepSeek ``weight_scale_inv``),
and the ``fp8`` / ``fbgemm_fp8`` configs (docs/research/formats.md §4.1).

Granularity is read from the scale's shape: 1 element -> per-tensor; ``[out]``/``[out,1]`` ->
per-channel; ``[ceil(out/b0), ceil(in/b1)]`` -> block; ``[out, in/g]`` -> group. U8/E8M0 scales with
one per 32 inputs are MXFP8.
"""

from __future__ import annotations

from collections.abc import Mapping

from qcheck.classify.base import Draft, Hints, QLinear, block_from, exact_div, prod, sibling
from qcheck.classify.configs import ConfigView, as_int, excluded_modules, first
from qcheck.classify.dtypes import FP8_DTYPES, container_word
from qcheck.classify.table import candidates
from qcheck.model import TensorInfo


def scan(tensors: Mapping[str, TensorInfo], claimed: set[str], hints: Hints) -> list[QLinear]:
    """Every ``*.weight`` stored in an FP8 dtype, with its scale's layout."""
    out: list[QLinear] = []
    for name in candidates(tensors, hints.table, dtypes=FP8_DTYPES):
        t = tensors[name]
        if name in claimed or not name.endswith(".weight") or t.dtype.upper() not in FP8_DTYPES:
            continue
        if len(t.shape) < 2:
            continue
        prefix = name[: -len(".weight")]
        scale = sibling(tensors, prefix, "weight_scale_inv", "weight_scale")
        q = QLinear(name=prefix, method="fp8", layout="fp8", tensors=[name], logical=t.numel, bits=8,
                    weight_dtype=container_word(t.dtype))
        inp = sibling(tensors, prefix, "input_scale")
        if inp is not None:
            q.tensors.append(inp.name)
            q.input_scale = True
        if scale is None:
            q.granularity = None
            out.append(q)
            continue
        q.tensors.append(scale.name)
        q.scale_dtype = container_word(scale.dtype)
        rows, cols = prod(t.shape[:-1]), t.shape[-1]
        out_dim = t.shape[-2]
        s = scale.shape
        if scale.dtype.upper() in ("U8", "F8_E8M0") and len(s) >= 2 and s[-2] == out_dim and s[-1] > 1:
            q.method, q.layout, q.scale_dtype = "mxfp8", "mxfp8", "e8m0"
            q.granularity = "group"
            q.group_size = exact_div(cols, s[-1])
        elif (scale.numel == 1 and not (len(s) == 2 and scale.name.endswith("weight_scale_inv"))) or (
            len(t.shape) > 2 and scale.numel == prod(t.shape[:-2])
        ):
            # A DeepSeek-style 2-D ``weight_scale_inv`` of [1, 1] is one 128x128 block, not a per-tensor scale.
            q.granularity = "per-tensor"
        elif scale.numel == rows and (len(s) == 1 or s[-1] == 1):
            q.granularity, q.group_size = "per-channel", -1
        elif len(s) == 4 and s[1] == 1 and s[3] == 1:  # ModelOpt FP8_PB_WO: [out_blk, 1, in_blk, 1]
            q.granularity = "block"
            q.block_size = [block_from(out_dim, s[0]) or 0, block_from(cols, s[2]) or 0]
            q.layout = "fp8-block-modelopt"
        elif len(s) >= 2 and s[-2] == out_dim and s[-1] > 1:
            q.granularity, q.group_size = "group", exact_div(cols, s[-1])
        elif len(s) >= 2:
            q.granularity = "block"
            q.block_size = [block_from(out_dim, s[-2]) or 0, block_from(cols, s[-1]) or 0]
            q.layout = "fp8-block"
        if scale.name.endswith("weight_scale_inv"):
            q.producer = "deepseek"
        out.append(q)
    return out


def apply_config(view: ConfigView, draft: Draft, family: str, tensor_method: str | None) -> None:
    """HF ``fp8`` (DeepSeek/FineGrainedFP8/vLLM Fp8Config) and ``fbgemm_fp8`` configs."""
    q = view.quant or {}
    method = view.quant_method or ""
    draft.expected_method = "fp8"
    draft.config_method = method
    draft.excluded = excluded_modules(q)
    if method == "fbgemm_fp8":
        draft.producer = "fbgemm"
        draft.activation_dtype = "float8_e4m3"  # dynamic per-row activations (FbgemmFp8Linear)
        draft.activation_scheme = "dynamic per-token"
        draft.scale_granularity = "per-channel"
        draft.expected_group = -1
        return
    fmt = first(q, "fmt")
    if isinstance(fmt, str):
        draft.weight_dtype = container_word("F8_" + fmt.upper()) if fmt.lower() in ("e4m3", "e5m2") else None
    block = q.get("weight_block_size")
    if isinstance(block, list) and len(block) == 2 and all(as_int(b) for b in block):
        draft.expected_block = [as_int(block[0]) or 0, as_int(block[1]) or 0]
    scheme = str(q.get("activation_scheme") or "").lower()
    if scheme in ("dynamic", "static"):
        draft.activation_dtype = "float8_e4m3"
        if scheme == "static":
            draft.activation_scheme = "static per-tensor"
        elif draft.expected_block:
            # DeepSeek-V3 README_WEIGHTS.md: "online quantization at a granularity of per-token-per-128-channel"
            draft.activation_scheme = f"dynamic per-token-group {draft.expected_block[1]}"
        else:
            draft.activation_scheme = "dynamic per-token"
    if any(t.endswith("weight_scale_inv") for t in draft.tensors):
        draft.producer = "deepseek"
