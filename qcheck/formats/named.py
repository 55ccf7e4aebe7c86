"""quant_method strings qcheck knows by name: EETQ and quanto map onto INT8/INT4/FP8; the others
(transformers/vLLM methods with no qcheck format of their own) are reported as ``unknown`` with a warning."""

from qcheck.formats.record import Family, Ref

#: quant_method values transformers/vLLM know that have no canonical qcheck method of their own
NAMED_ONLY = ("vptq", "higgs", "spqr", "bitnet", "fp_quant", "fouroversix", "sinq", "inc", "ipex", "ptpc_fp8",
              "experts_int8", "moe_wna16", "petit_nvfp4", "gptq_marlin_24")

FAMILIES = (Family("named", ("eetq", "quanto", *NAMED_ONLY), reader=Ref("qcheck.classify.others:apply_named")),)
