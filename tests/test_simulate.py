"""qcheck.eval.simulate on real checkpoints: a tiny Llama quantised into every producer layout (written to
disk by support.packing), read back through qcheck's readers and classifier, dequantised into the reference
architecture's parameters. Checked against the direct dequantisation of the in-memory packed tensors,
against transformers' own loaders (compressed-tensors, fine-grained FP8, GGUF) and, for GGUF F32, against
the original weights bit for bit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from qcheck.errors import InputError
from support import packing as P

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from qcheck.eval import simulate  # noqa: E402
from qcheck.eval.dequant import awq, fp4, gptq, mlx  # noqa: E402
from support.gguf_export import export_gguf  # noqa: E402
from support.tiny_llama import make_tiny_llama  # noqa: E402

GROUPED = {"awq": 64, "gptq": 64, "int4-ct": 64, "int8-ct": 64, "mlx": 64}


@pytest.fixture(scope="module")
def ref(tmp_path_factory) -> Path:
    return make_tiny_llama(tmp_path_factory.mktemp("ref"), seed=3, hidden_size=128, intermediate=256, layers=2,
                           heads=4, kv_heads=2, vocab_size=384)


@pytest.fixture(scope="module")
def ref_config(ref):
    return transformers.AutoConfig.from_pretrained(ref)


@pytest.fixture(scope="module")
def float_sd(ref) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    return load_file(str(ref / "model.safetensors"))


@pytest.fixture(scope="module")
def built(ref, float_sd, tmp_path_factory):
    """scheme -> (checkpoint dir, QuantizedCheckpoint)."""
    cfg = json.loads((ref / "config.json").read_text())
    out = {}
    root = tmp_path_factory.mktemp("quant")
    for scheme in P.SCHEMES:
        # input_amax: a static activation range the tiny model's activations fit in (calibrated, not clipped)
        qc = P.quantize_model(float_sd, scheme, group_size=GROUPED.get(scheme), act_order=scheme == "gptq",
                              sym=scheme != "gptq", input_amax=64.0)
        out[scheme] = (P.write_checkpoint(root / scheme, cfg, qc), qc)
    return out


def as_torch(qc: P.QuantizedCheckpoint, name: str):
    arr, dtype = qc.tensors[name]
    arr = np.ascontiguousarray(arr)
    if dtype == "BF16":
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    if dtype == "F8_E4M3":
        return torch.from_numpy(arr).view(torch.float8_e4m3fn)
    if dtype == "U32":
        return torch.from_numpy(arr.view(np.int32))
    return torch.from_numpy(arr)


def direct_dequant(scheme: str, qc: P.QuantizedCheckpoint, prefix: str):
    """The packed tensors dequantised straight from memory (no files, no readers, no layout detection)."""
    g = lambda leaf: as_torch(qc, f"{prefix}.{leaf}")  # noqa: E731
    if scheme.startswith("fp8"):
        from qcheck.eval.dequant import fp8

        leaf = "weight_scale_inv" if scheme == "fp8-block" else "weight_scale"
        return fp8.dequant_fp8(g("weight"), g(leaf), prefix, block=(128, 128))
    if scheme == "nvfp4-modelopt":
        return fp4.dequant_nvfp4(g("weight"), g("weight_scale"), float(g("weight_scale_2")), prefix)
    if scheme in ("nvfp4-ct", "nvfp4a16-ct"):
        return fp4.dequant_nvfp4(g("weight_packed"), g("weight_scale"), 1 / float(g("weight_global_scale")), prefix)
    if scheme == "mxfp8-ct":
        from qcheck.eval.dequant import fp8

        return fp8.dequant_fp8(g("weight"), g("weight_scale"), prefix)
    if scheme == "mxfp4-ct":
        return fp4.dequant_mxfp4(g("weight_packed"), g("weight_scale"), prefix)
    if scheme == "awq":
        return awq.dequant_awq(g("qweight"), g("qzeros"), g("scales"), prefix)
    if scheme == "gptq":
        return gptq.dequant_gptq(g("qweight"), g("qzeros"), g("scales"), g("g_idx"), prefix)
    if scheme in ("int4-ct", "int8-ct"):
        from qcheck.eval.dequant import compressed

        return compressed.dequant_pack_quantized(g("weight_packed"), g("weight_scale"), g("weight_shape"), prefix,
                                                 bits=4 if scheme == "int4-ct" else 8)
    if scheme == "int8-w8a8-ct":
        from qcheck.eval.dequant import compressed

        return compressed.dequant_int_quantized(g("weight"), g("weight_scale"), prefix)
    if scheme == "mlx-mxfp4":
        return mlx.dequant_mlx_fp(g("weight"), g("scales"), prefix, mode="mxfp4")
    assert scheme == "mlx"
    return mlx.dequant_mlx_affine(g("weight"), g("scales"), g("biases"), prefix, bits=4, group_size=64)


@pytest.mark.parametrize("scheme", list(P.SCHEMES))
def test_every_scheme_dequantises_to_the_reference_parameters(scheme, built, float_sd, ref_config):
    path, qc = built[scheme]
    state, notes = simulate.simulated_state_dict(str(path), ref_config)
    assert set(state) == set(float_sd)
    assert len(qc.quantized) == 14
    for prefix in qc.quantized:
        got = state[f"{prefix}.weight"]
        assert got.dtype == torch.float32
        assert torch.equal(got, direct_dequant(scheme, qc, prefix).float()), prefix
        original = torch.from_numpy(float_sd[f"{prefix}.weight"])
        rel = float((got - original).abs().max() / original.abs().max())
        assert 0 < rel < 0.35, (prefix, rel)  # quantised, and close to the original
    for name in float_sd:
        if name.rsplit(".", 1)[0] not in qc.quantized:
            kept = torch.from_numpy(P.to_float32(*qc.tensors[name]))
            assert torch.equal(state[name], kept), name
    assert "14 weights dequantised" in notes[0]


@pytest.mark.filterwarnings("ignore:You passed `quantization_config`:UserWarning")
@pytest.mark.parametrize("scheme", ["fp8-tensor", "fp8-channel", "fp8-ct-block", "nvfp4-ct", "nvfp4a16-ct",
                                    "mxfp4-ct", "mxfp8-ct", "int4-ct", "int8-ct", "int8-w8a8-ct", "fp8-block"])
def test_matches_transformers_own_loader(scheme, built, ref_config):
    """transformers (+ compressed-tensors) decompresses these on CPU; its weights come out in bf16."""
    if scheme != "fp8-block":
        pytest.importorskip("compressed_tensors")
        kwargs = {"quantization_config": transformers.CompressedTensorsConfig(dequantize=True)}
    else:
        kwargs = {}
    path, qc = built[scheme]
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kwargs)
    theirs = model.state_dict()
    ours, _ = simulate.simulated_state_dict(str(path), ref_config)
    for prefix in qc.quantized:
        a, b = ours[f"{prefix}.weight"], theirs[f"{prefix}.weight"].float()
        assert torch.allclose(a, b, rtol=2**-7, atol=1e-6), (prefix, float((a - b).abs().max()))


@pytest.mark.filterwarnings("ignore:You passed `quantization_config`:UserWarning")
def test_logits_of_the_simulated_model_match_transformers_compressed_tensors(built, ref_config, ref):
    pytest.importorskip("compressed_tensors")
    path, _ = built["int4-ct"]
    state, _ = simulate.simulated_state_dict(str(path), ref_config)
    model = transformers.AutoModelForCausalLM.from_config(ref_config).eval()
    model.load_state_dict(state, strict=True)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, quantization_config=transformers.CompressedTensorsConfig(dequantize=True)).eval()
    reference = transformers.AutoModelForCausalLM.from_pretrained(ref).eval()
    ids = transformers.AutoTokenizer.from_pretrained(ref)("Quantised models answer like their reference.",
                                                          return_tensors="pt").input_ids
    with torch.no_grad():
        a, b, r = model(ids).logits, theirs(ids).logits, reference(ids).logits
    assert float((a - b).abs().max()) < 0.02 * float(r.abs().max())
    assert float((a - r).abs().max()) > 10 * float((a - b).abs().max())  # quantisation moved the logits


# ------------------------------------------------------------------------------------------ GGUF


def test_gguf_f32_round_trips_to_the_original_weights_exactly(ref, ref_config, float_sd, tmp_path):
    path = export_gguf(ref, tmp_path / "m.gguf", "F32")
    state, notes = simulate.simulated_state_dict(str(path), ref_config)
    assert set(state) == set(float_sd)
    for name, arr in float_sd.items():
        assert torch.equal(state[name], torch.from_numpy(arr)), name
    assert "LlamaTensorProcessor" in notes[0] and "F32 x" in notes[0]


@pytest.mark.parametrize("tensor_type", ["Q8_0", "Q4_0", "MXFP4"])
def test_gguf_quantised_matches_transformers_gguf_loader(ref, ref_config, tensor_type, tmp_path):
    pytest.importorskip("accelerate")
    path = export_gguf(ref, tmp_path / f"m-{tensor_type}.gguf", tensor_type)
    state, notes = simulate.simulated_state_dict(str(path), ref_config)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(ref, gguf_file=str(path)).state_dict()
    assert set(state) == set(theirs)
    for name, tensor in state.items():
        assert torch.equal(tensor, theirs[name].float()), name
    assert f"{tensor_type} x14" in notes[0] or f"{tensor_type} x16" in notes[0]


# ------------------------------------------------------------------------------------------ gpt-oss MXFP4


def test_gpt_oss_mxfp4_experts_are_transposed_like_transformers(tmp_path):
    mx = pytest.importorskip("transformers.integrations.mxfp4")
    config = transformers.GptOssConfig(
        hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, num_local_experts=2, num_experts_per_tok=1, vocab_size=128, layer_types=["full_attention"])
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    tensors: P.Tensors = {}
    for name, arr in sd.items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            tensors.update(P.pack_mxfp4_gptoss(np.swapaxes(arr, -1, -2), name))  # on disk [E, out, in]
        else:
            tensors[name] = (P.encode_float(arr, "BF16"), "BF16")
    qc = P.QuantizedCheckpoint(tensors, P.mxfp4_gptoss_config(["model.layers.*.self_attn", "lm_head"]))
    d = P.write_checkpoint(tmp_path / "oss", config.to_dict(), qc)
    state, notes = simulate.simulated_state_dict(str(d), config)
    for proj in ("gate_up_proj", "down_proj"):
        name = f"model.layers.0.mlp.experts.{proj}"
        blocks, scales = as_torch(qc, f"{name}_blocks"), as_torch(qc, f"{name}_scales")
        theirs = mx.convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
        assert state[name].shape == model.state_dict()[name].shape
        assert torch.equal(state[name], theirs)
    assert "MXFP4 (gpt-oss blocks) x2" in notes[0]


# ------------------------------------------------------------------------------------------ refusals


def _rewrite(src: Path, dst: Path, edit) -> Path:
    """Copy a checkpoint directory and apply ``edit`` to its tensors (a dict name -> torch tensor)."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    tensors = load_file(str(src / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def test_missing_parameter_is_named(built, ref_config, tmp_path):
    src, _ = built["awq"]
    bad = _rewrite(src, tmp_path / "missing", lambda t: t.pop("model.norm.weight"))
    with pytest.raises(InputError, match=r"missing from the candidate: model\.norm\.weight"):
        simulate.simulated_state_dict(str(bad), ref_config)


