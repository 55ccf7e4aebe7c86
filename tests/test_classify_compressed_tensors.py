"""compressed-tensors at the level of its rules: which method a weight scheme stands for, what an activation or
weight granularity reads as, what the packed and integer layouts give from their shapes, and what the config's
groups say (llm-compressor's QuantizationArgs and config_groups, docs/research/formats.md §4.4)."""

from __future__ import annotations

from typing import Any

import pytest

from qcheck.classify import compressed_tensors as ct
from qcheck.classify.base import Draft, Hints
from qcheck.classify.configs import ConfigView
from qcheck.model import TensorInfo
from support import builders as b


@pytest.mark.parametrize("weights, fmt, method", [
    ({"num_bits": 8, "type": "float", "strategy": "channel"}, "float-quantized", "fp8"),
    ({"num_bits": 8, "type": "float", "strategy": "block"}, None, "fp8"),
    ({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 32}, "mxfp8-quantized", "mxfp8"),
    ({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 32}, None, "mxfp8"),
    ({"num_bits": 8, "type": "float", "group_size": 32}, None, "mxfp8"),
    ({"num_bits": 8, "type": "float", "strategy": "tensor_group", "group_size": 32}, None, "fp8"),
    ({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 33}, None, "fp8"),
    ({"num_bits": 8, "type": "float", "strategy": "group", "group_size": 128}, None, "fp8"),
    ({"num_bits": 8, "type": "FLOAT", "strategy": "channel"}, "MXFP8-quantized", "mxfp8"),
    ({"type": "float", "strategy": "tensor"}, None, "fp8"),  # num_bits defaults to 8
    ({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}, "nvfp4-pack-quantized", "nvfp4"),
    ({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 32}, None, "mxfp4"),
    ({"num_bits": 4, "type": "float", "strategy": "group", "group_size": 33}, None, "nvfp4"),
    ({"num_bits": 4, "type": "float", "group_size": 16}, "mxfp4-pack-quantized", "mxfp4"),
    ({"num_bits": 6, "type": "float", "group_size": 32}, None, "mxfp6"),
    ({"num_bits": 7, "type": "float"}, None, "unknown"),
    ({"num_bits": 8, "type": "int", "strategy": "channel"}, "int-quantized", "int8"),
    ({"num_bits": 4, "strategy": "group", "group_size": 128}, "pack-quantized", "int4"),
    ({}, None, "int8"),
])
def test_scheme_method(weights: dict[str, Any], fmt: str | None, method: str) -> None:
    assert ct.scheme_method(weights, fmt) == method


