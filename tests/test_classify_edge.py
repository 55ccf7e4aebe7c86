"""Configs that lie, configs that are missing, mixed precision, nested and legacy config places,
pickles: the classifier reports what the tensors are and says where the claims disagree."""

from __future__ import annotations

import copy

from qcheck.classify import classify
from qcheck.model import Checkpoint
from support import builders as b

LOGICAL = b.DEFAULT.logical_parameters()


def _mismatches(insp) -> list:
    return [f for f in insp.findings if f.kind == "config-mismatch"]


def test_config_says_gptq_but_tensors_are_fp8() -> None:
    fx = b.fp8_ct_channel()
    fx.configs["config.json"]["quantization_config"] = {"quant_method": "gptq", "bits": 4, "group_size": 128,
                                                         "desc_act": False, "sym": True}
    insp = classify(fx.checkpoint())
    assert insp.quantization.method == "fp8"
    (finding,) = _mismatches(insp)
    assert finding.where == "config.json quantization_config"
    assert "config says gptq" in finding.message and "tensors are fp8" in finding.message
    assert "F8_E4M3" in finding.message
    assert any("config says gptq" in w for w in insp.warnings)
    assert insp.parameters == LOGICAL


def test_hf_quant_config_disagrees_with_config_json() -> None:
    fx = b.nvfp4_modelopt_fixture()
    fx.configs["config.json"]["quantization_config"]["quant_algo"] = "FP8"
    insp = classify(fx.checkpoint())
    assert insp.quantization.method == "nvfp4"
    (finding,) = _mismatches(insp)
    assert finding.where == "hf_quant_config.json"
    assert "NVFP4" in finding.message and "FP8" in finding.message


def test_hf_quant_config_says_nvfp4_but_tensors_are_fp8() -> None:
    fx = b.modelopt_fp8()
    fx.configs["hf_quant_config.json"]["quantization"]["quant_algo"] = "NVFP4"
    insp = classify(fx.checkpoint())
    assert insp.quantization.method == "fp8"
    (finding,) = _mismatches(insp)
    assert "config says nvfp4, but the tensors are fp8" in finding.message


def test_stale_gptq_side_file_and_tensor_group_size() -> None:
    """itdevwu/Genz-70b-GPTQ: quantize_config.json says group 128, config.json says -1; shapes decide."""
    side = {"bits": 4, "group_size": 128, "damp_percent": 0.1, "desc_act": True, "sym": True,
            "true_sequential": True, "model_name_or_path": None, "model_file_base_name": "model"}
    fx = b.gptq_fixture(group=-1, side=side)
    insp = classify(fx.checkpoint())
    q = insp.quantization
    assert q.group_size == -1
    messages = [f.message for f in _mismatches(insp)]
    assert messages == ["group_size 128 disagrees with config.json quantization_config group_size -1"]
    assert _mismatches(insp)[0].where == "quantize_config.json"


def test_config_bits_disagree_with_packed_shapes() -> None:
    fx = b.gptq_fixture(bits=8)
    fx.configs["config.json"]["quantization_config"]["bits"] = 4
    insp = classify(fx.checkpoint())
    assert insp.quantization.weight_bits == 8
    (finding,) = _mismatches(insp)
    assert finding.message.startswith("config says 4-bit weights, but packed tensor shapes give 8-bit")


def test_config_group_disagrees_with_scale_shapes() -> None:
    fx = b.awq_fixture()
    fx.configs["config.json"]["quantization_config"]["group_size"] = 64
    insp = classify(fx.checkpoint())
    assert insp.quantization.group_size == 128
    (finding,) = _mismatches(insp)
    assert "group_size 64" in finding.message and "give 128" in finding.message


def test_fp8_block_size_mismatch() -> None:
    fx = b.fp8_block_deepseek()
    fx.configs["config.json"]["quantization_config"]["weight_block_size"] = [64, 64]
    insp = classify(fx.checkpoint())
    assert insp.quantization.block_size == [128, 128]
    assert "block size [64, 64]" in _mismatches(insp)[0].message


