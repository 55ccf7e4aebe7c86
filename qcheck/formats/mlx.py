"""MLX (mlx-lm): U32 ``weight`` + ``scales`` (+ ``biases`` for affine), the config's ``quantization`` block;
transformers' ``metal`` method (``qbiases``)."""

from qcheck.formats.record import Family, Format, Layout, Ref, Variant

_MLX = Ref("qcheck.eval.dequant.layouts:mlx")

FORMAT = Format(
    method="mlx",
    label="MLX",
    layouts=(Layout("mlx", _MLX), Layout("mlx-metal", _MLX)),
    families=(Family("mlx", ("metal", "mlx"), reader=Ref("qcheck.classify.mlx:apply_config"),
                     scanner=Ref("qcheck.classify.mlx:scan"), scan_rank=80,
                     hints=Ref("qcheck.classify.mlx:view_hints")),),
    simulated=True,
    format_first=True,
    variants=(
        Variant("affine 4-bit g64", {"weight_bits": 4, "weight_dtype": "int4", "group_size": 64,
                                     "scale_granularity": "group", "zero_point": True, "producer": "mlx-lm",
                                     "config_method": "mlx", "format": "affine"}),
    ),
)
