"""INT4 (and other sub-8-bit integer) weights with float scales that are not GPTQ/AWQ packs
(compressed-tensors ``pack-quantized``, Quark ``reorder``, quanto). Found by the compressed-tensors scanner."""

from qcheck.formats.record import Format, Layout, Ref, Variant

FORMAT = Format(
    method="int4",
    label="INT4",
    layouts=(Layout("pack-quantized", Ref("qcheck.eval.dequant.layouts:weight_packed")),
             Layout("int-quantized", Ref("qcheck.eval.dequant.layouts:int_quantized"))),
    simulated=True,
    variants=(
        Variant("W4A16 (compressed-tensors pack-quantized)",
                {"weight_bits": 4, "weight_dtype": "int4", "activation_dtype": None, "group_size": 128,
                 "scale_granularity": "group", "producer": "compressed-tensors", "config_method": "compressed-tensors",
                 "format": "pack-quantized"}),
    ),
)
