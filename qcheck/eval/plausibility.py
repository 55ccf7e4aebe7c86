"""Refuse a measurement that cannot be quantisation loss.

A candidate loaded wrongly (a tensor mapped to the wrong parameter, a conversion undone twice, a tokeniser that
splits text differently) gives numbers that look like a very lossy quantisation: the Gemma GGUF that qcheck once
mapped without undoing ``1 + w`` scored a mean KLD of 15.9 and top-1 agreement of 0.1% for the F32 export of the
reference itself. Real quantisation, even at 2 bits, keeps the perplexity ratio within a small factor and the
top-1 agreement far above chance. So the eval refuses (exit 2) instead of reporting:

- a perplexity ratio above ``PPL_RATIO_LIMIT`` or a mean KLD above ``KLD_LIMIT`` nats;
- a top-1 agreement below half the reference's own mean top-1 probability (an unrelated model agrees with the
  reference's argmax about as often as the reference's confidence allows, or less);
- an unquantised candidate (F32/F16/BF16 weights) whose mean KLD exceeds ``ROUND_TRIP_KLD_LIMIT``: a float round
  trip costs ~1e-5 nats.

For simulated candidates the weights themselves are evidence: when every tensor is about equally far from the
reference's own (the format's error, however large), the numbers are reported with a warning instead; otherwise
the refusal names the tensors furthest from the reference's weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from qcheck.errors import InputError

PPL_RATIO_LIMIT = 10.0
KLD_LIMIT = 5.0
ROUND_TRIP_KLD_LIMIT = 1e-2
#: GGUF file types whose weights are not quantised
FLOAT_GGUF_TYPES = frozenset({"F32", "ALL_F32", "F16", "BF16"})


def reference_top1_probability(ref: Any) -> np.ndarray:
    """Per scored position, the reference's probability of its own argmax token (from full or top-k rows)."""
    if getattr(ref, "full", None) is not None:
        argmax = getattr(ref, "argmax", None)
        if argmax is not None and len(argmax) == ref.full.shape[0] and (np.asarray(argmax) >= 0).all():
            top = np.take_along_axis(ref.full, np.asarray(argmax, dtype=np.int64)[:, None], axis=1)[:, 0]
            return np.exp(top.astype(np.float64))
        return np.exp(ref.full.max(axis=1).astype(np.float64))
    if getattr(ref, "topk_logprobs", None) is not None and ref.topk_logprobs.size:
        return np.exp(ref.topk_logprobs.max(axis=1).astype(np.float64))
    return np.zeros(0)


def is_unquantised(quantization: dict[str, Any] | None) -> bool:
    """Whether an inspected candidate holds float weights only (method none, or a float GGUF file type)."""
    if not quantization:
        return False
    if quantization.get("method") == "none":
        return True
    return quantization.get("method") == "gguf" and quantization.get("gguf_file_type") in FLOAT_GGUF_TYPES


def implausibility(metrics: dict[str, Any], reference_confidence: float | None, unquantised: bool) -> list[str]:
    """Why these metrics cannot be quantisation loss (empty: plausible)."""
    reasons: list[str] = []
    ppl_ratio = metrics.get("ppl_ratio")
    kld = metrics.get("kld_mean")
    top1 = metrics.get("top1_agreement")
    exact = metrics.get("kld_kind") == "exact"
    if ppl_ratio is not None and ppl_ratio > PPL_RATIO_LIMIT:
        reasons.append(f"PPL ratio {ppl_ratio:.3g} > {PPL_RATIO_LIMIT:g}")
    elif ppl_ratio is None and metrics.get("ln_ppl_ratio") is not None:
        reasons.append("PPL ratio overflows")
    if kld is not None and kld > KLD_LIMIT:
        reasons.append(f"mean KLD {kld:.3g} nats > {KLD_LIMIT:g}")
    if top1 is not None and reference_confidence is not None and top1 < 0.5 * reference_confidence:
        reasons.append(f"top-1 agreement {top1:.1%} where the reference's own top-1 probability averages "
                       f"{reference_confidence:.1%}")
    if unquantised and exact and kld is not None and kld > ROUND_TRIP_KLD_LIMIT:
        reasons.append(f"mean KLD {kld:.3g} for unquantised weights (a float round trip costs ~1e-5)")
    return reasons


def tensor_errors(reference_path: str, model: Any) -> list[tuple[str, float]]:
    """Every candidate parameter's relative RMS error ||c - r|| / ||r|| against the reference checkpoint's own
    tensor of the same name, largest first; tensors the reference stores under other names are not compared."""
    import torch
    from safetensors import safe_open

    root = Path(reference_path)
    files = sorted(root.glob("*.safetensors")) if root.is_dir() else [root]
    params = dict(model.state_dict())
    scores: list[tuple[str, float]] = []
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open handles are not mappings
                cand = params.get(name)
                if cand is None:
                    continue
                ref = handle.get_tensor(name).to(torch.float32)
                if tuple(ref.shape) != tuple(cand.shape):
                    scores.append((name, float("inf")))
                    continue
                norm = float(ref.norm())
                diff = float((cand.detach().to(torch.float32).cpu() - ref).norm())
                scores.append((name, diff / norm if norm > 0 else diff))
    scores.sort(key=lambda item: -item[1])
    return scores


def uniform_error(errors: list[tuple[str, float]]) -> float | None:
    """The median relative error when every tensor is about equally far from the reference (worst at most 1 and
    at most 4x the median): the signature of a format applied to every weight, as a very lossy quantisation
    (ternary TQ2_0 on weights not trained for it) is. A loading error leaves one tensor an outlier (a wrong or
    shuffled tensor sits at ~1.4, a doubled norm offset far above) or every tensor at zero. None otherwise."""
    values = sorted(e for _, e in errors)
    if not values:
        return None
    median = values[len(values) // 2]
    worst = values[-1]
    if median <= 0 or worst > 1.0 or worst > 4 * median:
        return None
    return median


def refuse(name: str, reasons: list[str], suspects: list[tuple[str, float]]) -> InputError:
    """The one-line error for an implausible candidate."""
    text = (f"candidate {name}: implausible measurement ({'; '.join(reasons)}): this looks like a loading, "
            "tokenisation or implementation difference, not quantisation loss")
    if suspects:
        text += "; tensors furthest from the reference: " + ", ".join(
            f"{n} (relative RMS error {e:.3g})" for n, e in suspects)
    return InputError(text)
