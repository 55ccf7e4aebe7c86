"""How generations behave, reference against candidate: length, termination, repetition and JSON validity.

Why: KL divergence and accuracy are measured on short windows and single answers; what breaks in deployment is
often the *shape* of what a quantised model writes. Published reports show outputs that stay coherent and then
degrade into loops after a few hundred tokens, answers that never stop (no end-of-sequence token within the
budget), and structured output that no longer parses. Each ``generate`` item is decoded greedily on both sides
(``qcheck.eval.runners.base``), and every item gives, per side:

- **length**: generated tokens, the end-of-sequence token not counted;
- **terminated**: the output ends with an end-of-sequence token within ``max_new_tokens`` (unknown when the
  tokenizer has none);
- **repetition**: the share of repeated token 4-grams among the 4-grams of the output's last ``REPETITION_TAIL``
  tokens, ``1 - unique / total`` (seq-rep-4 of Welleck et al. 2019, "Neural Text Generation with Unlikelihood
  Training", arXiv 1908.04319, restricted to the tail where degeneration shows); 0 for outputs of fewer than
  five tokens, a loop of period p over n tokens gives ``1 - p / (n - 3)``;
- **JSON valid**: ``match: "json"`` items only, the output parses and satisfies the item's schema
  (``qcheck.eval.jsonmatch``).

The candidate's metrics are paired with the reference's on the same items (docs/eval.md "Generation behaviour"):
``length_ratio`` = Σ candidate lengths / Σ reference lengths (paired item bootstrap interval),
``termination_drop`` and ``json_validity_drop`` = reference share − candidate share (paired normal interval, as
the accuracy delta), ``repetition_increase`` = mean per-item (candidate − reference) repetition (bootstrap over
documents).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from qcheck.eval import stats

#: token n-grams counted by the repetition metric
REPETITION_N = 4
#: the last this many generated tokens are where repetition is measured
REPETITION_TAIL = 256
#: a rise of the repeated share this large makes an item a regression in the report's list
REPETITION_JUMP = 0.2
#: regressions listed per candidate
MAX_LISTED = 200


@dataclass(frozen=True)
class Behaviour:
    """One side's generation of one item."""

    #: generated tokens, the end-of-sequence token not counted
    tokens: int
    #: ended with an end-of-sequence token within the budget (None: the tokenizer has no such token)
    terminated: bool | None
    #: repeated 4-gram share of the output's tail
    repetition: float
    #: ``json`` items: the output parses and satisfies the schema (None for other match kinds)
    json_valid: bool | None = None
    #: ``json`` items: why the output is not valid JSON
    json_problem: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tokens": self.tokens, "terminated": self.terminated,
                               "repetition": round(self.repetition, 6)}
        if self.json_valid is not None:
            out["json_valid"] = self.json_valid
            if self.json_problem:
                out["json_problem"] = self.json_problem
        return out


def repetition(ids: Sequence[int], n: int = REPETITION_N, tail: int = REPETITION_TAIL) -> float:
    """``1 - unique / total`` over the token n-grams of the last ``tail`` tokens; 0 when there are none."""
    window = list(ids)[-tail:]
    total = len(window) - n + 1
    if total <= 0:
        return 0.0
    unique = len({tuple(window[i:i + n]) for i in range(total)})
    return 1.0 - unique / total


def behaviour(token_ids: Sequence[int], stop_ids: Sequence[int], text: str, json_check: Any = None) -> Behaviour:
    """One side's behaviour: ``token_ids`` as generated (a final end-of-sequence token included when there was
    one), ``json_check(text)`` for ``json`` items (``TaskItem.json_check``)."""
    ids = list(token_ids)
    stops = set(stop_ids)
    terminated = bool(ids) and ids[-1] in stops if stops else None
    content = [t for t in ids if t not in stops]
    valid, problem = None, None
    if json_check is not None:
        outcome = json_check(text)
        valid, problem = outcome.valid, outcome.problem if not outcome.valid else None
    return Behaviour(tokens=len(content), terminated=terminated, repetition=repetition(content),
                     json_valid=valid, json_problem=problem)


