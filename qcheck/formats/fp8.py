"""FP8 weights (E4M3/E5M2): per-tensor, per-channel, 128x128 block (DeepSeek ``weight_scale_inv``), ModelOpt
4-D block scales; the ``fp8`` / ``fbgemm_fp8`` configs. The scanner also finds MXFP8 (E8M0 scales)."""

from qcheck.formats.record import Family, Format, Layout, Ref, Variant

_FP8 = Ref("qcheck.eval.dequant.layouts:fp8")

FORMAT = Format(
    method="fp8",
    tensor_cores="fp8",
    label="FP8",
    layouts=(Layout("fp8", _FP8), Layout("fp8-block", _FP8), Layout("fp8-block-modelopt", _FP8)),
    families=(Family("fp8", ("fp8", "fbgemm_fp8"), reader=Ref("qcheck.classify.fp8:apply_config"),
                     scanner=Ref("qcheck.classify.fp8:scan"), scan_rank=90),),
    simulated=True,
    activation_if_input_scale=("float8_e4m3", "static per-tensor"),
    # DeepSeek block FP8 quantises activations dynamically per token-group of 128
    activation_by_producer={"deepseek": ("float8_e4m3", "dynamic per-token-group 128")},
    granularity_of_weights=True,
    variants=(
        Variant("W8A8 per-tensor", {"weight_bits": 8, "weight_dtype": "float8_e4m3", "activation_dtype": "float8_e4m3",
                                    "scale_granularity": "per-tensor", "producer": "compressed-tensors",
                                    "config_method": "compressed-tensors", "format": "float-quantized"}),
        Variant("W8A8 block 128x128 (DeepSeek/Qwen FP8)",
                {"weight_bits": 8, "weight_dtype": "float8_e4m3", "activation_dtype": "float8_e4m3",
                 "scale_granularity": "block", "block_size": [128, 128], "producer": "deepseek", "config_method": "fp8"}),
        Variant("W8A16 weight-only", {"weight_bits": 8, "weight_dtype": "float8_e4m3", "activation_dtype": None,
                                      "scale_granularity": "per-channel", "group_size": -1,
                                      "producer": "compressed-tensors", "config_method": "compressed-tensors",
                                      "format": "float-quantized"}),
    ),
)