def test_extra_parameter_is_named(built, ref_config, tmp_path):
    src, _ = built["fp8-channel"]
    bad = _rewrite(src, tmp_path / "extra", lambda t: t.update({"model.layers.0.adapter.weight": torch.ones(2, 2)}))
    with pytest.raises(InputError, match=r"not parameters of the reference architecture: model\.layers\.0\.adapter\.weight"):
        simulate.simulated_state_dict(str(bad), ref_config)


def test_unknown_integer_layout_is_refused(built, ref_config, tmp_path):
    src, _ = built["fp8-channel"]
    bad = _rewrite(src, tmp_path / "odd", lambda t: t.update({"model.layers.0.mlp.up_proj.codes": torch.zeros(4, dtype=torch.int32)}))
    with pytest.raises(InputError, match=r"tensor model\.layers\.0\.mlp\.up_proj\.codes: tensor of dtype I32"):
        simulate.simulated_state_dict(str(bad), ref_config)


def test_shape_mismatch_with_the_reference_is_named(built, ref):
    path, _ = built["nvfp4-modelopt"]
    other = transformers.AutoConfig.from_pretrained(ref)
    other.intermediate_size = 384
    with pytest.raises(InputError, match=r"mlp\.(down|gate|up)_proj\.weight: dequantised shape"):
        simulate.simulated_state_dict(str(path), other)