@pytest.mark.parametrize("args, dtype, scheme", [
    ({"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}, "float8_e4m3", "dynamic per-token"),
    ({"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}, "float8_e4m3", "static per-tensor"),
    ({"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "dynamic": "local"},
     "fp4_e2m1", "dynamic per-group 16"),
    ({"num_bits": 8, "type": "int", "strategy": "group", "group_size": 64, "dynamic": True}, "int8",
     "dynamic per-group 64"),
    ({"num_bits": 8, "type": "int", "strategy": "group", "dynamic": True}, "int8", "dynamic"),
    ({"num_bits": 8, "type": "int", "strategy": "channel"}, "int8", "static per-channel"),
    ({"num_bits": 8, "type": "int", "strategy": "block", "dynamic": "yes"}, "int8", "static"),
    ({"num_bits": 6, "type": "float"}, "float6", "static"),
    ({"type": "float"}, "float8_e4m3", "static"),
    ({}, "int8", "static"),
    (None, None, None), ("token", None, None),
])
def test_activation_dtype_and_scheme(args: Any, dtype: str | None, scheme: str | None) -> None:
    assert (ct._act_dtype(args), ct.act_scheme(args)) == (dtype, scheme)


@pytest.mark.parametrize("weights, expected", [
    ({"strategy": "tensor"}, ("per-tensor", None, None)),
    ({}, ("per-tensor", None, None)),
    ({"group_size": -1}, ("per-channel", -1, None)),
    ({"group_size": 128}, ("group", 128, None)),
    ({"strategy": "CHANNEL", "group_size": 128}, ("per-channel", -1, None)),
    ({"strategy": "block", "block_structure": [128, 128]}, ("block", None, [128, 128])),
    ({"strategy": "block", "block_structure": [128, "x"]}, ("block", None, [128, 0])),
    ({"strategy": "block", "block_structure": ["x", 64]}, ("block", None, [0, 64])),
    ({"strategy": "block", "block_structure": [128]}, ("block", None, None)),
    ({"strategy": "block", "block_structure": "128x128"}, ("block", None, None)),
    ({"strategy": "group", "group_size": 32}, ("group", 32, None)),
    ({"strategy": "tensor_group", "group_size": 16}, ("group", 16, None)),
    ({"strategy": "attn_head", "group_size": 8}, ("attn_head", 8, None)),
])
def test_weight_granularity(weights: dict[str, Any], expected: tuple[Any, ...]) -> None:
    assert ct._granularity(weights) == expected


# -------------------------------------------------------------------------------------------------- scans
def _scan(spec: dict[str, tuple[str, tuple[int, ...]]], hints: Hints | None = None,
          claimed: frozenset[str] = frozenset()) -> dict[str, Any]:
    tensors = {n: TensorInfo(n, d, s, b.nbytes(d, s)) for n, (d, s) in spec.items()}
    return {q.name: q for q in ct.scan(tensors, set(claimed), hints or Hints())}


def test_packed_int4_with_group_scales_from_the_group_or_the_bits():
    spec = {"a.weight_packed": ("I32", (64, 32)), "a.weight_scale": ("BF16", (64, 2)),
            "a.weight_zero_point": ("I32", (8, 2)), "a.weight_g_idx": ("I32", (256,)),
            "a.weight_shape": ("I64", (2,))}
    for hints in (Hints(bits=4, group_size=128), Hints(bits=4), Hints(group_size=128)):
        (q,) = _scan(spec, hints).values()
        assert (q.method, q.bits, q.group_size, q.logical, q.whole_row, q.granularity) == (
            "int4", 4, 128, 64 * 256, False, "group"), hints
        assert (q.weight_dtype, q.scale_dtype, q.zero_point, q.producer, q.input_scale) == (
            "int4", "bfloat16", True, "compressed-tensors", False)
        assert q.tensors == ["a.weight_packed", "a.weight_scale", "a.weight_zero_point", "a.weight_g_idx",
                             "a.weight_shape"]


def test_packed_per_channel_needs_the_bits_and_a_group_of_zero_is_no_group():
    spec = {"a.weight_packed": ("I32", (64, 32)), "a.weight_scale": ("BF16", (64, 1))}
    (q,) = _scan(spec, Hints(bits=4)).values()
    assert (q.bits, q.group_size, q.whole_row, q.granularity, q.logical) == (4, None, True, "group", 64 * 256)
    (q,) = _scan(spec, Hints(bits=4, group_size=-1)).values()
    assert (q.group_size, q.whole_row, q.granularity) == (-1, False, "per-channel")
    (q,) = _scan(spec, Hints(bits=4, group_size=256)).values()  # one scale row as wide as the layer: a group of 256
    assert (q.group_size, q.whole_row) == (256, False)
    (q,) = _scan(spec, Hints(group_size=128)).values()  # no bits: the input size is unknown
    assert (q.bits, q.logical, q.group_size) == (None, None, None)
    scalar = {"a.weight_packed": ("I32", (64, 32)), "a.weight_scale": ("BF16", ())}
    (q,) = _scan(scalar, Hints(bits=4, group_size=256)).values()
    assert (q.logical, q.group_size) == (64 * 256, 256)
    (q,) = _scan({**spec, "a.weight_scale": ("BF16", (64, 2))}, Hints(bits=4, group_size=0)).values()
    assert (q.group_size, q.logical) == (128, 64 * 256)  # group 0 is no group: the bits decide
    assert q.zero_point is False  # no zero-point tensor: symmetric
    (q,) = _scan({**spec, "a.weight_scale": ("BF16", (64, 256))}, Hints(group_size=1)).values()
    assert (q.group_size, q.logical) == (1, 64 * 256)  # groups of one input: the scale columns are the inputs


def test_packed_int8_and_64_bit_words_and_input_scales():
    spec = {"a.weight_packed": ("I64", (64, 16)), "a.weight_scale": ("F32", (64, 1)),
            "a.input_scale": ("F32", (1,)), "a.input_zero_point": ("I8", (1,))}
    (q,) = _scan(spec, Hints(bits=8, group_size=-1)).values()
    assert (q.method, q.bits, q.logical, q.weight_dtype, q.input_scale) == ("int8", 8, 64 * 128, "int8", True)
    assert q.tensors[-2:] == ["a.input_scale", "a.input_zero_point"]
    odd = {"a.weight_packed": ("I32", (64, 5)), "a.weight_scale": ("F32", (64, 1))}
    (q,) = _scan(odd, Hints(bits=3)).values()  # 5 words of 3-bit values: 53 inputs, not a whole number of bits
    assert (q.bits, q.weight_dtype) == (32 * 5 / 53, None)


def test_integer_weights_their_scales_and_quark_int4_words():
    spec = {"t.weight": ("I8", (64, 128)), "t.weight_scale": ("F32", (1,)),
            "c.weight": ("I8", (64, 128)), "c.weight_scale": ("F32", (64,)),
            "c1.weight": ("I8", (64, 128)), "c1.weight_scale": ("F32", (64, 1)),
            "g.weight": ("I8", (64, 128)), "g.weight_scale": ("F32", (64, 4)),
            "q.weight": ("I32", (64, 16)), "q.weight_scale": ("F32", (64, 1)),
            "bnb.weight": ("I8", (64, 128)), "bnb.weight_scale": ("F32", (1,)), "bnb.SCB": ("F32", (64,)),
            "f.weight": ("BF16", (64, 128)), "f.weight_scale": ("F32", (1,)),
            "v.weight": ("I8", (128,)), "v.weight_scale": ("F32", (1,)),
            "n.weight": ("I8", (64, 128))}
    out = _scan(spec)
    assert set(out) == {"t", "c", "c1", "g", "q"}  # not bnb's, not a float, not 1-D, not without a scale
    assert [(out[k].granularity, out[k].group_size) for k in ("t", "c", "c1", "g")] == [
        ("per-tensor", None), ("per-channel", -1), ("per-channel", -1), ("group", 32)]
    assert all((out[k].bits, out[k].logical, out[k].zero_point) == (8, 64 * 128, False) for k in ("t", "c", "g"))
    q = out["q"]  # I32 words of int4 (Quark ``pack_method: reorder``): 4 bits unless the config says otherwise
    assert (q.method, q.bits, q.logical, q.layout) == ("int4", 4, 64 * 128, "int-quantized")
    (q8,) = _scan({k: v for k, v in spec.items() if k.startswith("q.")}, Hints(bits=8)).values()
    assert (q8.method, q8.bits, q8.logical) == ("int8", 8, 64 * 64)
    (q3,) = _scan({"r.weight": ("I32", (64, 10)), "r.weight_scale": ("F32", (64, 1))}, Hints(bits=3)).values()
    assert q3.logical == 64 * 106  # 10 words x 32 / 3 rounds down: an integer count
    assert _scan(spec, claimed=frozenset({"t.weight"})).keys() == {"c", "c1", "g", "q"}


def test_group_scales_that_do_not_divide_the_input():
    (q,) = _scan({"g.weight": ("I8", (64, 100)), "g.weight_scale": ("F32", (64, 3))}).values()
    assert (q.granularity, q.group_size) == ("group", None)


def test_an_integer_weight_with_no_input_columns_has_no_group_size():
    """0 columns and 4 scale columns: no group can be read (not a group of 0 inputs, which no engine knows)."""
    (q,) = _scan({"z.weight": ("I8", (64, 0)), "z.weight_scale": ("F32", (64, 4))}).values()
    assert (q.granularity, q.group_size, q.logical) == ("group", None, 0)
    (one,) = _scan({"z.weight": ("I8", (64, 1)), "z.weight_scale": ("F32", (64, 1))}).values()  # one column
    assert (one.granularity, one.group_size) == ("per-channel", -1)


# ------------------------------------------------------------------------------------------------- config
def _apply(quant: dict[str, Any], tensor_method: str | None = None, where: str = "config.json quantization_config",
           quant_method: str | None = "compressed-tensors") -> Draft:
    draft = Draft(tensors={}, metadata={}, qlinears=[])
    view = ConfigView(quant=quant, quant_method=quant_method, quant_where=where)
    ct.apply_config(view, draft, "compressed-tensors", tensor_method)
    return draft


def test_the_group_matching_the_tensors_describes_them():
    groups = {"group_0": b.scheme(b.qargs(8, "float", "channel"), b.qargs(8, "float", "token", dynamic=True)),
              "group_1": b.scheme(b.qargs(4, "float", "tensor_group", group_size=16),
                                  b.qargs(4, "float", "tensor_group", group_size=16, dynamic="local"),
                                  fmt="nvfp4-pack-quantized"),
              "broken": "not a scheme", "no_weights": {"targets": ["Linear"], "weights": None}}
    quant = b.ct_config(groups, fmt="mixed-precision")
    draft = _apply(quant, tensor_method="nvfp4")
    assert (draft.expected_method, draft.expected_bits, draft.expected_group, draft.scale_granularity) == (
        "nvfp4", 4, 16, "group")
    assert (draft.activation_dtype, draft.activation_scheme) == ("fp4_e2m1", "dynamic per-group 16")
    assert draft.format == "mixed-precision (nvfp4-pack-quantized)" and draft.weight_dtype is None
    assert draft.declared_methods == ["nvfp4", "fp8"]
    assert "compressed-tensors config has several config_groups: group_0=fp8, group_1=nvfp4" in draft.warnings
    first = _apply(quant, tensor_method="int4")  # no group matches: the first describes them
    assert (first.expected_method, first.weight_dtype, first.format) == (
        "fp8", "float8_e4m3", "mixed-precision (mixed-precision)")
    one = _apply(b.ct_config({"group_0": groups["group_0"]}, fmt="float-quantized"), tensor_method="fp8")
    assert one.declared_methods == ["fp8"] and not any("several config_groups" in w for w in one.warnings)
    assert (one.producer, one.config_method, one.excluded) == ("compressed-tensors", "compressed-tensors", ["lm_head"])
    assert _apply(quant, quant_method=None).config_method == "compressed-tensors"


def test_groups_that_are_no_scheme_before_a_real_one_are_skipped():
    groups = {"broken": "not a scheme", "no_weights": {"targets": ["Linear"], "weights": None},
              "group_0": b.scheme(b.qargs(8, "float", "channel"), b.qargs(8, "float", "token", dynamic=True))}
    draft = _apply(b.ct_config(groups, fmt="float-quantized"), tensor_method="fp8")
    assert (draft.expected_method, draft.declared_methods) == ("fp8", ["fp8"])


def test_a_config_without_usable_groups_says_so():
    draft = _apply({"format": "pack-quantized", "config_groups": {"g": {"weights": "x"}}})
    assert draft.warnings == ["config.json quantization_config: compressed-tensors config has no config_groups "
                              "with weights"]
    assert (draft.format, draft.expected_method) == ("pack-quantized", None)


@pytest.mark.parametrize("actorder, expected", [(None, None), (True, True), (False, False), ("group", True),
                                                ("WEIGHT", True), ("static", True), ("dynamic", True),
                                                ("none", False), (3, False)])
def test_act_order(actorder: Any, expected: bool | None) -> None:
    groups = {"group_0": b.scheme(b.qargs(4, "int", "group", group_size=128, actorder=actorder))}
    assert _apply(b.ct_config(groups, fmt="pack-quantized")).act_order is expected


@pytest.mark.parametrize("symmetric, zero_point", [(True, False), (False, True), (None, None)])
def test_zero_point_from_symmetry(symmetric: Any, zero_point: bool | None) -> None:
    groups = {"group_0": b.scheme(b.qargs(4, "int", "group", group_size=128, symmetric=symmetric))}
    assert _apply(b.ct_config(groups, fmt="pack-quantized")).zero_point is zero_point


@pytest.mark.parametrize("dynamic, static", [(True, False), (False, True), (None, True), ("local", True)])
def test_kv_cache_scheme_is_static_unless_dynamic_true(dynamic: Any, static: bool) -> None:
    kv = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": dynamic}
    groups = {"group_0": b.scheme(b.qargs(8, "float", "channel"))}
    draft = _apply(b.ct_config(groups, fmt="float-quantized", kv=kv))
    assert (draft.kv_cache_dtype, draft.kv_cache_declared, draft.kv_cache_static) == (
        "float8_e4m3", "kv_cache_scheme", static)
    assert _apply(b.ct_config(groups, fmt="float-quantized")).kv_cache_declared is None
