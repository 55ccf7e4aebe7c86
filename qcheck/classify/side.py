"""Which tensors describe quantisation rather than the model (scales, zero points, indices): one rule for the
tensor table (``qcheck.classify.table``) and the parameter count (``qcheck.classify.params``), below both."""

from __future__ import annotations

__all__ = ["SIDE_SUFFIXES", "is_side_tensor"]

#: last name component of tensors that describe quantisation, not the model
SIDE_SUFFIXES = frozenset({
    "k_scale", "v_scale", "kv_scale", "q_scale", "prob_scale", "input_scale", "output_scale", "input_global_scale",
    "weight_global_scale", "weight_scale", "weight_scale_inv", "weight_scale_2", "weight_zero_point",
    "weight_g_idx", "weight_shape", "pre_quant_scale", "g_idx", "qzeros", "input_zero_point", "output_zero_point",
    "bias_scale", "bias_zero_point", "SCB", "weight_format", "absmax", "quant_map", "nested_absmax",
    "nested_quant_map", "smooth_scale",
})


#: last name component -> side tensor? (a model repeats a few dozen components over 10^5 tensors; bounded)
_SIDE_LAST: dict[str, bool] = {}


def is_side_tensor(name: str) -> bool:
    """A tensor that stores quantisation state (scales, zeros, indices), never a model parameter."""
    last = name[name.rfind(".") + 1:]
    side = _SIDE_LAST.get(last)
    if side is None:
        # torchao ``{module}._weight_scale``, or a known suffix
        side = (last.startswith("_") and last.endswith(("_scale", "_zero_point"))) or last in SIDE_SUFFIXES
        if len(_SIDE_LAST) < 4096:
            _SIDE_LAST[last] = side
    return side or ".quant_state." in name or name.endswith((":scale", ":zero_point"))
