"""support.packing: scalar encodings and bit layouts checked against torch, compressed-tensors and scalar
transcriptions of the producers' packing loops (AutoAWQ, AutoGPTQ, MLX)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import packing as P

torch = pytest.importorskip("torch")


# ------------------------------------------------------------------------------------------ FP8 / BF16


def test_fp8_decode_table_matches_torch_for_all_256_codes():
    ours = P.fp8_e4m3_decode(np.arange(256, dtype=np.uint8))
    theirs = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    assert np.array_equal(ours, theirs, equal_nan=True)
    assert P.fp8_e4m3_decode(np.array([0x7E, 0x01, 0xFE], dtype=np.uint8)).tolist() == [448.0, 2.0**-9, -448.0]


def _fp8_rounding_inputs() -> np.ndarray:
    rng = np.random.default_rng(1)
    exact = P.FP8_E4M3_VALUES[~np.isnan(P.FP8_E4M3_VALUES)]
    mids = (exact[:-1] + exact[1:]) / 2  # ties between neighbours (sorted within each sign half)
    return np.concatenate([
        rng.standard_normal(50_000) * 50, rng.standard_normal(5_000) * 1e-3, exact, mids,
        np.linspace(-448, 448, 10_001), [0.0, -0.0, 2.0**-10, 2.0**-9 * 1.5, 464.0, 500.0, -1e4],
    ]).astype(np.float32)


def test_fp8_encode_matches_torch_rounding_including_ties_and_subnormals():
    """qcheck's own FP8 code, checked against a table-driven round-to-nearest-even that shares nothing with it (and
    the table against torch): the E4M3 rounding of the activation/KV emulation (``emulation.blocks.fp8``), ties
    to even, subnormals, both signs and the saturation at 448, with a unit and a power-of-two scale; and the FP8
    weight decoding (``dequant.fp8.fp8_to_float``) of the bytes a producer writes."""
    from qcheck.eval.dequant.fp8 import dequant_fp8, fp8_to_float
    from qcheck.eval.emulation.blocks import fp8

    x = _fp8_rounding_inputs()
    codes = P.fp8_e4m3_encode(x)
    assert np.array_equal(codes, torch.from_numpy(x).to(torch.float8_e4m3fn).view(torch.uint8).numpy())
    rounded = torch.from_numpy(P.fp8_e4m3_decode(codes))
    assert torch.equal(fp8(torch.from_numpy(x), "e4m3"), rounded)
    assert torch.equal(fp8(torch.from_numpy(x) / 8, "e4m3", scale=0.125), rounded / 8)
    ties = torch.tensor([1.0625, 1.1875, -1.0625, 2.0**-9 * 1.5, 2.0**-9 * 2.5])  # halfway cases: to the even code
    assert fp8(ties, "e4m3").tolist() == [1.0, 1.25, -1.0, 2.0**-8, 2.0**-8]
    decoded = fp8_to_float(torch.from_numpy(codes), "w")
    assert torch.equal(decoded, rounded)
    # a per-tensor scale multiplies the decoded values (the weight path of a compressed-tensors FP8 checkpoint)
    weight = torch.from_numpy(codes[:4096].copy()).reshape(64, 64)
    assert torch.equal(dequant_fp8(weight, torch.tensor([0.5]), "w"), rounded[:4096].reshape(64, 64) * 0.5)


def test_fp8_encode_saturates_and_maps_nan():
    codes = P.fp8_e4m3_encode(np.array([1e6, -1e6, 449.0, np.nan], dtype=np.float32))
    assert codes.tolist() == [0x7E, 0xFE, 0x7E, 0x7F]


def test_bf16_encode_matches_torch():
    x = (np.random.default_rng(2).standard_normal(20_000) * 10).astype(np.float32)
    ours = P.bf16_encode(x)
    theirs = torch.from_numpy(x).bfloat16().view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(ours, theirs)
    assert np.array_equal(P.bf16_decode(ours), torch.from_numpy(x).bfloat16().float().numpy())


# ------------------------------------------------------------------------------------------ FP4 / E8M0


def test_fp4_rounding_and_nibble_order_match_compressed_tensors():
    fp4_utils = pytest.importorskip("compressed_tensors.quantization.utils.fp4_utils")
    helpers = pytest.importorskip("compressed_tensors.compressors.nvfp4.helpers")
    v = np.linspace(-7, 7, 2801).astype(np.float32)[:2800]
    rounded = fp4_utils.cast_to_fp4(torch.from_numpy(v))
    ours = P.fp4_e2m1_decode(P.fp4_e2m1_encode(v))
    assert np.array_equal(rounded.numpy(), ours)
    packed = helpers.pack_fp4_to_uint8(rounded.reshape(4, -1)).numpy()
    assert np.array_equal(packed, P.pack_nibbles_low_first(P.fp4_e2m1_encode(v).reshape(4, -1)))


def test_fp4_ties_go_to_even_code():
    ties = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.75, 7.0], dtype=np.float32)
    assert P.fp4_e2m1_decode(P.fp4_e2m1_encode(ties)).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -1.0, 6.0]


def test_nibbles_low_first_round_trip_and_e8m0():
    codes = np.arange(16, dtype=np.uint8).reshape(2, 8)
    packed = P.pack_nibbles_low_first(codes)
    assert packed[0, 0] == 0x10 and packed[0, 1] == 0x32
    assert np.array_equal(P.unpack_nibbles_low_first(packed), codes)
    assert P.e8m0_decode(np.array([127, 128, 120], dtype=np.uint8)).tolist() == [1.0, 2.0, 2.0**-7]
    assert np.isnan(P.e8m0_decode(np.array([255], dtype=np.uint8))[0])


# ------------------------------------------------------------------------------------------ bit streams


@pytest.mark.parametrize("bits", range(1, 9))
def test_pack_bits_le_equals_compressed_tensors_pack_to_int32(bits):
    helpers = pytest.importorskip("compressed_tensors.compressors.pack_quantized.helpers")
    rng = np.random.default_rng(bits)
    q = rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), size=(6, 96)).astype(np.int8)
    offset = 1 << (bits - 1)
    ours = P.pack_bits_le(q.astype(np.int64) + offset, bits).view(np.int32)
    assert np.array_equal(ours, helpers.pack_to_int32(torch.from_numpy(q), bits).numpy())
    ours0 = P.pack_bits_le((q.astype(np.int64) + offset).T, bits).T.view(np.int32)
    assert np.array_equal(ours0, helpers.pack_to_int32(torch.from_numpy(q), bits, packed_dim=0).numpy())
    assert np.array_equal(P.unpack_bits_le(ours, bits, 96) - offset, q)


@settings(max_examples=60, deadline=None)
@given(bits=st.integers(1, 8), rows=st.integers(1, 4), count=st.integers(1, 70), seed=st.integers(0, 2**32 - 1))
def test_pack_bits_le_round_trips_any_width_and_length(bits, rows, count, seed):
    codes = np.random.default_rng(seed).integers(0, 1 << bits, size=(rows, count))
    words = P.pack_bits_le(codes, bits)
    assert words.shape == (rows, -(-count * bits // 32))
    assert np.array_equal(P.unpack_bits_le(words, bits, count), codes)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=-448.0, max_value=448.0, allow_nan=False, width=32))
def test_fp8_encode_agrees_with_torch_on_any_float(x):
    ours = int(P.fp8_e4m3_encode(np.array([x], dtype=np.float32))[0])
    theirs = int(torch.tensor([x], dtype=torch.float32).to(torch.float8_e4m3fn).view(torch.uint8)[0])
    assert ours == theirs


def test_pack_bits_le_rejects_values_that_do_not_fit():
    with pytest.raises(ValueError, match="does not fit in 3 bits"):
        P.pack_bits_le(np.array([[8]]), 3)


def test_mlx_3bit_layout_matches_mlx_extract_bits():
    """mlx's ``extract_bits<3>`` reads 8 values from 3 bytes: w0 = b0 & 7, w2 = (b0 >> 6) + ((b1 & 1) << 2) ..."""
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 8, size=(1, 64))
    raw = P.pack_bits_le(codes, 3).view(np.uint8)[0]
    for chunk in range(8):
        b = [int(v) for v in raw[3 * chunk: 3 * chunk + 3]]
        got = [
            b[0] & 0x7, (b[0] & 0x38) >> 3, ((b[0] & 0xC0) >> 6) + ((b[1] & 0x1) << 2), (b[1] & 0xE) >> 1,
            (b[1] & 0x70) >> 4, ((b[1] & 0x80) >> 7) + ((b[2] & 0x3) << 1), (b[2] & 0x1C) >> 2, (b[2] & 0xE0) >> 5,
        ]
        assert got == codes[0, 8 * chunk: 8 * chunk + 8].tolist()