def test_corrupt_packed_shape_is_refused(built, ref_config, tmp_path):
    src, _ = built["int4-ct"]

    def corrupt(t):
        t["model.layers.1.mlp.down_proj.weight_shape"] = torch.tensor([128, 4096])

    bad = _rewrite(src, tmp_path / "corrupt", corrupt)
    with pytest.raises(InputError, match=r"module model\.layers\.1\.mlp\.down_proj"):
        simulate.simulated_state_dict(str(bad), ref_config)


def test_nonexistent_candidate_and_pickles_are_refused(ref_config, tmp_path):
    with pytest.raises(InputError, match="local file or directory"):
        simulate.simulated_state_dict("org/some-model", ref_config)
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")
    with pytest.raises(InputError):
        simulate.simulated_state_dict(str(tmp_path), ref_config)


# ------------------------------------------------------------------------------------------ activations


def test_round_to_e2m1_matches_scalar_ties_to_even():
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.1, -0.3, -2.6, 9.0, 0.0])
    assert simulate.round_to_e2m1(x).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, -0.5, -3.0, 6.0, 0.0]


def test_fake_quant_functions_against_references():
    torch.manual_seed(1)
    x = torch.randn(3, 64)
    stat = simulate.fake_quant_fp8(x, scale=0.01)
    assert torch.equal(stat, (x / 0.01).clamp(-448, 448).to(torch.float8_e4m3fn).float() * 0.01)
    dyn = simulate.fake_quant_fp8(x)
    s = x.abs().amax(-1, keepdim=True) / 448
    assert torch.allclose(dyn, (x / s).to(torch.float8_e4m3fn).float() * s)
    mx = simulate.fake_quant_mxfp4(x)
    scale_bits, codes = P.mxfp4_quantize(x.numpy())  # the numpy MX quantiser (same exponent rule)
    ref = P.fp4_e2m1_decode(codes).reshape(3, 2, 32) * P.e8m0_decode(scale_bits)[..., None]
    assert torch.equal(mx, torch.from_numpy(ref.reshape(3, 64)))
    nv = simulate.fake_quant_nvfp4(x, global_scale=0.002)
    scale_bits, codes = P._nvfp4_core(x.numpy(), 0.002)  # the numpy (table-based) NVFP4 quantiser
    ref = P.fp4_e2m1_decode(codes).reshape(3, 4, 16) * (P.fp8_e4m3_decode(scale_bits) * 0.002)[..., None]
    assert torch.allclose(nv, torch.from_numpy(ref.reshape(3, 64)).float(), rtol=1e-6, atol=0)
    assert 0 < float((nv - x).abs().max()) < 0.25 * float(x.abs().max())
    m8 = simulate.fake_quant_mxfp8(x)
    ref8 = P.pack_mxfp8_compressed_tensors(x.numpy(), "m")  # numpy MXFP8 quantiser
    deq8 = P.fp8_e4m3_decode(ref8["m.weight"][0]).reshape(3, 2, 32) * P.e8m0_decode(ref8["m.weight_scale"][0])[..., None]
    assert torch.equal(m8, torch.from_numpy(deq8.reshape(3, 64)))
    i8 = simulate.fake_quant_int8(x)
    s8 = x.abs().amax(-1, keepdim=True) / 127
    assert torch.allclose(i8, torch.round(x / s8) * s8)


