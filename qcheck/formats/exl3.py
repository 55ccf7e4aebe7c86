"""EXL3 (ExLlamaV3): ``trellis`` tensors (QTIP), ``quantization_config.json`` or ``quant_method: exl3``."""

from qcheck.formats.record import Family, Format, Layout, Ref, Variant

FORMAT = Format(
    method="exl3",
    label="EXL3",
    layouts=(Layout("exl3"),),
    families=(Family("exl3", ("exl3",), reader=Ref("qcheck.classify.exllama:apply_config")),),
    bits_vary_per_layer=True,
    nominal_scheme=False,
    shows_bits_per_weight=True,
    variants=(Variant("EXL3 4.0 bpw", {"bits_per_weight": 4.0, "producer": "exllamav3", "config_method": "exl3"}),),
)
