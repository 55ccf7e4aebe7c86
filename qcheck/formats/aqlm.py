"""AQLM (additive quantisation): ``codes`` + ``codebooks`` + ``scales``; bits/weight from the codebook shape."""

from qcheck.formats.record import Family, Format, Layout, Ref, Variant

FORMAT = Format(
    method="aqlm",
    label="AQLM",
    layouts=(Layout("aqlm"),),
    families=(Family("aqlm", ("aqlm",), reader=Ref("qcheck.classify.others:apply_aqlm"),
                     scanner=Ref("qcheck.classify.others:scan_aqlm"), scan_rank=31),),
    nominal_scheme=False,
    shows_bits_per_weight=True,
    variants=(Variant("AQLM 2-bit", {"weight_bits": 2, "producer": "aqlm", "config_method": "aqlm"}),),
)