def test_config_says_quantised_but_weights_are_bf16() -> None:
    fx = b.bf16_llama()
    fx.configs["config.json"]["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                                         "weight_block_size": [128, 128]}
    insp = classify(fx.checkpoint())
    assert insp.quantization.method == "none"
    (finding,) = _mismatches(insp)
    assert "every weight is stored unquantised (bfloat16)" in finding.message


def test_mixed_precision_compressed_tensors() -> None:
    """Attention in FP8, MLP in NVFP4 (two config_groups): the method of most quantised elements wins and
    the other is listed with its share."""
    shape = b.DEFAULT

    def linear(p: str, o: int, i: int):
        return b.fp8_channel(p, o, i) if "self_attn" in p else b.nvfp4_ct(p, o, i)

    quant = b.ct_config({
        "group_0": b.scheme(b.qargs(8, "float", "channel"), b.qargs(8, "float", "token", dynamic=True),
                            fmt="float-quantized") | {"targets": ["re:.*self_attn.*"]},
        "group_1": b.scheme(b.qargs(4, "float", "tensor_group", group_size=16),
                            b.qargs(4, "float", "tensor_group", group_size=16, dynamic="local"),
                            fmt="nvfp4-pack-quantized") | {"targets": ["re:.*mlp.*"]},
    }, fmt="mixed-precision")
    cfg = b.llama_config(shape, quantization_config=quant)
    fx = b.Fixture(b.model_tensors(shape, linear), {"config.json": cfg})
    insp = classify(fx.checkpoint())
    q = insp.quantization
    assert q.method == "nvfp4"
    assert q.group_size == 16 and q.activation_dtype == "fp4_e2m1"
    assert q.format == "mixed-precision (nvfp4-pack-quantized)"
    attn = 2 * (256 * 256 * 2 + 128 * 256 * 2)
    mlp = 2 * 3 * 512 * 256
    share = f"{100 * attn / (attn + mlp):.1f}%"
    assert any(w.startswith("mixed precision: nvfp4 holds") and f"fp8 {share}" in w for w in insp.warnings)
    assert any("group_0=fp8" in w and "group_1=nvfp4" in w for w in insp.warnings)
    assert insp.parameters == LOGICAL
    assert _mismatches(insp) == []


def _strip_configs(fx: b.Fixture) -> b.Fixture:
    fx = copy.deepcopy(fx)
    fx.configs = {}
    return fx


def test_fingerprints_without_any_config() -> None:
    expected = {
        "gptq": (b.gptq_fixture, "gptq", None, 4, 128),
        "awq": (b.awq_fixture, "awq", None, 4, 128),
        "nvfp4-modelopt": (b.nvfp4_modelopt_fixture, "nvfp4", "modelopt", 4, 16),
        "nvfp4-ct": (b.nvfp4_ct_fixture, "nvfp4", "compressed-tensors", 4, 16),
        "mxfp4-ct": (b.mxfp4_ct_fixture, "mxfp4", "compressed-tensors", 4, 32),
        "gpt-oss": (b.gpt_oss_fixture, "mxfp4", "gpt-oss", 4, 32),
        "fp8-block": (b.fp8_block_deepseek, "fp8", "deepseek", 8, None),
        "fp8-channel": (b.fp8_ct_channel, "fp8", None, 8, -1),
        "bnb-nf4": (b.bnb_nf4_fixture, "bitsandbytes", "bitsandbytes", 4, 64),
        "bnb-int8": (b.bnb_int8_fixture, "bitsandbytes", "bitsandbytes", 8, -1),
        "exl2": (b.exl2_fixture, "exl2", "exllamav2", 4, None),
        "exl3": (b.exl3_fixture, "exl3", "exllamav3", 4, None),
        "aqlm": (b.aqlm_fixture, "aqlm", "aqlm", 1, None),
        "torchao": (b.torchao_fixture, "torchao", "torchao", 8, None),
        "mlx": (b.mlx_fixture, "mlx", "mlx-lm", 4, 64),
        "int8": (b.w8a8_int8_ct, "int8", None, 8, -1),
    }
    for label, (build, method, producer, bits, group) in expected.items():
        fx = _strip_configs(build())
        insp = classify(fx.checkpoint())
        q = insp.quantization
        assert (q.method, q.producer, q.weight_bits, q.group_size) == (method, producer, bits, group), label
        assert "no quantization config found; classified from tensor names, dtypes and shapes" in insp.warnings
        assert insp.architecture is None
    # DeepSeek block FP8 quantises activations dynamically; a stored input_scale means static activations
    assert classify(_strip_configs(b.fp8_block_deepseek()).checkpoint()).quantization.activation_dtype == "float8_e4m3"
    assert classify(_strip_configs(b.fp8_ct_channel()).checkpoint()).quantization.activation_dtype is None
    assert classify(_strip_configs(b.nvfp4_modelopt_fixture()).checkpoint()).quantization.activation_dtype == "fp4_e2m1"


def test_native_mx_dtypes_and_e5m2() -> None:
    fx = b._q(b.DEFAULT, b.native_mxfp4, None)
    insp = classify(fx.checkpoint())
    q = insp.quantization
    assert (q.method, q.weight_bits, q.group_size, q.scale_dtype, q.bits_per_weight) == ("mxfp4", 4, 32, "e8m0", 4.25)
    assert insp.parameters == LOGICAL

    def f6(p, o, i):
        return {f"{p}.weight": ("F6_E2M3", (o, i)), f"{p}.weight_scale": ("F8_E8M0", (o, i // 32))}

    q6 = classify(b._q(b.DEFAULT, f6, None).checkpoint()).quantization
    assert (q6.method, q6.weight_bits, q6.weight_dtype, q6.bits_per_weight) == ("mxfp6", 6, "fp6_e2m3", 6.25)

    def e5m2(p, o, i):
        return {f"{p}.weight": ("F8_E5M2", (o, i)), f"{p}.weight_scale": ("F32", ())}

    q5 = classify(b._q(b.DEFAULT, e5m2, None).checkpoint()).quantization
    assert (q5.method, q5.weight_dtype, q5.scale_granularity) == ("fp8", "float8_e5m2", "per-tensor")


def test_quantization_config_nested_in_text_config() -> None:
    """Multimodal configs keep the language model (and its quantisation) under text_config."""
    fx = b.fp8_ct_channel()
    inner = fx.configs["config.json"]
    quant = inner.pop("quantization_config")
    archs = inner.pop("architectures")
    fx.configs["config.json"] = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
                                 "text_config": {**inner, "quantization_config": quant},
                                 "vision_config": {"hidden_size": 1152}}
    assert archs == ["LlamaForCausalLM"]
    insp = classify(fx.checkpoint())
    assert insp.quantization.method == "fp8"
    assert insp.quantization.producer == "compressed-tensors"
    assert insp.architecture == "Gemma3ForConditionalGeneration"
    assert (insp.num_layers, insp.hidden_size, insp.context_length) == (2, 256, 4096)
    assert insp.findings == []


def test_legacy_compression_config_and_nested_ct_form() -> None:
    fx = b.w4a16_ct()
    quant = fx.configs["config.json"].pop("quantization_config")
    quant.pop("quant_method")
    fx.configs["config.json"]["compression_config"] = quant
    q = classify(fx.checkpoint()).quantization
    assert (q.method, q.producer, q.config_method, q.group_size) == ("int4", "compressed-tensors",
                                                                      "compressed-tensors", 128)
    fx2 = b.w4a16_ct()
    quant2 = fx2.configs["config.json"]["quantization_config"]
    fx2.configs["config.json"]["quantization_config"] = {"quantization_config": quant2, "sparsity_config": {}}
    q2 = classify(fx2.checkpoint()).quantization
    assert (q2.method, q2.weight_bits) == ("int4", 4)


def test_mlx_per_module_overrides_and_excluded() -> None:
    overrides = {"model.layers.0.mlp.down_proj": {"group_size": 64, "bits": 8},
                 "model.layers.1.self_attn.q_proj": False}
    fx = b.mlx_fixture(overrides=overrides)
    insp = classify(fx.checkpoint())
    q = insp.quantization
    assert q.method == "mlx" and q.weight_bits == 4
    assert q.excluded == ["model.layers.1.self_attn.q_proj"]
    assert "MLX mixed quantisation: per-module overrides use 4/8 bits" in insp.warnings
    assert insp.parameters == LOGICAL
    assert _mismatches(insp) == []


def test_excluded_key_spellings_are_normalised() -> None:
    fx = b.gptq_fixture()
    fx.configs["config.json"]["quantization_config"]["dynamic"] = {
        r"-:.*\.mlp\.gate_proj": {}, r"+:.*down_proj": {"bits": 8}}
    fx.configs["config.json"]["quantization_config"]["modules_to_not_convert"] = ["lm_head"]
    assert classify(fx.checkpoint()).quantization.excluded == ["lm_head", r".*\.mlp\.gate_proj"]
    bnb = b.bnb_int8_fixture()
    bnb.configs["config.json"]["quantization_config"]["llm_int8_skip_modules"] = ["lm_head", "router"]
    assert classify(bnb.checkpoint()).quantization.excluded == ["lm_head", "router"]


def test_unknown_quant_method() -> None:
    fx = b.bf16_llama()
    fx.configs["config.json"]["quantization_config"] = {"quant_method": "brand-new-thing", "bits": 3}
    insp = classify(fx.checkpoint())
    assert insp.quantization.method == "unknown"
    assert insp.quantization.config_method == "brand-new-thing"
    assert any("unknown quant_method 'brand-new-thing'" in w for w in insp.warnings)
    fx2 = b.awq_fixture()
    fx2.configs["config.json"]["quantization_config"]["quant_method"] = "brand-new-thing"
    insp2 = classify(fx2.checkpoint())
    assert insp2.quantization.method == "awq"


def test_unexplained_integer_weights_are_unknown() -> None:
    def odd(p, o, i):
        return {f"{p}.weight": ("I16", (o, i // 4))}

    insp = classify(b._q(b.DEFAULT, odd, None).checkpoint())
    assert insp.quantization.method == "unknown"
    assert any("match no known layout" in w for w in insp.warnings)


def test_moe_from_expert_tensor_names() -> None:
    shape = b.DEFAULT
    t = b.model_tensors(shape, b.plain("BF16"))
    for n in range(shape.layers):
        for e in range(8):
            for proj in ("w1", "w2", "w3"):
                t[f"model.layers.{n}.block_sparse_moe.experts.{e}.{proj}.weight"] = ("BF16", (64, 64))
    insp = classify(b.Fixture(t).checkpoint())
    assert (insp.moe, insp.num_experts) == (True, 8)


def test_pickle_checkpoint() -> None:
    ck = Checkpoint(path="model.bin", container="pickle",
                    pickle_globals=["collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "posix.system",
                                    "torch.FloatStorage", "builtins.exec"])
    insp = classify(ck)
    assert insp.container == "pickle"
    assert insp.quantization.method == "unknown"
    assert insp.pickle_globals[:2] == ["posix.system", "builtins.exec"]
    (finding,) = insp.findings
    assert finding.kind == "unsafe-pickle"
    assert finding.message == (
        "pickle checkpoint: not statically verifiable, never unpickled (imports: posix.system, builtins.exec, "
        "collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch.FloatStorage); convert it to safetensors")


def test_kv_scales_without_config() -> None:
    fx = _strip_configs(b.fp8_ct_static())
    assert classify(fx.checkpoint()).quantization.kv_cache_dtype == "float8_e4m3"
    assert classify(b.fp8_ct_channel().checkpoint()).quantization.kv_cache_dtype is None


def test_one_scale_row_is_per_channel_only_when_every_layer_says_so() -> None:
    """With in_features == group size one scale row is ambiguous; wider layers (down_proj) decide, and
    without any wider layer it is per-channel."""
    small = b.Shape(hidden=128, intermediate=256, vocab=256)
    fx = _strip_configs(b._q(small, b.gptq, None))
    assert classify(fx.checkpoint()).quantization.group_size == 128
    fx_channel = _strip_configs(b._q(small, lambda p, o, i: b.gptq(p, o, i, group=-1), None))
    q = classify(fx_channel.checkpoint()).quantization
    assert (q.group_size, q.scale_granularity) == (-1, "per-channel")
    fx_cfg = b.gptq_fixture(shape=small)
    assert classify(fx_cfg.checkpoint()).quantization.group_size == 128
    assert classify(fx_cfg.checkpoint()).findings == []


#: every Linear takes 128 inputs: with a group size of 128 each layer is exactly one group wide (one scale row)
ONE_GROUP = b.Shape(hidden=128, intermediate=128, layers=1, heads=2, kv_heads=1)


def test_layers_one_group_wide_take_the_group_from_the_config_gptq_and_awq() -> None:
    """No layer is wider than a group, so shapes cannot tell a group of 128 from per-channel: the config's
    group_size (not its bits, not another hint) decides, and the config is not reported as wrong."""
    gptq = b.gptq_fixture(shape=ONE_GROUP)
    awq = b._q(ONE_GROUP, b.awq_gemm, {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True,
                                        "version": "gemm"})
    for fx, method in ((gptq, "gptq"), (awq, "awq")):
        assert all(i == 128 for _, _, i in ONE_GROUP.linears())
        insp = classify(fx.checkpoint())
        q = insp.quantization
        assert (q.method, q.weight_bits, q.group_size, q.scale_granularity) == (method, 4, 128, "group"), method
        assert insp.findings == [], method
    # the config says per-channel: the same one-row scales are per-channel, again without a finding
    per_channel = b._q(ONE_GROUP, lambda p, o, i: b.gptq(p, o, i, group=-1),
                       {"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act": False, "sym": True})
    insp = classify(per_channel.checkpoint())
    assert (insp.quantization.group_size, insp.quantization.scale_granularity) == (-1, "per-channel")
    assert insp.findings == []
    # a config group narrower than the layer cannot be one scale row: the shapes win and the config is reported
    wrong = b._q(ONE_GROUP, b.gptq, {"quant_method": "gptq", "bits": 4, "group_size": 64, "desc_act": False,
                                      "sym": True})
    insp = classify(wrong.checkpoint())
    assert insp.quantization.group_size == -1
    assert [f.message.split(" (")[0] for f in _mismatches(insp)] == [
        "config says group_size 64, but tensor shapes give -1"]


def test_gptq_without_g_idx_uses_config_bits() -> None:
    """GPTQ packs along the input: without g_idx the input size comes from the configured bits."""
    def no_gidx(p, o, i):
        t = b.gptq(p, o, i, bits=8)
        del t[f"{p}.g_idx"]
        return t

    fx = b._q(b.DEFAULT, no_gidx, {"quant_method": "gptq", "bits": 8, "group_size": 128, "desc_act": False,
                                    "sym": True})
    insp = classify(fx.checkpoint())
    assert (insp.quantization.method, insp.quantization.weight_bits, insp.quantization.group_size) == ("gptq", 8, 128)
    assert insp.parameters == LOGICAL


def test_mlx_block_only_in_quantization_config() -> None:
    """mlx-lm copies ``quantization`` to ``quantization_config`` (no quant_method): either one is MLX."""
    fx = b.mlx_fixture()
    del fx.configs["config.json"]["quantization"]
    insp = classify(fx.checkpoint())
    assert (insp.quantization.method, insp.quantization.producer, insp.quantization.group_size) == ("mlx", "mlx-lm", 64)
    assert insp.findings == []


def test_mlx_quant_method_config_without_a_quantization_block() -> None:
    """A ``quant_method: mlx`` config's bits and group are what the checkpoint is judged against, as the
    scanner reads them (8-bit, group 32 here), not MLX's affine defaults (4, 64) with two false mismatches."""
    fx = b.mlx_fixture(bits=8, group=32)
    cfg = fx.configs["config.json"]
    del cfg["quantization"]
    cfg["quantization_config"] = {"quant_method": "mlx", "bits": 8, "group_size": 32}
    insp = classify(fx.checkpoint())
    q = insp.quantization
    assert (q.method, q.producer, q.config_method, q.weight_bits, q.group_size) == ("mlx", "mlx-lm", "mlx", 8, 32)
    assert insp.findings == [] and insp.parameters == LOGICAL
    # a stale config (4 bits stated): MLX shapes give bits x group only, so the stated bits make the group 64,
    # against the stated 32; the same finding as from a ``quantization`` block
    cfg["quantization_config"]["bits"] = 4
    (finding,) = _mismatches(classify(fx.checkpoint()))
    assert finding.message == "config says group_size 32, but tensor shapes give 64 (model.layers.0.self_attn.q_proj)"
    cfg["quantization"] = {k: v for k, v in cfg.pop("quantization_config").items() if k != "quant_method"}
    assert [f.message for f in _mismatches(classify(fx.checkpoint()))] == [finding.message]
    # both places: MLX reads its ``quantization`` block (mlx_lm.utils.load_model) and so do the scanner and the
    # judge; a stale quant_method: mlx copy beside it is not what the model runs with
    cfg["quantization"] = {"bits": 8, "group_size": 32}
    cfg["quantization_config"] = {"quant_method": "mlx", "bits": 4, "group_size": 64}
    both = classify(fx.checkpoint())
    assert (both.quantization.weight_bits, both.quantization.group_size, both.findings) == (8, 32, [])


def test_modelopt_mixed_precision() -> None:
    """ModelOpt MIXED_PRECISION (FP8 attention, NVFP4 MLP) with quantized_layers in the flat config.json form."""
    shape = b.DEFAULT

    def linear(p: str, o: int, i: int):
        return b.fp8_tensor(p, o, i) if "self_attn" in p else b.nvfp4_modelopt(p, o, i)

    layers = {p: ({"quant_algo": "FP8"} if "self_attn" in p else {"quant_algo": "NVFP4", "group_size": 16})
              for p, _, _ in shape.linears()}
    quant = {"quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "kv_cache_quant_algo": "FP8",
             "quantized_layers": layers, "ignore": ["lm_head"]}
    fx = b.Fixture(b.model_tensors(shape, linear), {"config.json": b.llama_config(shape, quantization_config=quant)})
    insp = classify(fx.checkpoint())
    q = insp.quantization
    assert (q.method, q.producer, q.group_size, q.activation_dtype, q.kv_cache_dtype, q.format) == (
        "nvfp4", "modelopt", 16, "fp4_e2m1", "float8_e4m3", "MIXED_PRECISION")
    assert q.excluded == ["lm_head"]
    assert "ModelOpt MIXED_PRECISION checkpoint: layers use FP8, NVFP4" in insp.warnings
    assert any(w.startswith("mixed precision: nvfp4 holds") and "fp8" in w for w in insp.warnings)
    # the fixture declares an FP8 KV cache but carries no k_scale/v_scale tensors: the one mismatch is that
    assert [m.where for m in _mismatches(insp)] == ["kv_cache_quant_algo"]
    assert insp.parameters == LOGICAL


def test_awq_gemv_layout() -> None:
    fx = b.awq_fixture()
    fx.tensors = b.model_tensors(b.DEFAULT, b.awq_gemv)
    fx.configs["config.json"]["quantization_config"]["version"] = "gemv"
    insp = classify(fx.checkpoint())
    q = insp.quantization
    assert (q.method, q.weight_bits, q.group_size, q.format) == ("awq", 4, 128, "gemv")
    assert insp.parameters == LOGICAL
    assert insp.findings == []
    fx.configs["config.json"]["quantization_config"]["version"] = "gemm"
    (finding,) = _mismatches(classify(fx.checkpoint()))
    assert "GEMV layout" in finding.message


def test_hostile_torchao_metadata_is_ignored() -> None:
    fx = b.torchao_fixture()
    first_param = next(k for k in fx.metadata if k.endswith("q_proj.weight"))
    fx.metadata[first_param] = '{"a":' + "[" * 20_000 + "]" * 20_000 + "}"  # under the size cap, too deep
    insp = classify(fx.checkpoint())
    assert insp.quantization.method == "torchao"
    assert insp.parameters == LOGICAL


def test_transformers_metal_layout() -> None:
    def metal(p, o, i):
        return {f"{p}.weight": ("U32", (o, i * 4 // 32)), f"{p}.scales": ("BF16", (o, i // 64)),
                f"{p}.qbiases": ("BF16", (o, i // 64))}

    fx = b._q(b.DEFAULT, metal, {"quant_method": "metal", "bits": 4, "group_size": 64})
    insp = classify(fx.checkpoint())
    q = insp.quantization
    assert (q.method, q.producer, q.config_method, q.weight_bits, q.group_size) == (
        "mlx", "transformers (metal)", "metal", 4, 64)
    assert insp.parameters == LOGICAL and insp.findings == []
    bare = classify(_strip_configs(fx).checkpoint()).quantization
    assert (bare.method, bare.producer) == ("mlx", "transformers (metal)")


def test_quark_kv_output_scales_without_config() -> None:
    assert classify(_strip_configs(b.quark_fp8_fixture()).checkpoint()).quantization.kv_cache_dtype == "float8_e4m3"


def test_bnb_quant_type_disagrees_with_quant_state() -> None:
    fx = b.bnb_nf4_fixture()
    fx.configs["config.json"]["quantization_config"]["bnb_4bit_quant_type"] = "fp4"
    insp = classify(fx.checkpoint())
    (finding,) = _mismatches(insp)
    assert finding.message == "bnb_4bit_quant_type fp4, but the tensors' quant_state is nf4"
    assert finding.where == "config.json quantization_config"
    assert insp.quantization.weight_dtype == "nf4"


def test_bits_per_weight_is_one_formula_for_every_container() -> None:
    from qcheck.classify.base import bits_per_weight

    assert bits_per_weight(18, 32) == 4.5  # a Q4_0 block
    assert bits_per_weight(1, 3) == 2.6667  # four decimals
    assert bits_per_weight(1, 10**6) == 8e-06  # not rounded to 0
    assert bits_per_weight(0, 32) is None and bits_per_weight(18, 0) is None