@pytest.mark.parametrize("scheme,expect", [
    ("fp8-tensor", "static scales from the checkpoint"),
    ("fp8-channel", "dynamic scales"),
    ("nvfp4-ct", "static scales from the checkpoint"),
    ("nvfp4-modelopt", "static scales from the checkpoint"),
    ("int8-w8a8-ct", "dynamic scales"),
])
def test_activation_fake_quant_hooks_the_quantised_linears(scheme, expect, built, ref_config, ref):
    from qcheck.classify import classify
    from qcheck.readers import load_checkpoint

    path, _ = built[scheme]
    inspection = classify(load_checkpoint(str(path)))
    state, _ = simulate.simulated_state_dict(str(path), ref_config)
    model = transformers.AutoModelForCausalLM.from_config(ref_config).eval()
    model.load_state_dict(state)
    ids = transformers.AutoTokenizer.from_pretrained(ref)("Fake quantisation of activations.", return_tensors="pt").input_ids
    with torch.no_grad():
        before = model(ids).logits
        done = simulate.apply_activation_fake_quant(model, inspection)
        after = model(ids).logits
    assert done is not None and "on 14 Linear layers" in done and expect in done
    assert not torch.equal(before, after) and bool(torch.isfinite(after).all())
    # 4-bit activations on a random 2-layer model move logits a lot; 8-bit ones much less
    bound = 1.0 if "nvfp4" in scheme else 0.5
    assert float((before - after).abs().max()) < bound * float(before.abs().max())


