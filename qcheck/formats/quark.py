"""AMD Quark: ``global_quant_config`` weight/input specs naming FP8, INT8, INT4, MXFP4, NVFP4 or MXFP6 weights.
A producer family (config reader only; its tensors are found by the FP8, MX and integer scanners)."""

from qcheck.formats.record import Family, Ref

FAMILIES = (Family("quark", ("quark",), reader=Ref("qcheck.classify.others:apply_quark")),)
