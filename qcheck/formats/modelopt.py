"""NVIDIA ModelOpt: ``hf_quant_config.json`` / ``quant_method: modelopt*`` naming FP8, NVFP4, MXFP8, INT8 and
INT4-AWQ schemes, and its INT4-AWQ U8 layout. A producer family, not a format of its own."""

from qcheck.formats.record import Family, Ref

FAMILIES = (
    Family("modelopt", ("modelopt", "modelopt_fp4", "modelopt_mixed", "modelopt_mxfp8"),
           reader=Ref("qcheck.classify.modelopt:apply_config"), scanner=Ref("qcheck.classify.modelopt:scan"),
           scan_rank=70),
)
