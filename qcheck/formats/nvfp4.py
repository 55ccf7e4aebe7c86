"""NVFP4: E2M1 values, an E4M3 scale per 16 and a global FP32 scale (ModelOpt ``weight_scale_2``,
compressed-tensors ``weight_global_scale``). Found by the MX scanner (``mxfp4`` module)."""

from qcheck.formats.record import Format, Layout, Ref, Variant

FORMAT = Format(
    method="nvfp4",
    tensor_cores="fp4",
    label="NVFP4",
    layouts=(Layout("nvfp4-modelopt", Ref("qcheck.eval.dequant.layouts:nvfp4_modelopt")),
             Layout("nvfp4-compressed-tensors", Ref("qcheck.eval.dequant.layouts:weight_packed"))),
    simulated=True,
    activation_if_input_scale=("fp4_e2m1", "dynamic per-group 16"),
    shows_scale_dtype=True,
    variants=(
        Variant("W4A4 (ModelOpt NVFP4)", {"weight_bits": 4, "weight_dtype": "fp4_e2m1", "activation_dtype": "fp4_e2m1",
                                          "scale_dtype": "float8_e4m3", "group_size": 16, "scale_granularity": "group",
                                          "producer": "modelopt", "config_method": "NVFP4", "format": "NVFP4"}),
        Variant("W4A16 weight-only", {"weight_bits": 4, "weight_dtype": "fp4_e2m1", "activation_dtype": None,
                                      "scale_dtype": "float8_e4m3", "group_size": 16, "scale_granularity": "group",
                                      "producer": "compressed-tensors", "config_method": "compressed-tensors",
                                      "format": "nvfp4-pack-quantized"}),
    ),
)
