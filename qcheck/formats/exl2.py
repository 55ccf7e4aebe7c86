"""EXL2 (ExLlamaV2): ``q_weight`` + ``q_invperm``/``q_scale`` groups, bits per layer from shapes. Its scanner
(``qcheck.classify.exllama``) finds EXL3 trellises too."""

from qcheck.formats.record import Family, Format, Layout, Ref, Variant

FORMAT = Format(
    method="exl2",
    label="EXL2",
    layouts=(Layout("exl2"),),
    families=(Family("exl2", ("exl2",), reader=Ref("qcheck.classify.exllama:apply_config"),
                     scanner=Ref("qcheck.classify.exllama:scan"), scan_rank=20),),
    bits_vary_per_layer=True,
    nominal_scheme=False,
    shows_bits_per_weight=True,
    variants=(Variant("EXL2 4.0 bpw", {"bits_per_weight": 4.0, "producer": "exllamav2", "config_method": "exl2"}),),
)
