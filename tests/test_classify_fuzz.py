"""Hostile input is normal input: configs with wrong types and tensors with odd shapes/dtypes never
crash the classifier, and what it returns still fits the public JSON contract."""

from __future__ import annotations

import copy
import json

import builders as b
import jsonschema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_classify_methods import CASES
from test_inspect_cli import INSPECTION_SCHEMA

from qcheck.classify import classify

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=8,
)
DTYPES = st.sampled_from(["F8_E4M3", "U8", "I32", "U32", "I8", "F4", "F8_E8M0", "BF16", "F16", "F32", "I16",
                          "F6_E2M3", "X9", "I64"])
SHAPES = st.lists(st.integers(0, 300), min_size=0, max_size=4).map(tuple)
KEYS = ["quant_method", "bits", "group_size", "config_groups", "format", "ignore", "weight_block_size", "quant_algo",
        "desc_act", "sym", "zero_point", "version", "kv_cache_scheme", "global_quant_config", "load_in_4bit",
        "mode", "quant_type", "quant_config", "dynamic", "modules_to_not_convert", "activation_scheme"]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(sorted(CASES)),
       config_edits=st.lists(st.tuples(st.sampled_from(KEYS), JSON_VALUES), max_size=4),
       tensor_edits=st.lists(st.tuples(st.integers(0, 10_000), DTYPES, SHAPES), max_size=6),
       whole_config=st.one_of(st.none(), JSON_VALUES))
def test_classifier_never_crashes(case, config_edits, tensor_edits, whole_config) -> None:
    fx = copy.deepcopy(CASES[case][0]())
    cfg = fx.configs.setdefault("config.json", {})
    quant = cfg.get("quantization_config")
    if isinstance(quant, dict):
        for key, value in config_edits:
            quant[key] = value
    if whole_config is not None:
        cfg["quantization_config" if config_edits else "quantization"] = whole_config
    names = list(fx.tensors)
    for index, dtype, shape in tensor_edits:
        name = names[index % len(names)]
        fx.tensors[name] = (dtype if dtype in b.BITS else "U8", shape)
    insp = classify(fx.checkpoint())
    data = json.loads(json.dumps(insp.to_json()))
    jsonschema.validate(data, INSPECTION_SCHEMA)


GGUF_KEYS = ["general.architecture", "general.file_type", "general.name", "llama.context_length", "llama.block_count",
             "llama.embedding_length", "llama.attention.head_count", "llama.attention.head_count_kv",
             "llama.expert_count", "llama.expert_used_count", "split.count", "tokenizer.ggml.tokens", "llama.vocab_size"]


@settings(max_examples=150, deadline=None)
@given(edits=st.dictionaries(st.sampled_from(GGUF_KEYS), JSON_VALUES, max_size=6),
       types=st.lists(st.sampled_from(["Q4_K", "Q6_K", "F32", "F16", "unknown(77)", "MXFP4", "Q8_0"]), min_size=0,
                      max_size=5))
def test_gguf_metadata_never_crashes(edits, types) -> None:
    from test_classify_gguf import MD, _ckpt

    ck = _ckpt(dict(zip(["attn_q", "attn_k", "ffn_up", "output", "token_embd"], types, strict=False)), {**MD, **edits})
    data = json.loads(json.dumps(classify(ck).to_json()))
    jsonschema.validate(data, INSPECTION_SCHEMA)
