"""The less common methods at the level of their rules (HQQ, AQLM, torchao, AMD Quark, quanto/EETQ): what each
scanner takes from names and shapes, what is skipped, and what each config reader says (docs/research/formats.md
§4.11-§4.14)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from qcheck.classify import others
from qcheck.classify.base import Draft, Hints
from qcheck.classify.configs import read_configs
from qcheck.model import Checkpoint
from support import builders as b


def _tensors(spec: dict) -> dict:
    return b.Fixture(spec).checkpoint().tensors


def _view(quant: dict) -> Any:
    return read_configs(Checkpoint(path="x", container="safetensors",
                                   configs={"config.json": {"quantization_config": quant}}))


def _draft(**kw: Any) -> Draft:
    return Draft(tensors=kw.pop("tensors", {}), metadata={}, qlinears=kw.pop("qlinears", []), **kw)


# --------------------------------------------------------------------------------------------------- HQQ
def test_hqq_finds_the_first_nested_value_at_most_six_levels_down():
    assert others._find({"a": {"b": {"nbits": 4}}, "nbits": {"x": 1}}, "nbits") == 4
    deep: Any = {"nbits": 3}
    for _ in range(6):
        deep = {"x": deep}
    assert others._find(deep, "nbits") == 3  # six levels of nesting: found
    assert others._find({"x": deep}, "nbits") is None  # seven: not searched
    assert others._find({"a": None, "b": [1], "c": {"nbits": 2}}, "nbits") == 2
    assert others.hqq_hints({"weight_quant_params": {"nbits": 4, "group_size": 64}}).for_module("m") == (4, 64)


def test_hqq_scan():
    spec = {"x.W_q": ("U8", (4, 4)),  # no scale/zero: skipped, the scan goes on
            "y.W_q": ("U8", (64, 32)), "y.scale": ("F16", (16, 1)),  # no zero: skipped
            "a.W_q": ("U8", (64, 32)), "a.scale": ("F16", (32, 1)), "a.zero": ("F16", (32, 1)),
            "a.nbits": ("I64", ()), "a.shape": ("I64", (2,)), "a.other": ("I64", ())}
    out = {q.name: q for q in others.scan_hqq(_tensors(spec), set(), Hints(bits=4, group_size=64))}
    assert set(out) == {"a"}
    a = out["a"]
    assert (a.bits, a.group_size, a.logical, a.weight_dtype, a.scale_dtype, a.zero_point) == (
        4, 64, 64 * 32 * 8 // 4, "int4", "float16", True)
    assert a.tensors == ["a.W_q", "a.scale", "a.zero", "a.nbits", "a.shape"]
    (q,) = others.scan_hqq(_tensors({k: v for k, v in spec.items() if k.startswith("a.")}), set(), Hints(bits=3))
    assert q.logical == 64 * 32 * 8 // 3  # floor
    (q,) = others.scan_hqq(_tensors({k: v for k, v in spec.items() if k.startswith("a.")}), set(), Hints())
    assert (q.bits, q.logical) == (None, None)
    assert others.scan_hqq(_tensors(spec), {"a.W_q"}, Hints(bits=4)) == []


def test_hqq_config():
    draft = _draft()
    others.apply_hqq(_view({"quant_method": "hqq", "quant_config": {"weight_quant_params": {"nbits": 4,
                                                                                             "group_size": 64}},
                            "skip_modules": ["lm_head"]}), draft, "hqq", "hqq")
    assert (draft.expected_method, draft.producer, draft.expected_bits, draft.expected_group, draft.zero_point,
            draft.excluded) == ("hqq", "hqq", 4, 64, True, ["lm_head"])


# -------------------------------------------------------------------------------------------------- AQLM
def test_aqlm_scan():
    spec = {"x.codes": ("I16", (8, 4)), "x.codebooks": ("F16", (1, 65536, 1, 8)),  # 2-D codes: skipped
            "x.scales": ("F16", (8, 1, 1, 1)),
            "y.codes": ("I16", (8, 4, 1)), "y.codebooks": ("F16", (1, 65536, 1, 8)),  # no scales: skipped
            "z.codes": ("I16", (8, 4, 1)), "z.codebooks": ("F16", (65536, 1, 8)), "z.scales": ("F16", (8, 1, 1, 1)),
            "a.codes": ("I16", (64, 16, 1)), "a.codebooks": ("F16", (1, 65536, 1, 8)),
            "a.scales": ("F16", (64, 1, 1, 1)),
            "c.codes": ("I16", (64, 16, 2)), "c.codebooks": ("F16", (2, 256, 1, 8)), "c.scales": ("F16", (64, 1, 1, 1)),
            "o.codes": ("I16", (64, 16, 1)), "o.codebooks": ("F16", (1, 100, 1, 8)), "o.scales": ("F16", (64, 1, 1, 1)),
            "e.codes": ("I16", (64, 16, 1)), "e.codebooks": ("F16", (1, 65536, 0, 8)),
            "e.scales": ("F16", (64, 1, 1, 1))}
    out = {q.name: q for q in others.scan_aqlm(_tensors(spec), set(), Hints())}
    assert set(out) == {"a", "c", "o", "e"}
    assert (out["a"].bits, out["a"].logical, out["a"].scale_dtype) == (2.0, 64 * 1 * 16 * 8, "float16")  # 1x16 / 8
    assert out["c"].bits == 2 * 8 / 8  # two codebooks of 8 bits over groups of 8
    assert out["o"].bits is None  # a codebook size that is no power of two
    assert (out["e"].bits, out["e"].logical) == (None, 0)  # an empty group
    edges = {"s.codes": ("I16", (64, 16, 1)), "s.codebooks": ("F16", (1, 0, 1, 8)),  # an empty codebook
             "s.scales": ("F16", (64, 1, 1, 1)),
             "g.codes": ("I16", (64, 16, 1)), "g.codebooks": ("F16", (1, 256, 1, 0)),  # groups of no input
             "g.scales": ("F16", (64, 1, 1, 1)),
             "u.codes": ("I16", (64, 16, 1)), "u.codebooks": ("F16", (1, 256, 1, 1)),  # groups of one weight
             "u.scales": ("F16", (64, 1, 1, 1))}
    out = {q.name: q for q in others.scan_aqlm(_tensors(edges), set(), Hints())}
    assert [out[k].bits for k in ("s", "g", "u")] == [None, None, 8.0]
    assert others.scan_aqlm(_tensors(spec), {"a.codes", "c.codes", "o.codes", "e.codes"}, Hints()) == []  # claimed


def test_aqlm_config():
    draft = _draft()
    others.apply_aqlm(_view({"quant_method": "aqlm", "num_codebooks": 1, "nbits_per_codebook": 16,
                             "in_group_size": 8, "out_group_size": 1}), draft, "aqlm", "aqlm")
    assert (draft.expected_method, draft.format) == ("aqlm", "1x16 codebooks, groups 1x8")
    draft = _draft()
    others.apply_aqlm(_view({"quant_method": "aqlm", "num_codebooks": 1}), draft, "aqlm", "aqlm")
    assert draft.format is None


# ------------------------------------------------------------------------------------------------ torchao
def _torchao_meta(types: dict[str, str], extra: dict[str, str] | None = None) -> dict[str, str]:
    meta = {"tensor_names": json.dumps(list(types))}
    for name, ttype in types.items():
        meta[name] = json.dumps({"_type": ttype, "_data": {}})
    meta.update(extra or {})
    return meta


def test_torchao_metadata_is_bounded_and_hostile_json_is_skipped():
    long = '{"_type": "Float8Tensor", "pad": "' + "x" * 65536 + '"}'
    meta = {"tensor_names": "[]", "a": '{"_type": "Float8Tensor"}', "b": "not json", "c": "{broken",
            "d": "[1]", "e": '{"_type": 5}', "f": long, "g": '{"_type": "Int4Tensor"}', "h": 7,
            "i": "[" * 100_000 + "]" * 100_000}
    assert others._torchao_types(meta) == {"a": "Float8Tensor", "g": "Int4Tensor"}
    at_limit = '{"_type": "X", "p": "' + "y" * (65536 - 23) + '"}'
    assert len(at_limit) == 65536 and others._torchao_types({"z": at_limit}) == {"z": "X"}
    assert others._torchao_names({"tensor_names": json.dumps(["a", 5, "b"])}) == ["a", "b"]
    assert others._torchao_names({"tensor_names": "{}"}) == []
    assert others._torchao_names({"tensor_names": "[oops"}) == []
    assert others._torchao_names({"tensor_names": 5}) == []
    assert others._torchao_names({"tensor_names": json.dumps(["n"] * 10) + " " * 64 * 65536}) == []
    names = json.dumps(["n"])
    at_cap = names + " " * (64 * 65536 - len(names))  # exactly 64 x MAX_META_JSON characters: read
    assert others._torchao_names({"tensor_names": at_cap}) == ["n"]
    assert others._torchao_names({"tensor_names": at_cap + " "}) == []


def test_torchao_scan_per_tensor_type():
    types = {"m.a.weight": "Float8Tensor", "m.b.weight": "Int4Tensor", "m.c.weight": "IntxTensor",
             "m.d.bias": "Float8Tensor", "m.e.weight": "Tensor", "m.f.weight": "Float8Tensor"}
    spec = {"m.a._weight_qdata": ("F8_E5M2", (64, 32)), "m.a._weight_scale": ("F32", (64, 1)),
            "m.b.weight:qdata": ("U8", (64, 16)), "m.b.weight:scale": ("BF16", (64, 2)),
            "m.c._weight_qdata": ("I8", (64, 32)),
            "m.d._bias_qdata": ("U8", (64,)),
            "m.e.weight": ("BF16", (64, 32)),
            "m.f._weight_scale": ("F32", (64, 1))}  # no qdata: skipped
    hints = Hints(metadata=_torchao_meta(types))
    out = {q.name: q for q in others.scan_torchao(_tensors(spec), set(), hints)}
    assert set(out) == {"m.a", "m.b", "m.c", "m.d.bias"}
    a, bq, c, d = out["m.a"], out["m.b"], out["m.c"], out["m.d.bias"]
    assert (a.bits, a.weight_dtype, a.logical, a.scale_dtype, a.layout) == (8, "float8_e5m2", 64 * 32, "float32",
                                                                            "torchao-Float8Tensor")
    assert a.tensors == ["m.a._weight_qdata", "m.a._weight_scale"]
    assert (bq.bits, bq.weight_dtype, bq.logical, bq.scale_dtype) == (4, "int4", 64 * 16 * 2, "bfloat16")
    assert (c.bits, c.weight_dtype, c.logical, c.scale_dtype) == (8, "int8", 64 * 32, None)
    assert (d.bits, d.weight_dtype) == (8, "float8_e4m3")  # a Float8 type over U8 storage
    assert others.scan_torchao(_tensors(spec), set(), Hints(metadata={})) == []
    claimed = others.scan_torchao(_tensors(spec), {"m.a._weight_qdata", "m.a._weight_scale"}, hints)
    assert "m.a" not in {q.name for q in claimed}
    # a parameter without qdata listed first does not end the scan
    first = Hints(metadata=_torchao_meta({"m.f.weight": "Float8Tensor", "m.a.weight": "Float8Tensor"}))
    assert [q.name for q in others.scan_torchao(_tensors(spec), set(), first)] == ["m.a"]


def test_torchao_int4_qdata_of_no_known_size_counts_unknown_elements():
    """Two int4 values per byte of ``qdata``: a dtype of no known size gives no count, not 0 elements."""
    from qcheck.model import TensorInfo

    hints = Hints(metadata=_torchao_meta({"m.b.weight": "Int4Tensor"}))
    for dtype, nbytes, logical in (("U8", 64 * 16, 64 * 16 * 2), ("X9", None, None), ("U8", 0, 0)):
        tensors = {"m.b.weight:qdata": TensorInfo("m.b.weight:qdata", dtype, (64, 16), nbytes),
                   "m.b.weight:scale": TensorInfo("m.b.weight:scale", "BF16", (64, 2), 256)}
        (q,) = others.scan_torchao(tensors, set(), hints)
        assert (q.bits, q.logical) == (4, logical), dtype


@pytest.mark.parametrize("quant_type, fmt, act", [
    ("int8_dynamic_activation_int8_weight", "int8_dynamic_activation_int8_weight", ("int8", "dynamic per-token")),
    ({"default": {"_type": "Int8DynamicActivationInt8WeightConfig"}}, "Int8DynamicActivationInt8WeightConfig",
     ("int8", "dynamic per-token")),
    ({"_type": "Float8DynamicActivationFloat8WeightConfig"}, "Float8DynamicActivationFloat8WeightConfig",
     ("float8_e4m3", "dynamic")),
    ("float8_dynamic_activation_float8_weight", "float8_dynamic_activation_float8_weight", ("float8_e4m3", "dynamic")),
    ({"default": "x", "_type": "Int4WeightOnlyConfig"}, "Int4WeightOnlyConfig", (None, None)),
    ({"default": {"_type": 3}}, None, (None, None)),
    (5, None, (None, None)),
])
def test_torchao_config(quant_type, fmt, act):
    draft = _draft()
    others.apply_torchao(_view({"quant_method": "torchao", "quant_type": quant_type}), draft, "torchao", "torchao")
    assert (draft.format, (draft.activation_dtype, draft.activation_scheme)) == (fmt, act)
    assert (draft.expected_method, draft.producer, draft.config_method) == ("torchao", "torchao", "torchao")


# --------------------------------------------------------------------------------------------------- Quark
@pytest.mark.parametrize("spec, method", [
    ({"dtype": "fp8_e4m3"}, "fp8"), ({"dtype": "INT8"}, "int8"), ({"dtype": "uint8"}, "int8"),
    ({"dtype": "int4"}, "int4"), ({"dtype": "uint4"}, "int4"), ({"dtype": "int2"}, "int4"), ({"dtype": "int3"}, "int4"),
    ({"dtype": "fp6_e3m2"}, "mxfp6"), ({"dtype": "fp4", "group_size": 16}, "nvfp4"),
    ({"dtype": "fp4", "group_size": 16, "scale_format": "e8m0"}, "mxfp4"), ({"dtype": "mx4", "group_size": 32}, "mxfp4"),
    ({"dtype": "mxfp4"}, "mxfp4"), ({"dtype": "bfp16"}, "unknown"), ({}, "unknown")])
def test_quark_methods(spec, method):
    assert others._quark_method(spec) == method


def _quark(quant: dict, qlinears=(), tensors=None) -> Draft:
    draft = _draft(qlinears=list(qlinears), tensors=tensors or {})
    others.apply_quark(_view({"quant_method": "quark", **quant}), draft, "quark", None)
    return draft


def test_quark_weight_input_and_kv_specs():
    kv_spec = {"output_tensors": {"dtype": "fp8_e4m3", "is_dynamic": False}}
    quant = {"global_quant_config": {
        "weight": {"dtype": "fp8_e4m3", "qscheme": "per_channel", "symmetric": True},
        "input_tensors": [{"dtype": "fp8_e4m3", "qscheme": "per_tensor", "is_dynamic": False}]},
        "exclude": ["lm_head"], "export": {"kv_cache_group": ["*k_proj", "*v_proj"], "weight_format": "real_quantized"},
        "layer_quant_config": {"model.*q_proj": {"output_tensors": {"dtype": "int8"}}, "*v_proj": kv_spec,
                               "*k_proj": kv_spec}}
    d = _quark(quant)
    assert (d.expected_method, d.expected_bits, d.expected_group, d.scale_granularity, d.weight_dtype) == (
        "fp8", 8, -1, "per-channel", "float8_e4m3")
    assert (d.activation_dtype, d.activation_scheme, d.zero_point, d.format) == (
        "float8_e4m3", "static per-tensor", False, "real_quantized")
    assert (d.kv_cache_dtype, d.kv_cache_declared, d.kv_cache_static, d.excluded) == (
        "float8_e4m3", "kv_cache_group", True, ["lm_head"])
    grouped = _quark({"global_quant_config": {
        "weight": [{"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "scale_format": "e8m0",
                    "symmetric": False}],
        "input_tensors": {"dtype": "fp4", "qscheme": "per_group", "group_size": 32, "is_dynamic": True}},
        "export": {"pack_method": "reorder"}})
    assert (grouped.expected_method, grouped.expected_group, grouped.scale_granularity, grouped.weight_dtype) == (
        "mxfp4", 32, "group", "fp4_e2m1")
    assert (grouped.activation_dtype, grouped.activation_scheme, grouped.zero_point, grouped.format) == (
        "fp4_e2m1", "dynamic per-group 32", True, "reorder")
    odd = _quark({"global_quant_config": {"weight": {"dtype": "int4", "qscheme": "per_block"},
                                          "input_tensors": {"dtype": "int8"}}})
    assert (odd.scale_granularity, odd.expected_group, odd.activation_scheme, odd.expected_bits) == (
        "per_block", None, "static", 4)
    assert _quark({"global_quant_config": {"weight": {"dtype": "int8"}, "input_tensors": []}}).activation_dtype is None
    assert _quark({"global_quant_config": {"weight": {"dtype": "int8"}}}).expected_bits == 8
    assert _quark({"global_quant_config": {"weight": {"dtype": "fp4", "group_size": 16}}}).expected_bits == 4  # nvfp4
    # an input spec of a dtype Quark names but qcheck does not: no activation scheme either
    assert _quark({"global_quant_config": {"weight": {"dtype": "int8"}, "input_tensors": {
        "dtype": "bfp16", "qscheme": "per_tensor"}}}).activation_scheme is None
    # a group size on a per-tensor input spec is no per-group scheme
    assert _quark({"global_quant_config": {"weight": {"dtype": "int8"}, "input_tensors": {
        "dtype": "int8", "qscheme": "per_tensor", "group_size": 32}}}).activation_scheme == "static per-tensor"
    none = _quark({"global_quant_config": {"weight": []}})
    assert none.warnings == ["config.json quantization_config: Quark config has no global_quant_config.weight"]
    dynamic_kv = {**quant, "layer_quant_config": {"*k_proj": {"output_tensors": {"dtype": "fp8_e4m3",
                                                                                  "is_dynamic": True}}}}
    assert _quark(dynamic_kv).kv_cache_static is False
    no_kv = {**quant, "layer_quant_config": {"*k_proj": {"output_tensors": {"dtype": "bfp16"}}}}
    assert _quark(no_kv).kv_cache_declared is None
    # kv_cache_group must be a list of patterns: a string's characters are no patterns
    assert _quark({**quant, "export": {"kv_cache_group": "*k_proj"}}).kv_cache_declared is None
    # the first layer entry a KV pattern matches gives the KV cache
    two = {**quant, "layer_quant_config": {"*k_proj": kv_spec, "*v_proj": {"output_tensors": {
        "dtype": "int8", "is_dynamic": True}}}}
    assert (_quark(two).kv_cache_dtype, _quark(two).kv_cache_static) == ("float8_e4m3", True)


def test_quark_reads_64_kv_patterns_and_4096_layer_entries():
    """Bounds against a hostile config (the substring search is patterns x entries): the 64th pattern and the
    4096th entry are read, the next ones are not."""
    kv_spec = {"output_tensors": {"dtype": "fp8_e4m3", "is_dynamic": False}}
    base = {"global_quant_config": {"weight": {"dtype": "int8"}}}

    def kv(patterns: list[str], layers: dict) -> str | None:
        return _quark({**base, "export": {"kv_cache_group": patterns}, "layer_quant_config": layers}).kv_cache_dtype

    junk = [f"nothing{i}" for i in range(64)]
    assert kv([*junk[:63], "k_proj"], {"*k_proj": kv_spec}) == "float8_e4m3"
    assert kv([*junk, "k_proj"], {"*k_proj": kv_spec}) is None
    entries = {f"layer{i}": {} for i in range(4096)}
    assert kv(["k_proj"], {**dict(list(entries.items())[:4095]), "*k_proj": kv_spec}) == "float8_e4m3"
    assert kv(["k_proj"], {**entries, "*k_proj": kv_spec}) is None


def test_quark_mxfp6_relabels_the_fp4_scanners_layers():
    from qcheck.classify.base import QLinear
    from qcheck.model import TensorInfo

    tensors = {"m.weight": TensorInfo("m.weight", "U8", (64, 96), 64 * 96),
               "m.weight_scale": TensorInfo("m.weight_scale", "U8", (64, 4), 256)}
    layer = QLinear(name="m", method="mxfp4", layout="mxfp4-packed", tensors=["m.weight", "m.weight_scale"],
                    logical=64 * 192, bits=4, group_size=48)
    d = _quark({"global_quant_config": {"weight": {"dtype": "fp6_e2m3", "qscheme": "per_group", "group_size": 32}}},
               qlinears=[layer], tensors=tensors)
    assert (layer.method, layer.layout, layer.bits, layer.logical, layer.group_size, layer.weight_dtype) == (
        "mxfp6", "mxfp6-packed", 6, 64 * 96 * 8 // 6, 32, "fp6_e2m3")
    assert d.expected_bits == 6
    # only the FP4 scanner's packed layers are relabelled; rows of bytes that are no multiple of 3 count whole values
    odd_tensors = {"n.weight": TensorInfo("n.weight", "U8", (64, 97), 64 * 97),
                   "n.weight_scale": TensorInfo("n.weight_scale", "U8", (64, 3), 192),
                   "f.weight": TensorInfo("f.weight", "F8_E4M3", (64, 64), 64 * 64),
                   "f.weight_scale": TensorInfo("f.weight_scale", "F32", (64, 1), 256)}
    odd = QLinear(name="n", method="mxfp4", layout="mxfp4-packed", tensors=["n.weight", "n.weight_scale"],
                  logical=64 * 194, bits=4)
    fp8 = QLinear(name="f", method="fp8", layout="fp8", tensors=["f.weight", "f.weight_scale"], logical=64 * 64,
                  bits=8)
    _quark({"global_quant_config": {"weight": {"dtype": "fp6_e2m3", "qscheme": "per_group", "group_size": 32}}},
           qlinears=[odd, fp8], tensors=odd_tensors)
    assert (odd.method, odd.logical, odd.group_size) == ("mxfp6", 64 * 97 * 8 // 6, 43)  # 129 values in 3 groups
    assert (fp8.method, fp8.layout, fp8.bits, fp8.logical) == ("fp8", "fp8", 8, 64 * 64)


@pytest.mark.parametrize("quant, method, bits, act", [
    ({"quant_method": "eetq"}, "int8", 8, None),
    ({"quant_method": "quanto", "weights": "INT4"}, "int4", None, None),
    ({"quant_method": "quanto", "weights": "int2"}, "int4", None, None),
    ({"quant_method": "quanto", "weights": "float8", "activations": "float8"}, "fp8", None, "float8_e4m3"),
    ({"quant_method": "quanto", "weights": "nf4"}, "unknown", None, None),
    ({"quant_method": "vptq"}, "unknown", None, None),
])
def test_named_methods(quant, method, bits, act):
    draft = _draft()
    others.apply_named(_view(quant), draft, "named", None)
    assert (draft.expected_method, draft.expected_bits, draft.activation_dtype) == (method, bits, act)
    assert draft.producer == draft.config_method == quant["quant_method"]
    assert any("has no qcheck method of its own" in w for w in draft.warnings) is (quant["quant_method"] == "vptq")
