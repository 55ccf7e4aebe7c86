"""Every canonical method classified from the tensor names, dtypes, shapes and config fields its
producer writes (tests/support/builders.py), field by field."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qcheck.classify import classify
from support import builders as b
from support.contract import validate
from support.strategies import JSON_VALUES

LOGICAL = b.DEFAULT.logical_parameters()

# fixture -> expected Quantization fields (every listed field is asserted exactly)
CASES = {
    "bf16": (b.bf16_llama, dict(method="none", producer=None, weight_bits=None, bits_per_weight=None,
                                group_size=None, weight_dtype="bfloat16", activation_dtype=None, kv_cache_dtype=None)),
    "fp8-ct-channel": (b.fp8_ct_channel, dict(
        method="fp8", producer="compressed-tensors", weight_bits=8, group_size=-1, block_size=None,
        weight_dtype="float8_e4m3", scale_dtype="bfloat16", activation_dtype="float8_e4m3", kv_cache_dtype=None,
        scale_granularity="per-channel", excluded=["lm_head"], format="float-quantized",
        activation_scheme="dynamic per-token",
        config_method="compressed-tensors", zero_point=False)),
    "fp8-ct-static-kv": (b.fp8_ct_static, dict(
        method="fp8", group_size=None, scale_granularity="per-tensor", scale_dtype="float32",
        activation_dtype="float8_e4m3", kv_cache_dtype="float8_e4m3", activation_scheme="static per-tensor")),
    "fp8-block-deepseek": (b.fp8_block_deepseek, dict(
        method="fp8", producer="deepseek", weight_bits=8, group_size=None, block_size=[128, 128],
        scale_granularity="block", scale_dtype="float32", weight_dtype="float8_e4m3",
        activation_dtype="float8_e4m3", config_method="fp8", activation_scheme="dynamic per-token-group 128")),
    "fbgemm-fp8": (b.fbgemm_fp8, dict(method="fp8", producer="fbgemm", group_size=-1, activation_dtype="float8_e4m3",
                                      excluded=["lm_head"], config_method="fbgemm_fp8",
                                      activation_scheme="dynamic per-token")),
    "modelopt-fp8": (b.modelopt_fp8, dict(method="fp8", producer="modelopt", group_size=None,
                                          scale_granularity="per-tensor", activation_dtype="float8_e4m3",
                                          kv_cache_dtype="float8_e4m3", excluded=["lm_head"], config_method="FP8",
                                          activation_scheme="static per-tensor")),
    "nvfp4-modelopt": (b.nvfp4_modelopt_fixture, dict(
        method="nvfp4", producer="modelopt", weight_bits=4, group_size=16, weight_dtype="fp4_e2m1",
        scale_dtype="float8_e4m3", activation_dtype="fp4_e2m1", kv_cache_dtype=None, excluded=["lm_head"],
        config_method="NVFP4", activation_scheme="dynamic per-group 16")),
    "nvfp4-ct": (b.nvfp4_ct_fixture, dict(
        method="nvfp4", producer="compressed-tensors", weight_bits=4, group_size=16, weight_dtype="fp4_e2m1",
        scale_dtype="float8_e4m3", activation_dtype="fp4_e2m1", format="nvfp4-pack-quantized",
        activation_scheme="dynamic per-group 16")),
    "mxfp4-ct": (b.mxfp4_ct_fixture, dict(
        method="mxfp4", producer="compressed-tensors", weight_bits=4, group_size=32, weight_dtype="fp4_e2m1",
        scale_dtype="e8m0", activation_dtype=None, bits_per_weight=4.25)),
    "mxfp8-ct": (b.mxfp8_ct_fixture, dict(method="mxfp8", weight_bits=8, group_size=32, scale_dtype="e8m0",
                                          bits_per_weight=8.25, format="mxfp8-quantized")),
    "mxfp4-gpt-oss": (b.gpt_oss_fixture, dict(
        method="mxfp4", producer="gpt-oss", weight_bits=4, group_size=32, weight_dtype="fp4_e2m1",
        scale_dtype="e8m0", bits_per_weight=4.25, activation_dtype=None, config_method="mxfp4",
        excluded=["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"])),
    "w4a16-ct": (b.w4a16_ct, dict(method="int4", producer="compressed-tensors", weight_bits=4, group_size=128,
                                  weight_dtype="int4", scale_dtype="bfloat16", activation_dtype=None,
                                  zero_point=False, act_order=True, format="pack-quantized")),
    "w4a16-ct-asym": (lambda: b.w4a16_ct(zero_point=True), dict(method="int4", zero_point=True)),
    "w8a8-int8-ct": (b.w8a8_int8_ct, dict(method="int8", weight_bits=8, group_size=-1, weight_dtype="int8",
                                          activation_dtype="int8", format="int-quantized",
                                          activation_scheme="dynamic per-token")),
    "gptq": (b.gptq_fixture, dict(method="gptq", producer="gptqmodel", weight_bits=4, group_size=128,
                                  weight_dtype="int4", scale_dtype="float16", activation_dtype=None, act_order=True,
                                  zero_point=False, format="gptq", config_method="gptq", activation_scheme=None)),
    "gptq-8bit-channel": (lambda: b.gptq_fixture(bits=8, group=-1, desc_act=False), dict(
        method="gptq", weight_bits=8, group_size=-1, weight_dtype="int8", act_order=False)),
    "awq": (b.awq_fixture, dict(method="awq", producer="autoawq", weight_bits=4, group_size=128, weight_dtype="int4",
                                scale_dtype="float16", zero_point=True, format="gemm", act_order=None)),
    "mlx-affine": (b.mlx_fixture, dict(method="mlx", producer="mlx-lm", weight_bits=4, group_size=64,
                                       bits_per_weight=4.5, format="affine", zero_point=True, scale_dtype="bfloat16")),
    "mlx-mxfp4": (lambda: b.mlx_fixture(mode="mxfp4", group=32), dict(
        method="mlx", weight_bits=4, group_size=32, format="mxfp4", weight_dtype="fp4_e2m1", scale_dtype="e8m0",
        zero_point=False, bits_per_weight=4.25)),
    "bnb-nf4": (b.bnb_nf4_fixture, dict(method="bitsandbytes", producer="bitsandbytes", weight_bits=4,
                                        group_size=64, weight_dtype="nf4", excluded=["lm_head"], format="nf4")),
    "bnb-nf4-double": (lambda: b.bnb_nf4_fixture(double=True), dict(method="bitsandbytes", weight_bits=4,
                                                                    scale_dtype="uint8",
                                                                    format="nf4 double-quant")),
    "bnb-int8": (b.bnb_int8_fixture, dict(method="bitsandbytes", weight_bits=8, group_size=-1, weight_dtype="int8",
                                          format="llm_int8", activation_dtype="int8")),
    "exl2": (b.exl2_fixture, dict(method="exl2", producer="exllamav2", weight_bits=4,
                                  format="target 4.0 bpw, head 6 bits, version 0.2.8")),
    "exl3": (b.exl3_fixture, dict(method="exl3", producer="exllamav3", weight_bits=4)),
    "hqq": (b.hqq_fixture, dict(method="hqq", producer="hqq", weight_bits=4, group_size=64, excluded=["lm_head"],
                                zero_point=True)),
    "torchao": (b.torchao_fixture, dict(method="torchao", producer="torchao", weight_bits=8,
                                        weight_dtype="float8_e4m3", activation_dtype="float8_e4m3",
                                        format="Float8DynamicActivationFloat8WeightConfig")),
    "torchao-legacy-names": (lambda: b.torchao_fixture(legacy=True), dict(method="torchao", weight_bits=8,
                                                                         weight_dtype="float8_e4m3")),
    "aqlm": (b.aqlm_fixture, dict(method="aqlm", producer="aqlm", weight_bits=1,
                                  excluded=["model.embed_tokens.weight", "lm_head.weight"],
                                  format="1x8 codebooks, groups 1x8")),
    "quark-fp8": (b.quark_fp8_fixture, dict(method="fp8", producer="quark", weight_bits=8, group_size=None,
                                            activation_dtype="float8_e4m3", kv_cache_dtype="float8_e4m3",
                                            excluded=["lm_head"], config_method="quark",
                                            activation_scheme="static per-tensor")),
    "quark-mxfp4": (b.quark_mxfp4_fixture, dict(method="mxfp4", producer="quark", weight_bits=4, group_size=32,
                                                activation_dtype="fp4_e2m1", scale_dtype="e8m0",
                                                activation_scheme="dynamic per-group 32")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_method_fields(case: str) -> None:
    build, expected = CASES[case]
    fixture = build()
    insp = classify(fixture.checkpoint())
    q = insp.quantization
    got = {k: getattr(q, k) for k in expected}
    assert got == expected
    assert insp.findings == [], insp.findings
    assert not [w for w in insp.warnings if "mismatch" in w or "disagree" in w]


@pytest.mark.parametrize("case", sorted(c for c in CASES if c != "mxfp4-gpt-oss"))
def test_logical_parameters_are_the_same_for_every_method(case: str) -> None:
    """Packed weights count unpacked, scales/zeros/g_idx not at all: every method of the same Llama
    has the model card's parameter count."""
    insp = classify(CASES[case][0]().checkpoint())
    assert insp.parameters == LOGICAL


