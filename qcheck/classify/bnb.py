"""bitsandbytes: NF4/FP4 (``weight`` U8 flat + ``weight.absmax`` + ``weight.quant_map`` +
``weight.quant_state.bitsandbytes__{nf4,fp4}``) and LLM.int8 (``weight`` I8 + ``SCB``) (docs/research/formats.md §4.8).

The packed 4-bit weight is flat ``[(n+1)//2, 1]``, so the logical count is bytes x 2; the blocksize is
``n / absmax elements``.
"""

from __future__ import annotations

from collections.abc import Mapping

from qcheck.classify.base import Draft, Hints, QLinear, exact_div, sibling
from qcheck.classify.configs import ConfigView, excluded_modules, first
from qcheck.classify.dtypes import container_word, tensor_nbytes
from qcheck.classify.table import candidates
from qcheck.model import TensorInfo

_QS = ".weight.quant_state.bitsandbytes__"


def scan(tensors: Mapping[str, TensorInfo], claimed: set[str], hints: Hints) -> list[QLinear]:
    """4-bit weights with a ``quant_state`` blob and LLM.int8 weights with ``SCB`` row scales."""
    out: list[QLinear] = []
    for name in candidates(tensors, hints.table, dtypes=("I8",), contains=_QS):
        t = tensors[name]
        if name in claimed:
            continue
        if _QS in name:
            prefix, qtype = name.split(_QS, 1)
            w = tensors.get(f"{prefix}.weight")
            if w is None:
                continue
            nbytes = tensor_nbytes(w) or 0
            logical = nbytes * 2
            q = QLinear(name=prefix, method="bitsandbytes", layout=f"bnb-{qtype}", tensors=[w.name, name],
                        logical=logical, bits=4, granularity="group",
                        weight_dtype="nf4" if qtype == "nf4" else "fp4_e2m1", zero_point=False,
                        producer="bitsandbytes")
            absmax = tensors.get(f"{prefix}.weight.absmax")
            if absmax is not None:
                q.group_size = exact_div(logical, absmax.numel)
                q.scale_dtype = container_word(absmax.dtype)
            for extra in ("absmax", "quant_map", "nested_absmax", "nested_quant_map"):
                e = tensors.get(f"{prefix}.weight.{extra}")
                if e is not None:
                    q.tensors.append(e.name)
            if tensors.get(f"{prefix}.weight.nested_absmax") is not None:
                q.scale_dtype = "uint8"  # double quantisation: absmax stored as 8-bit codes
            out.append(q)
        elif name.endswith(".weight") and t.dtype.upper() == "I8":
            prefix = name[: -len(".weight")]
            scb = sibling(tensors, prefix, "SCB")
            if scb is None:
                continue
            q = QLinear(name=prefix, method="bitsandbytes", layout="bnb-llm_int8", tensors=[name, scb.name],
                        logical=t.numel, bits=8, group_size=-1, granularity="per-channel", weight_dtype="int8",
                        scale_dtype=container_word(scb.dtype), zero_point=False, producer="bitsandbytes")
            fmt = sibling(tensors, prefix, "weight_format")
            if fmt is not None:
                q.tensors.append(fmt.name)
            out.append(q)
    return out


def apply_config(view: ConfigView, draft: Draft, family: str, tensor_method: str | None) -> None:
    """BitsAndBytesConfig: 4-bit type (checked against the quant_state names) or LLM.int8."""
    q = view.quant or {}
    draft.expected_method = "bitsandbytes"
    draft.producer = "bitsandbytes"
    draft.config_method = view.quant_method
    draft.excluded = excluded_modules(q)
    if q.get("load_in_4bit"):
        qtype = str(first(q, "bnb_4bit_quant_type") or "fp4").lower()
        draft.expected_bits = 4
        draft.format = qtype + (" double-quant" if q.get("bnb_4bit_use_double_quant") else "")
        draft.weight_dtype = "nf4" if qtype == "nf4" else "fp4_e2m1"
        stored = {x.layout.removeprefix("bnb-") for x in draft.qlinears if x.layout in ("bnb-nf4", "bnb-fp4")}
        if stored and qtype not in stored:
            draft.mismatch(view.quant_where or "config", f"bnb_4bit_quant_type {qtype}, but the tensors' quant_state "
                                                         f"is {'/'.join(sorted(stored))}")
            draft.weight_dtype = None
    elif q.get("load_in_8bit"):
        draft.expected_bits = 8
        draft.format = "llm_int8"
        draft.weight_dtype = "int8"
        draft.activation_dtype = "int8"  # LLM.int8 quantises activations row-wise (outliers stay 16-bit)
        draft.activation_scheme = "dynamic per-token"
        draft.scale_granularity = "per-channel"
