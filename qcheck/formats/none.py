"""Unquantised checkpoints (BF16/FP16/FP32 weights): every tensor copied as float when simulated."""

from qcheck.formats.record import Format, Variant

FORMAT = Format(
    method="none",
    label="unquantised",
    simulated=True,
    nominal_scheme=False,
    variants=(
        Variant("BF16", {}, {"dtype": "bfloat16"}),
        Variant("FP16", {}, {"dtype": "float16"}),
    ),
)
