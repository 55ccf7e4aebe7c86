"""GGUF tensors -> the reference's transformers parameters, by transformers' own GGUF conversion.

llama.cpp's ``convert_hf_to_gguf.py`` rewrites tensors per architecture: llama's rotary q/k row permutation,
Gemma's RMSNorm weights stored as ``1 + w``, MoE experts stacked into one tensor, fused or split projections,
renames. transformers' GGUF loader (``modeling_gguf_pytorch_utils``) undoes each of them with a name map (gguf-py's
tensor map applied to the model's own parameter names) and a ``TensorProcessor`` per architecture. qcheck uses
exactly those pieces, and only does the reading itself: each tensor's bytes at the offset its bounded header reader
validated, dequantised by ``gguf.quants`` (gguf-py's ``GGUFReader`` decodes every metadata array element by element,
seconds on a large vocabulary). ``tests/test_gguf_convert_real.py`` proves the result equal to
``load_gguf_checkpoint`` and, on real ``convert_hf_to_gguf.py`` exports, to the reference itself.

An architecture transformers cannot load from GGUF is refused with the reason: a guessed mapping gives numbers
that look like quantisation loss and are not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from qcheck.errors import InputError

#: GGUF tensors that carry no parameter (computed buffers): skipped with a note
NON_PARAMETER_TENSORS = frozenset({"rope_freqs.weight"})
#: architectures transformers' GGUF loader lacks but whose conversion one of its processors undoes exactly,
#: proven on real convert_hf_to_gguf.py exports by tests/test_gguf_convert_real.py (Gemma 1 stores RMSNorm
#: weights as 1 + w, as Gemma 2 does)
EXTRA_PROCESSORS = {"gemma": "Gemma2TensorProcessor"}


def transformers_architecture(arch: str, model_name: Any) -> str:
    """The architecture name transformers' GGUF loader uses for a GGUF ``general.architecture`` (its own renames,
    from ``load_gguf_checkpoint``: llama files named mistral load as mistral, MoE and gpt-oss spellings)."""
    names = model_name if isinstance(model_name, list) else [model_name]
    if "llama" in arch and any(isinstance(n, str) and "mistral" in n for n in names):
        return "mistral"
    renames = {"qwen2moe": "qwen2_moe", "gpt-oss": "gpt_oss", "qwen3moe": "qwen3_moe", "minimax-m2": "minimax_m2"}
    return renames.get(arch, arch)


def _processor_config(meta: dict[str, Any], arch: str, updated: str, reference: dict[str, Any]) -> dict[str, Any]:
    """The config dict transformers would hand its TensorProcessor: GGUF keys renamed through its own mapping,
    over the reference's config for keys the file does not carry."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_TO_TRANSFORMERS_MAPPING

    config = dict(reference)
    renames = GGUF_TO_TRANSFORMERS_MAPPING["config"].get(updated, {})
    for key, value in meta.items():
        if not isinstance(key, str) or not key.startswith(arch + "."):
            continue
        hf_key = renames.get(key[len(arch) + 1:])
        if isinstance(hf_key, str):
            config[hf_key] = value
    return config


