"""HQQ (half-quadratic quantisation): ``W_q`` + ``scale`` + ``zero`` and its per-layer metadata tensors."""

from qcheck.formats.record import Family, Format, Layout, Ref, Variant

FORMAT = Format(
    method="hqq",
    label="HQQ",
    layouts=(Layout("hqq"),),
    families=(Family("hqq", ("hqq",), reader=Ref("qcheck.classify.others:apply_hqq"),
                     scanner=Ref("qcheck.classify.others:scan_hqq"), scan_rank=30,
                     hints=Ref("qcheck.classify.others:view_hints")),),
    variants=(Variant("HQQ 4-bit", {"weight_bits": 4, "producer": "hqq", "config_method": "hqq"}),),
)