def summarise(pairs: Sequence[tuple[Behaviour, Behaviour]], docs: Sequence[str], *, n_boot: int,
              seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(metrics, intervals) of the generation behaviour over paired (reference, candidate) items; every key is
    present, None when it cannot be measured (no generate items, no end-of-sequence token, no json items)."""
    metrics: dict[str, Any] = {key: None for key in METRIC_KEYS}
    intervals: dict[str, Any] = {}
    if not pairs:
        return metrics, intervals
    ref_len = np.array([r.tokens for r, _ in pairs], dtype=np.float64)
    cand_len = np.array([c.tokens for _, c in pairs], dtype=np.float64)
    metrics["generated_tokens_reference"] = float(ref_len.mean())
    metrics["generated_tokens"] = float(cand_len.mean())
    if ref_len.sum() > 0:
        metrics["length_ratio"] = float(cand_len.sum() / ref_len.sum())
        intervals["length_ratio"] = stats.paired_bootstrap_ratio(cand_len, ref_len, n_boot=n_boot,
                                                                 seed=seed).to_json()
    _shares(metrics, intervals, "termination", [(r.terminated, c.terminated) for r, c in pairs])
    _shares(metrics, intervals, "json_valid", [(r.json_valid, c.json_valid) for r, c in pairs])
    ref_rep = np.array([r.repetition for r, _ in pairs])
    cand_rep = np.array([c.repetition for _, c in pairs])
    metrics["repetition_reference"] = float(ref_rep.mean())
    metrics["repetition"] = float(cand_rep.mean())
    metrics["repetition_increase"] = float((cand_rep - ref_rep).mean())
    intervals["repetition_increase"] = stats.cluster_bootstrap_mean(cand_rep - ref_rep, np.asarray(docs),
                                                                    n_boot=n_boot, seed=seed).to_json()
    return metrics, intervals


#: the metrics ``summarise`` returns (``termination``/``json_valid`` shares: reference, candidate, drop, items)
METRIC_KEYS = ("generated_tokens_reference", "generated_tokens", "length_ratio", "termination_reference",
               "termination", "termination_drop", "repetition_reference", "repetition", "repetition_increase",
               "json_items", "json_valid_reference", "json_valid", "json_validity_drop")


def _shares(metrics: dict[str, Any], intervals: dict[str, Any], name: str,
            pairs: list[tuple[bool | None, bool | None]]) -> None:
    """Reference and candidate shares of a yes/no property over the items where both sides know it, and the
    paired drop (reference − candidate) with the paired normal interval of the accuracy delta."""
    known = [(bool(r), bool(c)) for r, c in pairs if r is not None and c is not None]
    if name == "json_valid":
        metrics["json_items"] = len(known) or None
    if not known:
        return
    ref = np.array([r for r, _ in known])
    cand = np.array([c for _, c in known])
    lost = int((ref & ~cand).sum())  # the reference has it, the candidate lost it
    gained = int((~ref & cand).sum())
    delta, ci = stats.paired_accuracy_delta(lost, gained, len(known))
    drop = "termination_drop" if name == "termination" else "json_validity_drop"
    metrics[f"{name}_reference"] = float(ref.mean())
    metrics[name] = float(cand.mean())
    metrics[drop] = 0.0 - delta  # (0.0 - x: a zero drop is 0.0, not -0.0)
    intervals[name] = stats.wilson(int(cand.sum()), len(known)).to_json()
    intervals[drop] = stats.Interval(0.0 - ci.high, 0.0 - ci.low, ci.method, ci.level).to_json()


def regressions(outcomes: Sequence[Any]) -> list[dict[str, Any]]:
    """Generate items whose candidate output lost what the reference's had: the end-of-sequence token, valid
    JSON, or ``REPETITION_JUMP`` of repetition; both outputs and behaviours, at most ``MAX_LISTED``."""
    out = []
    for o in outcomes:
        if o.generation is None:
            continue
        ref, cand = o.generation
        lost = [name for name, bad in (
            ("end-of-sequence", ref.terminated is True and cand.terminated is False),
            ("valid JSON", ref.json_valid is True and cand.json_valid is False),
            ("repetition", cand.repetition - ref.repetition >= REPETITION_JUMP)) if bad]
        if lost:
            out.append({"id": o.id, "task": o.task, "lost": lost, "reference": ref.to_json(),
                        "candidate": cand.to_json(), "reference_output": o.ref_output,
                        "candidate_output": o.cand_output})
    return out[:MAX_LISTED]
