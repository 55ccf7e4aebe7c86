"""Intel AutoRound: writes GPTQ or AWQ packs (``packing_format``); read by the GPTQ/AWQ config reader."""

from qcheck.formats.record import Family, Ref

FAMILIES = (Family("auto-round", ("auto-round", "intel/auto-round", "auto_round"),
                   reader=Ref("qcheck.classify.gptq_awq:apply_config")),)
