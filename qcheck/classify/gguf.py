"""GGUF files: llama.cpp tensor types, ``general.file_type`` (declared or guessed the llama.cpp way),
whole-file bits/weight and the model numbers from ``{arch}.*`` keys (docs/research/formats.md §5)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from qcheck.classify.arch import fill_from_tensors
from qcheck.classify.base import bits_per_weight
from qcheck.classify.configs import as_int
from qcheck.classify.dtypes import GGUF_FLOAT_TYPES, container_word
from qcheck.model import Checkpoint, Inspection, Quantization
from qcheck.readers.gguf_meta import model_keys

#: file types made of one quant type (plus F32 norms and a few llama.cpp-chosen exceptions):
#: file type -> (nominal weight bits, elements per scale, scale dtype, weight dtype)
PURE_FILE_TYPES: dict[str, tuple[int, int | None, str | None, str | None]] = {
    "Q4_0": (4, 32, "float16", "int4"), "Q4_1": (4, 32, "float16", "int4"),
    "Q5_0": (5, 32, "float16", "int5"), "Q5_1": (5, 32, "float16", "int5"),
    "Q8_0": (8, 32, "float16", "int8"), "IQ4_NL": (4, 32, "float16", None),
    "MXFP4_MOE": (4, 32, "e8m0", "fp4_e2m1"), "NVFP4": (4, 16, "float8_e4m3", "fp4_e2m1"),
    "Q1_0": (1, 128, "float16", None), "Q2_0": (2, 64, "float16", None),
}


def _tables() -> Any:
    from qcheck.readers import gguf_tables

    return gguf_tables


def classify_gguf(ckpt: Checkpoint) -> Inspection:
    """A GGUF file's Inspection: method ``gguf``, its file type and type histogram, model numbers."""
    tables = _tables()
    md = ckpt.metadata
    insp = Inspection(path=ckpt.path, container="gguf", files=list(ckpt.files), revision=ckpt.revision)
    insp.warnings = list(ckpt.warnings)
    keys = model_keys(md)
    insp.warnings.extend(keys.warnings)
    insp.architecture = insp.model_type = keys.architecture
    insp.name = keys.name
    if keys.architecture:
        insp.context_length = keys.context_length
        insp.num_layers = keys.block_count
        insp.hidden_size = keys.embedding_length
        insp.num_attention_heads = keys.head_count
        insp.num_kv_heads = keys.head_count_kv
        insp.head_dim = keys.key_length
        if keys.expert_count and keys.expert_count > 1:
            insp.moe = True
            insp.num_experts = keys.expert_count
            insp.num_experts_used = keys.expert_used_count
    else:
        insp.warnings.append("GGUF file has no general.architecture key")
    hidden, heads = insp.hidden_size, insp.num_attention_heads
    if insp.head_dim is None and hidden is not None and heads is not None and hidden > 0 and heads > 0:
        insp.head_dim = hidden // heads
    insp.vocab_size = keys.vocab_size
    fill_from_tensors(insp, ckpt.tensors)
    split = as_int(md.get("split.count"))  # an integer: the reader type-checks split.*
    insp.gguf_split_count = split if split and split > 0 else 1

    tensors = ckpt.tensors
    insp.tensor_count = len(tensors)
    insp.parameters = sum(t.numel for t in tensors.values()) if tensors else None
    if not tensors:
        insp.warnings.append("the file has no tensors (a vocabulary-only GGUF): nothing to run")
    insp.size_bytes = ckpt.size_bytes or None
    counts = tables.llama_type_counts((n, t.dtype) for n, t in tensors.items())
    ft_raw = md.get("general.file_type")
    ft_id = as_int(ft_raw)
    file_type, guessed = tables.file_type_name(ft_id, counts)
    if guessed:
        insp.warnings.append(f"general.file_type is absent; guessed {file_type} from the tensor types as llama.cpp does")
    q = Quantization(method="gguf", producer="llama.cpp", gguf_file_type=file_type)
    q.tensor_types = dict(Counter(t.dtype for t in tensors.values()).most_common())
    q.config_method = f"general.file_type={ft_id}" if ft_id is not None else None
    known = [t for t in tensors.values() if t.nbytes is not None]
    q.bits_per_weight = bits_per_weight(sum(t.nbytes or 0 for t in known), sum(t.numel for t in known))
    unknown_types = sorted({t.dtype for t in tensors.values() if t.nbytes is None})
    if unknown_types:
        insp.warnings.append("tensor types unknown to qcheck's gguf tables: " + ", ".join(unknown_types)
                             + " (bits/weight counts only known types)")
    removed = sorted({t.dtype for t in tensors.values() if t.dtype in tables.REMOVED_TENSOR_TYPES.values()})
    if removed:
        insp.warnings.append("tensor types removed from ggml: " + ", ".join(removed) + "; requantise the model")
    pure = PURE_FILE_TYPES.get(file_type or "")
    if pure:
        q.weight_bits, q.group_size, q.scale_dtype, q.weight_dtype = pure
        q.scale_granularity = "group"
    elif file_type in ("F16", "BF16", "F32"):
        q.weight_dtype = container_word(file_type)
    # dtype of the unquantised parts: the float type holding the most elements
    floats: Counter[str] = Counter()
    for t in tensors.values():
        if t.dtype in GGUF_FLOAT_TYPES:
            floats[t.dtype] += t.numel
    if floats:
        insp.dtype = container_word(floats.most_common(1)[0][0])
    insp.quantization = q
    if ft_id is not None and file_type and file_type.startswith("unknown("):
        insp.warnings.append(f"general.file_type {ft_id} is not a llama.cpp file type qcheck knows")
    return insp
