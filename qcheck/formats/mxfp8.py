"""MXFP8 (OCP microscaling FP8: E4M3 values, an E8M0 scale per 32). Found by the FP8 scanner from its U8
scales; configs come from compressed-tensors and ModelOpt."""

from qcheck.formats.record import Format, Layout, Ref, Variant

FORMAT = Format(
    method="mxfp8",
    tensor_cores="fp8",
    label="MXFP8",
    layouts=(Layout("mxfp8", Ref("qcheck.eval.dequant.layouts:fp8")),),
    simulated=True,
    shows_scale_dtype=True,
    variants=(
        Variant("MXFP8 W8A8", {"weight_bits": 8, "weight_dtype": "float8_e4m3", "activation_dtype": "float8_e4m3",
                               "scale_dtype": "e8m0", "group_size": 32, "scale_granularity": "group",
                               "producer": "modelopt", "config_method": "MXFP8", "format": "MXFP8"}),
    ),
)