def gguf_state_dict(gguf_file: Path, checkpoint: Any, model: Any, read_tensor: Any,
                    weight_types: dict[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Every parameter tensor of a single-file GGUF as float32 torch tensors under ``model``'s parameter names
    (``model`` is the reference architecture, on the meta device), converted as transformers converts them.

    ``read_tensor(fh, info)`` returns one tensor's values as a float32 numpy array in GGUF (row-major) order.
    Raises ``InputError`` for architectures transformers cannot load from GGUF and for tensors that map to no
    parameter of the reference. ``weight_types`` (when given) receives parameter name -> GGUF tensor type.
    """
    import numpy as np
    import torch
    from transformers.modeling_gguf_pytorch_utils import (
        GGUF_SUPPORTED_ARCHITECTURES,
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
    )

    path = str(gguf_file)
    meta = checkpoint.metadata
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise InputError("general.architecture is missing or not a string", path=path)
    updated = transformers_architecture(arch, meta.get("general.name"))
    extra = EXTRA_PROCESSORS.get(arch)
    if arch not in GGUF_SUPPORTED_ARCHITECTURES and updated not in GGUF_SUPPORTED_ARCHITECTURES and extra is None:
        import transformers

        raise InputError(
            f"transformers {transformers.__version__} cannot load GGUF architecture {arch!r}, so qcheck has no exact "
            "mapping of its tensors to the reference and will not guess one; measure this file with llama.cpp's own "
            f"kernels instead: --candidate llamacpp:{path}", path=path)
    text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    processor_class = TENSOR_PROCESSORS.get(arch, TensorProcessor)
    if extra is not None:
        import transformers.modeling_gguf_pytorch_utils as gguf_utils

        processor_class = getattr(gguf_utils, extra)
    if arch == "llama" and any(".ffn_gate_exps." in name for name in checkpoint.tensors):
        processor_class = _llama_moe_processor()
    processor = processor_class(config=_processor_config(meta, arch, updated, text_config.to_dict()))
    try:
        # the GGUF's own architecture names its tensors (a mistral or mixtral reference is a llama GGUF)
        mapping = get_gguf_hf_weights_map(model, processor, model_type=arch)
    except NotImplementedError as exc:
        raise InputError(f"transformers cannot map GGUF architecture {arch!r}: {exc}", path=path) from None
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    parsed: dict[str, Any] = {"tensors": {}, "config": processor.config}
    notes: list[str] = []
    unmapped: list[str] = []
    types: dict[str, int] = {}
    with open(gguf_file, "rb") as fh:
        for info in checkpoint.tensors.values():
            if info.name in NON_PARAMETER_TENSORS:
                notes.append(f"GGUF tensor {info.name} is a computed buffer, not a parameter; skipped")
                continue
            if info.name not in mapping and not _consumed_by_processor(processor, info.name, mapping):
                unmapped.append(info.name)
                continue
            values = read_tensor(fh, info)
            result = processor.process(weights=values, name=info.name, tensor_key_mapping=mapping,
                                       parsed_parameters=parsed)
            types[info.dtype] = types.get(info.dtype, 0) + 1
            if result.name is None:  # the processor stored it itself (stacked MoE experts)
                continue
            if result.name not in mapping:
                unmapped.append(info.name)
                continue
            hf_name = mapping[result.name]
            if weight_types is not None:
                weight_types[hf_name] = info.dtype
            weights = np.ascontiguousarray(result.weights, dtype=np.float32)
            parsed["tensors"][hf_name] = torch.from_numpy(_fit_unit_dims(weights, shapes.get(hf_name)))
    if unmapped:
        raise InputError(f"{len(unmapped)} GGUF tensor(s) have no parameter in the reference architecture, e.g. "
                         f"{', '.join(unmapped[:5])}", path=path)
    state: dict[str, Any] = {k: v.float() for k, v in parsed["tensors"].items()}
    _fill_output_head(state, mapping, model, notes)
    if weight_types is not None:
        _output_head_type(weight_types, mapping, checkpoint.tensors)
    histogram = ", ".join(f"{k} x{v}" for k, v in sorted(types.items()))
    label = "" if processor_class is TensorProcessor else f"; converted by transformers' {processor_class.__name__}"
    notes.insert(0, f"GGUF ({arch}): {sum(types.values())} tensors dequantised with gguf-py [{histogram}]{label}")
    return state, notes


def _llama_moe_processor() -> Any:
    """Mixtral-style GGUFs are ``llama`` files with stacked experts: transformers' llama processor (rotary
    un-permutation) for attention, its Qwen2-MoE processor (split ``ffn_{gate,up}_exps`` into the fused
    ``gate_up_proj``) for the experts. Proven on real exports by tests/test_gguf_convert_real.py."""
    import re

    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor, Qwen2MoeTensorProcessor

    class LlamaMoeTensorProcessor(Qwen2MoeTensorProcessor):
        def __init__(self, config: Any = None) -> None:
            super().__init__(config=config)
            self._attention = LlamaTensorProcessor(config=config)

        def process(self, weights: Any, name: str, **kwargs: Any) -> Any:
            if re.fullmatch(self.GGUF_MOE_WEIGHTS_PATTERN, name):
                return super().process(weights, name, **kwargs)
            return self._attention.process(weights, name, **kwargs)

    return LlamaMoeTensorProcessor


def _fit_unit_dims(weights: Any, expected: tuple[int, ...] | None) -> Any:
    """Drop or add size-1 dimensions so a tensor takes the parameter's shape: GGUF writers and transformers'
    processors disagree on them (a shared-expert gate stored [1, n] and then expanded to [1, 1, n]). The data
    order is untouched; any other difference is left for the shape check to report."""
    if expected is None or tuple(weights.shape) == expected:
        return weights
    if [d for d in weights.shape if d != 1] == [d for d in expected if d != 1]:
        return weights.reshape(expected)
    return weights


def _consumed_by_processor(processor: Any, name: str, mapping: dict[str, str]) -> bool:
    """Whether a tensor absent from the name map is one the processor maps itself: stacked MoE experts are
    mapped under their name without ``.weight`` and stored by the processor."""
    return name.rsplit(".", 1)[0] in mapping


def _output_head_type(weight_types: dict[str, str], mapping: dict[str, str], tensors: dict[str, Any]) -> None:
    """A GGUF without ``output.weight`` multiplies the output by ``token_embd`` (llama.cpp), in its type."""
    if "output.weight" not in tensors and "token_embd.weight" in tensors:
        weight_types[mapping.get("output.weight") or "lm_head.weight"] = tensors["token_embd.weight"].dtype


def _fill_output_head(state: dict[str, Any], mapping: dict[str, str], model: Any, notes: list[str]) -> None:
    """A GGUF without ``output.weight`` ties the output head to the embeddings, as llama.cpp does; an untied
    reference gets the embedding copied into its head."""
    head = mapping.get("output.weight")
    emb = mapping.get("token_embd.weight")
    if head is None or head in state or emb not in state:
        return
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    if not tied:
        state[head] = state[emb].clone()
        notes.append("the GGUF has no output.weight: lm_head taken from token_embd, as llama.cpp does")
