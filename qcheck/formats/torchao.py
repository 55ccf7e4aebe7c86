"""torchao tensor subclasses flattened into safetensors (``__metadata__`` ``tensor_names`` + per-tensor JSON)."""

from qcheck.formats.record import Family, Format, Layout, Ref, Variant

FORMAT = Format(
    method="torchao",
    label="torchao",
    layouts=(Layout("torchao-*"),),  # one per tensor subclass: torchao-Float8Tensor, torchao-Int4Tensor ...
    families=(Family("torchao", ("torchao",), reader=Ref("qcheck.classify.others:apply_torchao"),
                     scanner=Ref("qcheck.classify.others:scan_torchao"), scan_rank=32),),
    variants=(Variant("torchao int4 weight-only", {"weight_bits": 4, "weight_dtype": "int4", "producer": "torchao",
                                                   "config_method": "torchao"}),),
)
