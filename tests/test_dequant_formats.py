"""Dequantisers round-trip: pack a known weight in the producer's layout (support.packing), dequantise it
(qcheck.eval.dequant), and compare with an independent computation of the ideal grid value of every
element from the *original* float weight (scalar loops / torch's own FP8 cast), and with the reference
libraries where they run on CPU (transformers' gpt-oss MXFP4 decoder, compressed-tensors)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qcheck.errors import InputError
from support import packing as P

torch = pytest.importorskip("torch")

from qcheck.eval.dequant import awq, compressed, fp4, fp8, gptq, mlx  # noqa: E402
from qcheck.eval.dequant._common import unpack_le  # noqa: E402

E2M1_GRID = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def t(packed: P.Tensors, name: str):
    """A packed tensor as safetensors would hand it to torch (BF16 / F8 / U32 reinterpreted)."""
    arr, dtype = packed[name]
    arr = np.ascontiguousarray(arr)
    if dtype == "BF16":
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    if dtype == "F8_E4M3":
        return torch.from_numpy(arr).view(torch.float8_e4m3fn)
    if dtype == "U32":
        return torch.from_numpy(arr.view(np.int32)).view(torch.uint32)
    return torch.from_numpy(arr)


def e2m1_nearest(v: float) -> float:
    """Scalar reference: nearest E2M1 value, ties to the even code, saturating at 6."""
    mag = min(abs(v), 6.0)
    best = min(range(8), key=lambda i: (abs(E2M1_GRID[i] - mag), i % 2))
    return math.copysign(E2M1_GRID[best], v)


def mx_exponent(amax: float) -> int:
    """compressed-tensors generate_mx_scales: round amax half-up to 1 mantissa bit, then floor(log2)."""
    if amax == 0:
        return -125  # so that exponent - 2 hits the E8M0 minimum, 2**-127
    e = math.floor(math.log2(amax))
    m = amax / 2.0**e
    return e + 1 if m + 0.25 >= 2.0 else e


def fp8_round(v: float) -> float:
    return float(torch.tensor(v, dtype=torch.float32).to(torch.float8_e4m3fn).float())


def bf16_round(v: float) -> float:
    return float(torch.tensor(v, dtype=torch.float32).bfloat16().float())


def f16_round(v: float) -> float:
    return float(np.float32(np.float16(v)))


@pytest.fixture(scope="module")
def weight():
    rng = np.random.default_rng(42)
    w = rng.standard_normal((32, 256)).astype(np.float32) * 0.05
    w[3, 17] = 0.9  # an outlier, so block scales differ
    w[5, :16] = 0.0  # an all-zero block
    return w


# ------------------------------------------------------------------------------------------ FP8


@pytest.mark.parametrize("strategy", ["tensor", "channel", "block"])
def test_fp8_compressed_tensors_round_trip(weight, strategy):
    packed = P.pack_fp8_compressed_tensors(weight, "m", strategy=strategy, block=(16, 128))
    got = fp8.dequant_fp8(t(packed, "m.weight"), t(packed, "m.weight_scale"), "m", block=(16, 128)).numpy()
    ref = np.zeros_like(weight)
    for r in range(weight.shape[0]):
        for c in range(weight.shape[1]):
            if strategy == "tensor":
                amax = np.abs(weight).max()
            elif strategy == "channel":
                amax = np.abs(weight[r]).max()
            else:
                amax = np.abs(weight[r // 16 * 16: r // 16 * 16 + 16, c // 128 * 128: c // 128 * 128 + 128]).max()
            s = bf16_round(float(amax) / 448.0) or 1.0
            ref[r, c] = fp8_round(float(weight[r, c]) / s) * s
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)
    assert np.abs(got - weight).max() > 0  # quantisation really happened


def test_fp8_deepseek_block_with_partial_edge_blocks():
    w = np.random.default_rng(1).standard_normal((200, 300)).astype(np.float32)
    packed = P.pack_fp8_block_deepseek(w, "m")
    assert packed["m.weight_scale_inv"][0].shape == (2, 3)
    got = fp8.dequant_fp8(t(packed, "m.weight"), t(packed, "m.weight_scale_inv"), "m").numpy()
    ref = np.zeros_like(w)
    for bo in range(2):
        for bi in range(3):
            blk = w[bo * 128:(bo + 1) * 128, bi * 128:(bi + 1) * 128]
            s = np.float32(np.abs(blk).max() / 448.0)
            q = torch.from_numpy(blk / s).to(torch.float8_e4m3fn).float().numpy()
            ref[bo * 128:(bo + 1) * 128, bi * 128:(bi + 1) * 128] = q * s
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_fp8_modelopt_pb_wo_scale_shape_and_mxfp8_scales():
    w8 = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).to(torch.float8_e4m3fn)
    w = w8.repeat_interleave(128, 0).repeat_interleave(128, 1)  # [256, 256]
    s = torch.tensor([[2.0, 3.0], [5.0, 7.0]]).reshape(2, 1, 2, 1)
    got = fp8.dequant_fp8(w, s, "m")
    assert got[0, 0] == 2.0 and got[0, 200] == 3.0 * 2.0 and got[200, 0] == 5.0 * 3.0 and got[255, 255] == 28.0
    e8m0 = torch.tensor([[127, 129]], dtype=torch.uint8)  # MXFP8: per 32 along the input axis
    got = fp8.dequant_fp8(torch.ones(1, 64).to(torch.float8_e4m3fn), e8m0, "m")
    assert got[0, 0] == 1.0 and got[0, 63] == 4.0


# ------------------------------------------------------------------------------------------ NVFP4 / MXFP4


@pytest.mark.parametrize("producer", ["modelopt", "compressed-tensors"])
def test_nvfp4_round_trip_against_scalar_reference(weight, producer):
    if producer == "modelopt":
        packed = P.pack_nvfp4_modelopt(weight, "m")
        g = float(packed["m.weight_scale_2"][0])
        got = fp4.dequant_nvfp4(t(packed, "m.weight"), t(packed, "m.weight_scale"), g, "m").numpy()
    else:
        packed = P.pack_nvfp4_compressed_tensors(weight, "m")
        gs = fp4.global_value(t(packed, "m.weight_global_scale"), "m")
        got = fp4.dequant_nvfp4(t(packed, "m.weight_packed"), t(packed, "m.weight_scale"), 1.0 / gs, "m").numpy()
        g = 1.0 / float(np.float32(448.0 * 6.0 / np.abs(weight).max()))
    assert g == pytest.approx(np.abs(weight).max() / 2688.0, rel=1e-6)
    ref = np.zeros_like(weight)
    for r in range(weight.shape[0]):
        for b in range(0, weight.shape[1], 16):
            block = weight[r, b:b + 16].astype(np.float64)
            per_block = float(np.abs(block).max()) / 6.0 / g or 1.0  # ModelOpt: zero block -> scale 1.0
            eff = fp8_round(min(max(per_block, 2.0**-9), 448.0)) * g
            for c in range(16):
                ref[r, b + c] = e2m1_nearest(block[c] / eff) * eff
    np.testing.assert_allclose(got, ref, rtol=2e-6, atol=1e-9)
    assert np.all(got[5, :16] == 0)


def test_mxfp4_compressed_tensors_round_trip_against_scalar_reference(weight):
    packed = P.pack_mxfp4_compressed_tensors(weight, "m")
    got = fp4.dequant_mxfp4(t(packed, "m.weight_packed"), t(packed, "m.weight_scale"), "m").numpy()
    ref = np.zeros_like(weight)
    for r in range(weight.shape[0]):
        for b in range(0, weight.shape[1], 32):
            block = weight[r, b:b + 32].astype(np.float64)
            scale = 2.0 ** (mx_exponent(float(np.abs(block).max())) - 2)
            for c in range(32):
                ref[r, b + c] = e2m1_nearest(block[c] / scale) * scale
    np.testing.assert_array_equal(got, ref.astype(np.float32))


def test_mxfp4_gptoss_blocks_match_transformers_decoder():
    mxfp4_integration = pytest.importorskip("transformers.integrations.mxfp4")
    w = np.random.default_rng(3).standard_normal((2, 16, 64)).astype(np.float32)  # [E, rows, in]
    packed = P.pack_mxfp4_gptoss(w, "model.layers.0.mlp.experts.down_proj")
    blocks = t(packed, "model.layers.0.mlp.experts.down_proj_blocks")
    scales = t(packed, "model.layers.0.mlp.experts.down_proj_scales")
    ours = fp4.dequant_mxfp4_blocks(blocks, scales, "x")
    theirs = mxfp4_integration.convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)
    # transformers returns the HF parameter orientation [E, in, rows] (transposed)
    assert torch.equal(ours, theirs.transpose(1, 2))
    assert float((ours - torch.from_numpy(w)).abs().max()) < 0.3 * float(np.abs(w).max())


def test_mxfp8_and_modelopt_fp8_round_trips(weight):
    packed = P.pack_mxfp8_compressed_tensors(weight, "m")
    got = fp8.dequant_fp8(t(packed, "m.weight"), t(packed, "m.weight_scale"), "m").numpy()
    ref = np.zeros_like(weight)
    for r in range(weight.shape[0]):
        for b in range(0, weight.shape[1], 32):
            block = weight[r, b:b + 32]
            scale = 2.0 ** (mx_exponent(float(np.abs(block).max())) - 8)
            ref[r, b:b + 32] = [fp8_round(float(v) / scale) * scale for v in block]
    np.testing.assert_array_equal(got, ref)
    for per_channel in (False, True):
        packed = P.pack_fp8_modelopt(weight, "m", per_channel=per_channel, input_scale=0.5)
        assert packed["m.weight_scale"][0].shape == ((32,) if per_channel else ())
        assert ("m.input_scale" in packed) is not per_channel
        got = fp8.dequant_fp8(t(packed, "m.weight"), t(packed, "m.weight_scale"), "m").numpy()
        amax = np.abs(weight).max(axis=1, keepdims=True) if per_channel else np.abs(weight).max()
        s = (amax / 448.0).astype(np.float32)
        ref = torch.from_numpy(weight / s).to(torch.float8_e4m3fn).float().numpy() * s
        np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_mx_exponent_avoids_clipping_like_compressed_tensors():
    """Block amax 7.9: OCP's floor rule gives scale 1 and clips 7.9 to 6; compressed-tensors rounds the amax
    mantissa first and takes scale 2 (7.9 -> 4 * 2 = 8)."""
    w = np.zeros((1, 32), dtype=np.float32)
    w[0, 0] = 7.9
    scales, codes = P.mxfp4_quantize(w)
    assert int(scales[0, 0]) == 128 and float(P.fp4_e2m1_decode(codes[0, 0])) * 2 == 8.0
    ct_mx = pytest.importorskip("compressed_tensors.quantization.utils.mxfp_utils")
    amax = torch.tensor([7.9, 6.9, 0.3, 1.0, 1e-3], dtype=torch.float32)
    theirs = ct_mx.generate_mx_scales(amax, num_bits=4).to(torch.int64).tolist()
    assert (P.mx_scale_exponent(amax.numpy(), 2) + 127).astype(np.int64).tolist() == theirs


# ------------------------------------------------------------------------------------------ AWQ / GPTQ


def test_awq_round_trip_against_autoawq_formula(weight):
    packed = P.pack_awq_gemm(weight, "m", group_size=64)
    got = awq.dequant_awq(t(packed, "m.qweight"), t(packed, "m.qzeros"), t(packed, "m.scales"), "m").numpy()
    ref = np.zeros_like(weight)
    for r in range(weight.shape[0]):
        for g in range(0, weight.shape[1], 64):
            grp = weight[r, g:g + 64]
            scale = f16_round(max(float(grp.max() - grp.min()), 1e-5) / 15)
            zero = min(max(-round(float(grp.min()) / scale), 0), 15)
            for c in range(64):
                q = min(max(round(float(grp[c]) / scale) + zero, 0), 15)
                ref[r, g + c] = (q - zero) * scale
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("bits,sym,act_order,fmt", [
    (4, True, False, "gptq"), (4, False, True, "gptq"), (8, True, True, "gptq"), (2, False, False, "gptq"),
    (3, True, True, "gptq"), (3, False, False, "gptq"),
    (4, False, True, "gptq_v2"),
])
def test_gptq_round_trip_against_quantizer_formula(weight, bits, sym, act_order, fmt):
    perm = P.gptq_act_order_perm(weight, seed=7) if act_order else None
    packed = P.pack_gptq(weight, "m", bits=bits, group_size=64, sym=sym, perm=perm, checkpoint_format=fmt)
    got = gptq.dequant_gptq(t(packed, "m.qweight"), t(packed, "m.qzeros"), t(packed, "m.scales"),
                            t(packed, "m.g_idx"), "m", bits=bits, checkpoint_format=fmt).numpy()
    maxq = (1 << bits) - 1
    order = list(perm) if perm is not None else list(range(weight.shape[1]))
    ref = np.zeros_like(weight)
    for r in range(weight.shape[0]):
        for k0 in range(0, len(order), 64):
            cols = order[k0:k0 + 64]
            vals = weight[r, cols].astype(np.float64)
            xmin, xmax = min(vals.min(), 0.0), max(vals.max(), 0.0)
            if sym:
                xmax = max(abs(xmin), xmax)
                xmin = -xmax
            scale = f16_round((xmax - xmin) / maxq)
            zero = (maxq + 1) // 2 if sym else min(max(round(-xmin / ((xmax - xmin) / maxq)), 0), maxq)
            for c in cols:
                q = min(max(round(float(weight[r, c]) / scale) + zero, 0), maxq)
                ref[r, c] = (q - zero) * scale
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-8)
    if act_order:
        assert (np.diff(packed["m.g_idx"][0]) < 0).any()


def test_gptq_v1_zero_point_zero_wraps_like_autogptq():
    w = np.abs(np.random.default_rng(4).standard_normal((8, 32))).astype(np.float32)  # min >= 0: zero = 0
    packed = P.pack_gptq(w, "m", bits=4, group_size=32, sym=False)
    assert (packed["m.qzeros"][0].view(np.uint32) == 0xFFFFFFFF).all()  # stored zero - 1 = -1 -> 0xF
    got = gptq.dequant_gptq(t(packed, "m.qweight"), t(packed, "m.qzeros"), t(packed, "m.scales"), None, "m").numpy()
    assert got.min() >= 0 and np.abs(got - w).max() < 0.5 * np.abs(w).max() / 15 + 1e-3


# ------------------------------------------------------------------------------------------ compressed-tensors ints


@pytest.mark.parametrize("bits,group,sym", [(4, 64, True), (4, 64, False), (8, None, True), (8, 32, False), (3, 64, True)])
def test_pack_quantized_round_trip_against_calculate_qparams_formula(weight, bits, group, sym):
    packed = P.pack_int_compressed_tensors(weight, "m", bits=bits, group_size=group, symmetric=sym)
    zp = t(packed, "m.weight_zero_point") if not sym else None
    got = compressed.dequant_pack_quantized(t(packed, "m.weight_packed"), t(packed, "m.weight_scale"),
                                            t(packed, "m.weight_shape"), "m", bits=bits, weight_zero_point=zp).numpy()
    qmin, qmax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    g = group or weight.shape[1]
    ref = np.zeros_like(weight)
    for r in range(weight.shape[0]):
        for c0 in range(0, weight.shape[1], g):
            grp = weight[r, c0:c0 + g].astype(np.float64)
            mn, mx = min(grp.min(), 0.0), max(grp.max(), 0.0)
            if sym:
                scale, z = bf16_round(max(abs(mn), abs(mx)) / ((qmax - qmin) / 2)), 0
            else:
                scale = bf16_round((mx - mn) / (qmax - qmin))
                z = min(max(round(qmin - mn / scale), qmin), qmax)
            for c in range(g):
                q = min(max(round(grp[c] / scale + z), qmin), qmax)
                ref[r, c0 + c] = (q - z) * scale
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-8)


def test_pack_quantized_matches_compressed_tensors_decompressor(weight):
    ct = pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    packed = P.pack_int_compressed_tensors(weight, "m", bits=4, group_size=64, symmetric=False, scale_dtype="F32")
    scheme = QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
        num_bits=4, type="int", symmetric=False, strategy="group", group_size=64))
    sd = {k.split(".", 1)[1]: t(packed, k) for k in packed}
    theirs = PackedQuantizationCompressor.decompress(sd, scheme)["weight"]
    ours = compressed.dequant_pack_quantized(sd["weight_packed"], sd["weight_scale"], sd["weight_shape"], "m",
                                             bits=4, weight_zero_point=sd["weight_zero_point"])
    assert ct is not None and torch.allclose(ours, theirs.float(), rtol=1e-6, atol=1e-7)


def test_int8_int_quantized_round_trip(weight):
    packed = P.pack_int8_compressed_tensors(weight, "m", scale_dtype="F32")
    got = compressed.dequant_int_quantized(t(packed, "m.weight"), t(packed, "m.weight_scale"), "m").numpy()
    s = np.abs(weight).max(axis=1, keepdims=True) / 127.5
    ref = np.clip(np.round(weight / s), -128, 127) * s
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-8)


# ------------------------------------------------------------------------------------------ MLX


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_mlx_affine_round_trip_against_mlx_algorithm(weight, bits):
    packed = P.pack_mlx_affine(weight, "m", bits=bits, group_size=64, dtype="F32")
    got = mlx.dequant_mlx_affine(t(packed, "m.weight"), t(packed, "m.scales"), t(packed, "m.biases"), "m",
                                 bits=bits, group_size=64).numpy()
    n_bins = (1 << bits) - 1
    ref = np.zeros_like(weight)
    for r in range(weight.shape[0]):
        for c0 in range(0, weight.shape[1], 64):
            grp = [float(v) for v in weight[r, c0:c0 + 64]]
            w_max, w_min = max(grp), min(grp)
            mask = abs(w_min) > abs(w_max)  # mlx affine_quantize
            scale = max((w_max - w_min) / n_bins, 1e-7)
            scale = scale if mask else -scale
            edge = w_min if mask else w_max
            q0 = round(edge / scale)
            scale = float(np.float32(edge / q0 if q0 != 0 else scale))
            bias = float(np.float32(0.0 if q0 == 0 else edge))
            for c in range(64):
                q = min(max(round((grp[c] - bias) / scale), 0), n_bins)
                ref[r, c0 + c] = q * scale + bias
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mode", ["mxfp4", "mxfp8"])
def test_mlx_microscaling_modes_round_trip(weight, mode):
    packed = P.pack_mlx_fp(weight, "m", mode=mode)
    assert packed["m.weight"][0].shape == (32, 256 * (4 if mode == "mxfp4" else 8) // 32)
    got = mlx.dequant_mlx_fp(t(packed, "m.weight"), t(packed, "m.scales"), "m", mode=mode).numpy()
    ref = np.zeros_like(weight)
    for r in range(weight.shape[0]):
        for b in range(0, weight.shape[1], 32):
            block = weight[r, b:b + 32]
            e = mx_exponent(float(np.abs(block).max()))
            scale = 2.0 ** (e - (2 if mode == "mxfp4" else 8))
            rnd = e2m1_nearest if mode == "mxfp4" else fp8_round
            ref[r, b:b + 32] = [rnd(float(v) / scale) * scale for v in block]
    np.testing.assert_array_equal(got, ref)
    with pytest.raises(InputError, match="mode 'nvfp4' is not simulated"):
        mlx.dequant_mlx_fp(t(packed, "m.weight"), t(packed, "m.scales"), "m", mode="nvfp4")


# ------------------------------------------------------------------------------------------ hostile input


def test_unpack_le_refuses_short_rows():
    with pytest.raises(InputError, match="words per row"):
        unpack_le(torch.zeros(2, 3, dtype=torch.int32), 4, 32, "m")


@pytest.mark.parametrize("call,match", [
    (lambda: awq.dequant_awq(torch.zeros(64, 2, dtype=torch.int32), torch.zeros(2, 2, dtype=torch.int32),
                             torch.zeros(2, 8, dtype=torch.float16), "m"), "AWQ scales"),
    (lambda: gptq.dequant_gptq(torch.zeros(8, 16, dtype=torch.int32), torch.zeros(2, 2, dtype=torch.int32),
                               torch.zeros(2, 16), torch.full((64,), 5, dtype=torch.int32), "m"), "g_idx values"),
    (lambda: gptq.dequant_gptq(torch.zeros(12, 16, dtype=torch.int32), torch.zeros(2, 6, dtype=torch.int32),
                               torch.zeros(2, 16), None, "m", bits=5), "5 bits"),
    (lambda: gptq.dequant_gptq(torch.zeros(12, 16, dtype=torch.int32), torch.zeros(2, 6, dtype=torch.int32),
                               torch.zeros(2, 16), None, "m", bits=3), "whole 3-bit packs"),
    (lambda: compressed.dequant_pack_quantized(torch.zeros(4, 3, dtype=torch.int32), torch.ones(4, 1),
                                               torch.tensor([4, 64]), "m", bits=4), "weight_packed"),
    (lambda: compressed.dequant_pack_quantized(torch.zeros(4, 8, dtype=torch.int32), torch.ones(4, 1),
                                               torch.tensor([-4, 64]), "m", bits=4), "not a valid matrix"),
    (lambda: fp4.dequant_mxfp4_blocks(torch.zeros(2, 4, 8, dtype=torch.uint8), torch.zeros(2, 4, dtype=torch.uint8),
                                      "m"), "16 bytes"),
    (lambda: fp4.dequant_nvfp4(torch.zeros(4, 8, dtype=torch.uint8), torch.zeros(4, 2, dtype=torch.uint8), 1.0, "m"),
     "block scale"),
    (lambda: fp4.global_value(torch.tensor([0.0]), "m"), "global scale is 0.0"),
    (lambda: fp8.dequant_fp8(torch.zeros(200, 256, dtype=torch.uint8), torch.ones(3, 2), "m"), "does not tile"),
    (lambda: mlx.dequant_mlx_affine(torch.zeros(4, 7, dtype=torch.int32), torch.ones(4, 1), torch.ones(4, 1), "m",
                                    bits=7, group_size=32), "bits must be"),
    (lambda: mlx.dequant_mlx_affine(torch.zeros(4, 4, dtype=torch.int32), torch.ones(4, 3), torch.ones(4, 1), "m",
                                    bits=4, group_size=32), "MLX scales"),
])
def test_dequantisers_reject_inconsistent_layouts_with_input_error(call, match):
    with pytest.raises(InputError, match=match):
        call()
