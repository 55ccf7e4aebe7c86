"""Regressions found after the first classifier pass, each written as the input that exposed it."""

from __future__ import annotations

from qcheck.classify import classify
from support.builders import Shape, fp8_block_deepseek, quark_fp8_fixture


def test_one_block_fp8_scales_are_block_scales_not_per_tensor():
    # hidden 128: every q/k/v/o weight_scale_inv is [1, 1], a single 128x128 block. Reading that as a
    # per-tensor scale would send block FP8 down the per-tensor rows of the matrix.
    shape = Shape(hidden=128, intermediate=256, heads=4, kv_heads=2)
    q = classify(fp8_block_deepseek(shape).checkpoint()).quantization
    assert q.method == "fp8"
    assert q.scale_granularity == "block"
    assert q.block_size == [128, 128]


def test_quark_kv_cache_group_with_non_string_entries_does_not_crash():
    fx = quark_fp8_fixture()
    export = fx.configs["config.json"]["quantization_config"]["export"]
    export["kv_cache_group"] = [7, None, {"x": 1}, "*k_proj"]
    insp = classify(fx.checkpoint())
    assert insp.quantization.method == "fp8"
    assert insp.quantization.producer == "quark"