def test_gpt_oss_parameters_and_experts() -> None:
    insp = classify(b.gpt_oss_fixture().checkpoint())
    assert insp.parameters == b.gpt_oss_logical()
    assert (insp.moe, insp.num_experts, insp.num_experts_used) == (True, 4, 2)
    assert insp.architecture == "GptOssForCausalLM"
    assert insp.context_length == 131072


def test_bits_per_weight_gptq_by_hand() -> None:
    """GPTQ 4-bit g128 on in=256: per output column 32 I32 words + 2 F16 scales + 2/8 I32 zeros, + g_idx."""
    insp = classify(b.gptq_fixture().checkpoint())
    total_bytes = 0
    elements = 0
    for _, o, i in b.DEFAULT.linears():
        total_bytes += (i * 4 // 32) * o * 4 + (i // 128) * o * 2 + (i // 128) * (o * 4 // 32) * 4 + i * 4
        elements += o * i
    assert insp.quantization.bits_per_weight == round(total_bytes * 8 / elements, 4)


def test_architecture_numbers_from_config() -> None:
    insp = classify(b.bf16_llama().checkpoint())
    assert insp.architecture == "LlamaForCausalLM"
    assert insp.model_type == "llama"
    assert (insp.num_layers, insp.hidden_size, insp.num_attention_heads, insp.num_kv_heads, insp.head_dim,
            insp.vocab_size, insp.context_length) == (2, 256, 4, 2, 64, 512, 4096)
    assert insp.dtype == "bfloat16"
    assert insp.moe is False and insp.num_experts is None
    assert insp.tensor_count == len(b.bf16_llama().tensors)
    assert insp.quantization.tensor_types == {"BF16": len(b.bf16_llama().tensors)}


def test_type_stats_add_up() -> None:
    fx = b.nvfp4_modelopt_fixture()
    insp = classify(fx.checkpoint())
    assert sum(r["bytes"] for r in insp.type_stats) == fx.data_bytes
    assert sum(r["tensors"] for r in insp.type_stats) == len(fx.tensors)
    assert insp.type_stats[0]["type"] == "U8"  # largest first


# ---------------------------------------------------------------------- hostile configs and tensors
# Hostile input is normal input: configs with wrong types and tensors with odd shapes/dtypes never crash the
# classifier, and what it returns still fits the public JSON contract (qcheck/schemas/inspection.schema.json).
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
    validate(data, "inspection")
