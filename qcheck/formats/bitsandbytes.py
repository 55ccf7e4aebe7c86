"""bitsandbytes: NF4/FP4 weights with a ``quant_state`` blob, LLM.int8 weights with ``SCB`` row scales."""

from qcheck.formats.record import Family, Format, Layout, Ref, Variant

FORMAT = Format(
    method="bitsandbytes",
    label="bitsandbytes",
    layouts=(Layout("bnb-*"),),  # bnb-nf4, bnb-fp4 (the quant_state's type), bnb-llm_int8
    families=(Family("bitsandbytes", ("bitsandbytes",), reader=Ref("qcheck.classify.bnb:apply_config"),
                     scanner=Ref("qcheck.classify.bnb:scan"), scan_rank=10),),
    variants=(
        Variant("NF4", {"weight_bits": 4, "weight_dtype": "nf4", "producer": "bitsandbytes",
                        "config_method": "bitsandbytes", "format": "nf4"}),
    ),
)
