"""INT8 weights with float scales (compressed-tensors ``int-quantized``/``pack-quantized``, ModelOpt W8A8,
Quark, EETQ, quanto). Found by the compressed-tensors scanner (``compressed_tensors`` module)."""

from qcheck.formats.record import Format, Layout, Ref, Variant

FORMAT = Format(
    method="int8",
    tensor_cores="int8",
    label="INT8",
    layouts=(Layout("int-quantized", Ref("qcheck.eval.dequant.layouts:int_quantized")),
             Layout("pack-quantized", Ref("qcheck.eval.dequant.layouts:weight_packed"))),
    simulated=True,
    activation_if_input_scale=("int8", "static per-tensor"),
    granularity_of_weights=True,
    variants=(
        Variant("W8A8 (SmoothQuant-style)", {"weight_bits": 8, "weight_dtype": "int8", "activation_dtype": "int8",
                                             "scale_granularity": "per-channel", "group_size": -1,
                                             "producer": "compressed-tensors", "config_method": "compressed-tensors",
                                             "format": "int-quantized"}),
    ),
)