def test_weight_only_formats_have_no_activation_fake_quant(built):
    from qcheck.classify import classify
    from qcheck.readers import load_checkpoint

    for scheme in ("awq", "mlx", "nvfp4a16-ct"):
        inspection = classify(load_checkpoint(str(built[scheme][0])))
        assert simulate.apply_activation_fake_quant(torch.nn.Linear(2, 2), inspection) is None


def _gguf(path: Path, *, head_count: bool, extra: str | None = None) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_embedding_length(128)
    if head_count:
        w.add_head_count(4)
        w.add_head_count_kv(2)
    w.add_tensor("token_embd.weight", np.ones((384, 128), dtype=np.float32))
    if extra:
        w.add_tensor(extra, np.ones((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_without_head_counts_or_with_unknown_tensors_is_refused(ref_config, tmp_path):
    with pytest.raises(InputError, match="head_count"):
        simulate.simulated_state_dict(str(_gguf(tmp_path / "a.gguf", head_count=False)), ref_config)
    with pytest.raises(InputError, match=r"no parameter in the reference architecture, e\.g\. blk\.0\.mystery\.weight"):
        simulate.simulated_state_dict(str(_gguf(tmp_path / "b.gguf", head_count=True, extra="blk.0.mystery.weight")),
                                      ref_config)
    with pytest.raises(InputError, match=r"missing from the candidate: .*model\.layers\.0"):
        simulate.simulated_state_dict(str(_gguf(tmp_path / "c.gguf", head_count=True)), ref_config)


def test_non_integer_bits_in_a_hostile_config_is_refused(built, ref_config, tmp_path):
    import shutil

    src, _ = built["gptq"]
    bad = tmp_path / "gptq-bad"
    shutil.copytree(src, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["quantization_config"]["bits"] = "four"
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match=r"quantization_config\.bits must be an integer, not 'four'"):
        simulate.simulated_state_dict(str(bad), ref_config)


def test_awq_gemv_and_unsupported_methods_are_refused_by_name(built, ref_config, tmp_path):
    import shutil

    src, _ = built["awq"]
    gemv = tmp_path / "gemv"
    shutil.copytree(src, gemv)
    cfg = json.loads((gemv / "config.json").read_text())
    cfg["quantization_config"]["version"] = "gemv"
    (gemv / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="AWQ version 'gemv' is not simulated"):
        simulate.simulated_state_dict(str(gemv), ref_config)
    bnb = tmp_path / "bnb"
    bnb.mkdir()
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
    (bnb / "config.json").write_text(json.dumps(cfg))
    P.save_safetensors(bnb / "model.safetensors", {
        "model.layers.0.mlp.up_proj.weight": (np.zeros((64, 1), dtype=np.uint8), "U8"),
        "model.layers.0.mlp.up_proj.weight.absmax": (np.ones(2, dtype=np.float32), "F32"),
        "model.layers.0.mlp.up_proj.weight.quant_map": (np.ones(16, dtype=np.float32), "F32"),
        "model.layers.0.mlp.up_proj.weight.quant_state.bitsandbytes__nf4": (np.zeros(8, dtype=np.uint8), "U8"),
    })
    with pytest.raises(InputError, match="cannot dequantise bitsandbytes checkpoints"):
        simulate.simulated_state_dict(str(bnb), ref_config)


def test_gguf_without_output_weight_tied_and_untied_references(tmp_path):
    tied_dir = make_tiny_llama(tmp_path / "tied", tie_embeddings=True)
    untied_dir = make_tiny_llama(tmp_path / "untied")
    path = export_gguf(tied_dir, tmp_path / "tied.gguf", "F32")
    tied_cfg = transformers.AutoConfig.from_pretrained(tied_dir)
    state, _ = simulate.simulated_state_dict(str(path), tied_cfg)
    assert "lm_head.weight" not in state  # the reference ties it to the embeddings
    # an untied reference gets the embeddings as its output head, which is what llama.cpp computes with
    state, notes = simulate.simulated_state_dict(str(path), transformers.AutoConfig.from_pretrained(untied_dir))
    assert torch.equal(state["lm_head.weight"], state["model.embed_tokens.weight"])
    assert any("lm_head taken from token_embd" in n for n in notes)


def test_fake_quant_pads_partial_blocks_instead_of_failing():
    x = torch.randn(2, 40)
    for fn in (lambda v: simulate.fake_quant_fp8(v, group=128), simulate.fake_quant_mxfp4,
               lambda v: simulate.fake_quant_nvfp4(v, 0.01)):
        y = fn(x)
        assert y.shape == x.shape and bool(torch.isfinite(y).all()) and not torch.equal(x, y)
    # the padded result equals quantising the zero-padded input and cutting the padding off
    padded = torch.nn.functional.pad(x, (0, 24))
    assert torch.equal(simulate.fake_quant_mxfp4(x), simulate.fake_quant_mxfp4(padded)[:, :40])


@pytest.mark.parametrize("scheme,config,act", [
    ("mxfp4-ct", P.mxfp4_compressed_tensors_config(activations=True), "fp4_e2m1"),
    ("mxfp8-ct", P.mxfp8_compressed_tensors_config(activations=True), "float8_e4m3"),
])
def test_mx_w4a4_and_w8a8_activations_use_e8m0_blocks(scheme, config, act, float_sd, ref, ref_config, tmp_path):
    from qcheck.classify import classify
    from qcheck.readers import load_checkpoint

    qc = P.quantize_model(float_sd, scheme)
    qc.quantization_config = config
    path = P.write_checkpoint(tmp_path / scheme, json.loads((ref / "config.json").read_text()), qc)
    inspection = classify(load_checkpoint(str(path)))
    assert inspection.quantization.activation_dtype == act
    state, _ = simulate.simulated_state_dict(str(path), ref_config)
    model = transformers.AutoModelForCausalLM.from_config(ref_config).eval()
    model.load_state_dict(state)
    seen = []
    model.model.layers[0].mlp.down_proj.register_forward_pre_hook(lambda _m, args: seen.append(args[0].clone()))
    done = simulate.apply_activation_fake_quant(model, inspection)
    assert done == f"{act} activations fake-quantised on 14 Linear layers (dynamic scales)"
    ids = torch.tensor([[1, 5, 9, 30]])
    captured = []
    model.model.layers[0].mlp.down_proj.register_forward_pre_hook(lambda _m, args: captured.append(args[0].clone()))
    with torch.no_grad():
        model(ids)
    fn = simulate.fake_quant_mxfp4 if act == "fp4_e2m1" else simulate.fake_quant_mxfp8
    # hooks run in registration order: the capture before fake-quant sees raw inputs, the one after sees them
    # quantised exactly as the MX function does
    assert torch.equal(captured[0], fn(seen[0])) and not torch.equal(captured[0], seen[0])


def test_gptq_3bit_act_order_checkpoint(float_sd, ref, ref_config, tmp_path):
    qc = P.quantize_model(float_sd, "gptq", bits=3, group_size=64, act_order=True, sym=False)
    path = P.write_checkpoint(tmp_path / "gptq3", json.loads((ref / "config.json").read_text()), qc)
    state, notes = simulate.simulated_state_dict(str(path), ref_config)
    for prefix in qc.quantized:
        g = lambda leaf, p=prefix: as_torch(qc, f"{p}.{leaf}")  # noqa: E731
        want = gptq.dequant_gptq(g("qweight"), g("qzeros"), g("scales"), g("g_idx"), prefix, bits=3)
        assert torch.equal(state[f"{prefix}.weight"], want)
    assert "GPTQ gptq 3-bit act-order x14" in notes[0]


def test_nan_codes_or_scales_are_refused_by_tensor(built, ref_config, tmp_path):
    def nan_code(t):
        w = t["model.layers.0.self_attn.o_proj.weight"].view(torch.uint8).clone()
        w[0, 0] = 0x7F  # E4M3 NaN
        t["model.layers.0.self_attn.o_proj.weight"] = w.view(torch.float8_e4m3fn)

    bad = _rewrite(built["fp8-channel"][0], tmp_path / "nan", nan_code)
    with pytest.raises(InputError, match=r"model\.layers\.0\.self_attn\.o_proj\.weight: 1 value\(s\) are NaN"):
        simulate.simulated_state_dict(str(bad), ref_config)

    def nan_scale(t):
        t["model.layers.1.mlp.up_proj.weight_scale"][0, 0] = 255  # E8M0 NaN

    bad = _rewrite(built["mxfp4-ct"][0], tmp_path / "nan-scale", nan_scale)
    with pytest.raises(InputError, match=r"model\.layers\.1\.mlp\.up_proj\.weight: 32 value\(s\) are NaN"):
        simulate.simulated_state_dict(str(bad), ref_config)


def test_nvfp4_without_its_global_scale_is_refused(built, ref_config, tmp_path):
    bad = _rewrite(built["nvfp4-ct"][0], tmp_path / "noglobal",
                   lambda t: t.pop("model.layers.0.mlp.gate_proj.weight_global_scale"))
    with pytest.raises(InputError, match=r"module model\.layers\.0\.mlp\.gate_proj: weight_packed with a "
                                         r"torch\.float8_e4m3fn weight_scale"):
        simulate.simulated_state_dict(str(bad), ref_config)