def test_awq_pack_equals_autoawq_loop():
    rng = np.random.default_rng(4)
    intweight = rng.integers(0, 16, size=(5, 32))
    ref = np.zeros((5, 4), dtype=np.int64)
    order_map = [0, 2, 4, 6, 1, 3, 5, 7]  # AutoAWQ WQLinear_GEMM.from_linear
    for col in range(4):
        for i in range(8):
            ref[:, col] |= intweight[:, col * 8 + order_map[i]] << (i * 4)
    ours = P._awq_pack(intweight)
    assert np.array_equal(ours.view(np.uint32).astype(np.int64), ref)
    assert np.array_equal(P.awq_unpack(ours), intweight)


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_gptq_qweight_layout_equals_autogptq_pack_loop(bits):
    rng = np.random.default_rng(bits)
    in_f, out_f = 64, 32
    w = rng.standard_normal((out_f, in_f)).astype(np.float32)
    t = P.pack_gptq(w, "m", bits=bits, group_size=32)
    qweight = t["m.qweight"][0].view(np.uint32).astype(np.int64)
    scales = P.to_float32(*t["m.scales"])
    zeros = P.unpack_bits_le(t["m.qzeros"][0].view(np.uint32), bits, out_f)
    zeros = (zeros + 1) & ((1 << bits) - 1)  # v1
    g_idx = t["m.g_idx"][0]
    intweight = np.clip(np.round(w.T / scales[g_idx] + zeros[g_idx]), 0, (1 << bits) - 1).astype(np.int64)
    ref = np.zeros((in_f * bits // 32, out_f), dtype=np.int64)
    i = row = 0  # AutoGPTQ QuantLinear.pack
    while row < ref.shape[0]:
        if bits in (2, 4, 8):
            for j in range(i, i + 32 // bits):
                ref[row] |= intweight[j] << (bits * (j - i))
            i += 32 // bits
            row += 1
        else:  # the 3-bit branch, verbatim in structure
            for j in range(i, i + 10):
                ref[row] |= intweight[j] << (3 * (j - i))
            i += 10
            ref[row] |= (intweight[i] << 30) & 0xFFFFFFFF
            row += 1
            ref[row] |= (intweight[i] >> 2) & 1
            i += 1
            for j in range(i, i + 10):
                ref[row] |= intweight[j] << (3 * (j - i) + 1)
            i += 10
            ref[row] |= (intweight[i] << 31) & 0xFFFFFFFF
            row += 1
            ref[row] |= (intweight[i] >> 1) & 0x3
            i += 1
            for j in range(i, i + 10):
                ref[row] |= intweight[j] << (3 * (j - i) + 2)
            i += 10
            row += 1
    assert np.array_equal(qweight, ref)


def test_gptq_act_order_g_idx_follows_the_permutation():
    w = np.random.default_rng(5).standard_normal((8, 64)).astype(np.float32)
    perm = P.gptq_act_order_perm(w, seed=3)
    g_idx = P.pack_gptq(w, "m", group_size=16, perm=perm)["m.g_idx"][0]
    assert [int(g_idx[perm[k]]) for k in range(64)] == [k // 16 for k in range(64)]
    assert (np.diff(g_idx) < 0).any()  # not monotonic: a real act-order layout


# ------------------------------------------------------------------------------------------ layouts


def test_layout_shapes_and_dtypes_per_producer():
    w = np.random.default_rng(6).standard_normal((64, 256)).astype(np.float32)
    shapes = {k: (v[0].shape, v[1]) for k, v in P.pack_nvfp4_modelopt(w, "m", input_amax=2.0).items()}
    assert shapes == {"m.weight": ((64, 128), "U8"), "m.weight_scale": ((64, 16), "F8_E4M3"),
                      "m.weight_scale_2": ((), "F32"), "m.input_scale": ((), "F32")}
    shapes = {k: (v[0].shape, v[1]) for k, v in P.pack_nvfp4_compressed_tensors(w, "m", input_amax=2.0).items()}
    assert shapes == {"m.weight_packed": ((64, 128), "U8"), "m.weight_scale": ((64, 16), "F8_E4M3"),
                      "m.weight_global_scale": ((1,), "F32"), "m.input_global_scale": ((1,), "F32")}
    shapes = {k: (v[0].shape, v[1]) for k, v in P.pack_mxfp4_gptoss(w.reshape(2, 32, 256), "e.down_proj").items()}
    assert shapes == {"e.down_proj_blocks": ((2, 32, 8, 16), "U8"), "e.down_proj_scales": ((2, 32, 8), "U8")}
    shapes = {k: (v[0].shape, v[1]) for k, v in P.pack_awq_gemm(w, "m", group_size=128).items()}
    assert shapes == {"m.qweight": ((256, 8), "I32"), "m.qzeros": ((2, 8), "I32"), "m.scales": ((2, 64), "F16")}
    shapes = {k: (v[0].shape, v[1]) for k, v in P.pack_gptq(w, "m", group_size=128).items()}
    assert shapes == {"m.qweight": ((32, 64), "I32"), "m.qzeros": ((2, 8), "I32"), "m.scales": ((2, 64), "F16"),
                      "m.g_idx": ((256,), "I32")}
    shapes = {k: (v[0].shape, v[1]) for k, v in P.pack_int_compressed_tensors(w, "m", symmetric=False).items()}
    assert shapes == {"m.weight_packed": ((64, 32), "I32"), "m.weight_scale": ((64, 2), "BF16"),
                      "m.weight_shape": ((2,), "I64"), "m.weight_zero_point": ((8, 2), "I32")}
    shapes = {k: (v[0].shape, v[1]) for k, v in P.pack_mlx_affine(w, "m", bits=6, group_size=64).items()}
    assert shapes == {"m.weight": ((64, 48), "U32"), "m.scales": ((64, 4), "F16"), "m.biases": ((64, 4), "F16")}
    shapes = {k: (v[0].shape, v[1]) for k, v in P.pack_fp8_block_deepseek(w[:, :200], "m").items()}
    assert shapes == {"m.weight": ((64, 200), "F8_E4M3"), "m.weight_scale_inv": ((1, 2), "F32")}


def test_nvfp4_global_scales_are_reciprocal_between_producers():
    w = np.random.default_rng(7).standard_normal((16, 64)).astype(np.float32)
    mo = P.pack_nvfp4_modelopt(w, "m")
    ct = P.pack_nvfp4_compressed_tensors(w, "m")
    assert float(mo["m.weight_scale_2"][0]) == pytest.approx(1.0 / float(ct["m.weight_global_scale"][0][0]), rel=1e-6)
    assert float(mo["m.weight_scale_2"][0]) == pytest.approx(np.abs(w).max() / (6 * 448), rel=1e-6)
    assert np.array_equal(mo["m.weight"][0], ct["m.weight_packed"][0])


def test_mlx_affine_edge_lands_on_a_code():
    w = np.random.default_rng(8).standard_normal((4, 64)).astype(np.float32)
    t = P.pack_mlx_affine(w, "m", bits=4, group_size=64, dtype="F32")
    q = P.unpack_bits_le(t["m.weight"][0], 4, 64)
    deq = q * t["m.scales"][0] + t["m.biases"][0]
    big = np.argmax(np.abs(w), axis=1)
    assert np.allclose(deq[np.arange(4), big], w[np.arange(4), big], atol=1e-5)


@pytest.mark.parametrize("call", [
    lambda w: P.pack_awq_gemm(w[:, :60], "m", group_size=32),
    lambda w: P.pack_gptq(w, "m", bits=5),
    lambda w: P.pack_mlx_affine(w[:, :48], "m", group_size=64),
    lambda w: P.pack_nvfp4_modelopt(w[:, :24], "m"),
    lambda w: P.pack_fp8_compressed_tensors(w, "m", strategy="row"),
    lambda w: P.pack_gptq(w, "m", group_size=32, perm=np.zeros(64, dtype=int)),
    lambda w: P.quantize_model({"a.weight": w}, "int3"),
])
def test_packers_reject_layouts_the_producer_cannot_write(call):
    w = np.ones((12, 64), dtype=np.float32)
    with pytest.raises(ValueError):
        call(w)


# ------------------------------------------------------------------------------------------ files


def test_save_safetensors_is_readable_by_safetensors(tmp_path):
    from safetensors import safe_open

    w = np.random.default_rng(9).standard_normal((8, 32)).astype(np.float32)
    tensors = {**P.pack_fp8_compressed_tensors(w, "a", strategy="channel"), **P.pack_mlx_affine(w, "b", group_size=32)}
    path = P.save_safetensors(tmp_path / "x.safetensors", tensors, {"format": "pt"})
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    assert n % 8 == 0 and json.loads(raw[8:8 + n])["__metadata__"] == {"format": "pt"}
    with safe_open(str(path), framework="pt") as f:
        assert f.get_tensor("a.weight").dtype == torch.float8_e4m3fn
        assert torch.equal(f.get_tensor("a.weight").float(), torch.from_numpy(P.fp8_e4m3_decode(tensors["a.weight"][0])))
        assert f.get_tensor("a.weight_scale").dtype == torch.bfloat16
        assert f.get_tensor("b.weight").dtype == torch.uint32
        assert np.array_equal(f.get_tensor("b.weight").view(torch.int32).numpy().view(np.uint32), tensors["b.weight"][0])


def test_quantize_model_writes_configs_and_keeps_unquantised_tensors(tmp_path):
    rng = np.random.default_rng(10)
    sd = {"model.layers.0.mlp.up_proj.weight": rng.standard_normal((64, 64)).astype(np.float32),
          "model.norm.weight": np.ones(64, dtype=np.float32),
          "lm_head.weight": rng.standard_normal((32, 64)).astype(np.float32)}
    qc = P.quantize_model(sd, "nvfp4-modelopt")
    assert qc.quantized == ["model.layers.0.mlp.up_proj"]
    assert qc.tensors["lm_head.weight"][1] == "BF16" and "model.layers.0.mlp.up_proj.weight_scale_2" in qc.tensors
    out = P.write_checkpoint(tmp_path / "m", {"model_type": "llama"}, qc, {"tokenizer.json": "{}"})
    assert json.loads((out / "hf_quant_config.json").read_text())["quantization"]["quant_algo"] == "NVFP4"
    assert json.loads((out / "config.json").read_text())["quantization_config"]["quant_method"] == "modelopt"
    mlx = P.quantize_model(sd, "mlx", bits=8, group_size=32, dtype="F16")
    assert mlx.config_updates["quantization"] == {"group_size": 32, "bits": 8, "mode": "affine"}
    assert mlx.metadata == {"format": "mlx"} and mlx.quantization_config is None
    gptq = P.quantize_model(sd, "gptq", group_size=32, act_order=True)
    assert gptq.side_files["quantize_config.json"]["desc_act"] is True
