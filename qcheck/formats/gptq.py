"""GPTQ: ``qweight`` packed along the input rows, ``qzeros``, ``scales``, ``g_idx``; configs in config.json or
quantize_config.json. Its scanner (``qcheck.classify.gptq_awq``) finds AWQ packs too."""

from qcheck.formats.record import Family, Format, Layout, Ref, Variant

_CONFIG = Ref("qcheck.classify.gptq_awq:apply_config")

FORMAT = Format(
    method="gptq",
    label="GPTQ",
    layouts=(Layout("gptq", Ref("qcheck.eval.dequant.layouts:gptq")),),
    families=(Family("gptq", ("gptq", "gptq_v2", "marlin", "gptq_marlin", "bitblas", "gptq_bitblas"),
                     reader=_CONFIG, scanner=Ref("qcheck.classify.gptq_awq:scan"), scan_rank=40),),
    simulated=True,
    variants=(
        Variant("4-bit g128", {"weight_bits": 4, "weight_dtype": "int4", "group_size": 128, "scale_granularity": "group",
                               "zero_point": False, "act_order": False, "producer": "gptqmodel",
                               "config_method": "gptq", "format": "gptq"}, {"dtype": "float16"}),
        Variant("8-bit g128", {"weight_bits": 8, "weight_dtype": "int8", "group_size": 128, "scale_granularity": "group",
                               "zero_point": False, "act_order": False, "producer": "gptqmodel",
                               "config_method": "gptq", "format": "gptq"}, {"dtype": "float16"}),
    ),
)
