"""AWQ: ``qweight`` packed along the output columns (AutoAWQ GEMM) or inputs (GEMV), ``qzeros``, ``scales``;
ModelOpt's INT4-AWQ U8 layout. Found by the GPTQ/AWQ scanner (``gptq`` module) and ModelOpt's."""

from qcheck.formats.record import Family, Format, Layout, Ref, Variant

FORMAT = Format(
    method="awq",
    label="AWQ",
    layouts=(Layout("awq-gemm", Ref("qcheck.eval.dequant.layouts:awq_gemm")),
             Layout("awq-gemv", Ref("qcheck.eval.dequant.layouts:awq_gemv")),
             Layout("int4-awq-modelopt")),
    families=(Family("awq", ("awq", "awq_marlin", "gemm"), reader=Ref("qcheck.classify.gptq_awq:apply_config")),),
    simulated=True,
    variants=(
        Variant("4-bit g128 (AutoAWQ GEMM)", {"weight_bits": 4, "weight_dtype": "int4", "group_size": 128,
                                              "scale_granularity": "group", "zero_point": True, "producer": "autoawq",
                                              "config_method": "awq", "format": "gemm"}, {"dtype": "float16"}),
    ),
)
