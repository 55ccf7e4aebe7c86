"""MXFP4 (OCP microscaling): E2M1 values with an E8M0 scale per 32, in the gpt-oss ``*_blocks``/``*_scales``,
compressed-tensors and packed-U8 layouts; the ``mxfp4`` config. Its scanner (``qcheck.classify.mx``) finds
every FP4/FP6 pack: NVFP4 and MXFP6 weights too."""

from qcheck.formats.record import Family, Format, Layout, Ref, Variant

FORMAT = Format(
    method="mxfp4",
    tensor_cores="fp4",
    label="MXFP4",
    layouts=(Layout("mxfp4-gpt-oss", Ref("qcheck.eval.dequant.layouts:mxfp4_gpt_oss")),
             Layout("mxfp4-compressed-tensors", Ref("qcheck.eval.dequant.layouts:weight_packed")),
             Layout("mxfp4-packed")),
    families=(Family("mxfp4", ("mxfp4", "gpt_oss_mxfp4"), reader=Ref("qcheck.classify.mx:apply_config"),
                     scanner=Ref("qcheck.classify.mx:scan"), scan_rank=60),),
    simulated=True,
    shows_scale_dtype=True,
    variants=(
        Variant("GPT-OSS MoE experts", {"weight_bits": 4, "weight_dtype": "fp4_e2m1", "scale_dtype": "e8m0",
                                        "group_size": 32, "scale_granularity": "group", "producer": "gpt-oss",
                                        "config_method": "mxfp4"}, {"moe": True, "model_type": "gpt_oss"}),
        Variant("dense W4A4 (OCP MX)", {"weight_bits": 4, "weight_dtype": "fp4_e2m1", "activation_dtype": "fp4_e2m1",
                                        "scale_dtype": "e8m0", "group_size": 32, "scale_granularity": "group",
                                        "producer": "quark", "config_method": "quark"}),
    ),
)
