"""compressed-tensors (llm-compressor): one config dialect (``config_groups``, ``format``, ``ignore``) for many
methods (FP8, NVFP4, MXFP4, MXFP8, INT8, INT4), and the integer layouts it writes (``weight_packed``,
``int-quantized``). A producer family, not a format of its own."""

from qcheck.formats.record import Family, Ref

FAMILIES = (
    Family("compressed-tensors", ("compressed-tensors", "compressed_tensors"),
           reader=Ref("qcheck.classify.compressed_tensors:apply_config"),
           scanner=Ref("qcheck.classify.compressed_tensors:scan"), scan_rank=50),
)
