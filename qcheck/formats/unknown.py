"""Quantised, but by no method qcheck knows: tensors in packed dtypes no scanner explains, or a config
naming a method without a qcheck format. Simulation still tries (float tensors are copied)."""

from qcheck.formats.record import Format, Variant

FORMAT = Format(
    method="unknown",
    label="unknown quantisation",
    simulated=True,
    variants=(Variant("unrecognised quantization", {"config_method": "something-new"}),),
)
