"""Quality-loss metrics of one candidate against the reference (docs/research/evals.md §1.4, §3.2, §5.7, §7).

Per scored token t (teacher-forced on the same token ids, y_t the actual next token):

- KL_t = Σ_v p_t(v) (log p_t(v) − log q_t(v)), KL(P_reference ‖ Q_candidate) in nats. With full rows on both
  sides it is exact; when either side is top-k only it is the *bucketed* KL over the partition
  {i ∈ S} ∪ {rest}, an exact lower bound of the true KL (log-sum inequality; §5.7).
- top-1 agreement: argmax p_t == argmax q_t (llama.cpp "Same top p").
- Δp_t = q_t(y_t) − p_t(y_t); mean and RMS (llama.cpp "Mean Δp", "RMS Δp").
- NLL_t = −log q_t(y_t); PPL = exp(mean NLL); ln PPL ratio = mean NLL_q − mean NLL_p; NLL correlation =
  Pearson correlation of per-token NLLs (what llama.cpp's "Cor(ln(PPL(Q)), ln(PPL(base)))" computes).

Per item: ``choice`` items are scored as lm-evaluation-harness does (ll = Σ log p of the continuation
tokens; acc = argmax ll, acc_norm = argmax ll / len(choice) in characters, acc_bytes by UTF-8 bytes);
``generate`` items by their match rule; flips are paired changes of correctness (C→I, I→C; Dutta et al. 2024).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qcheck.errors import InputError
from qcheck.eval import stats
from qcheck.eval.cache import RefRows
from qcheck.eval.generation import METRIC_KEYS as GENERATION_KEYS
from qcheck.eval.generation import Behaviour, behaviour, summarise
from qcheck.eval.runners.base import Generation, TokenScores
from qcheck.eval.tasks import TaskItem

#: position buckets of the per-position report: [from, to) tokens of context before the predicted token
#: (None: to the end of the model's context)
POSITION_BUCKETS: tuple[tuple[int, int | None], ...] = ((0, 512), (512, 2048), (2048, 8192), (8192, None))
#: log-probs below this are treated as this (float32 exp underflows near −103.9)
LOG_FLOOR = -103.0
#: smallest candidate rest-bucket mass in the bucketed KL (docs/research/evals.md §5.7: q_R = max(ε, ...))
REST_EPS = 1e-10
CHOICE_METRICS = ("acc", "acc_norm", "acc_bytes")


@dataclass
class RowComparison:
    """Per-row results of comparing one request's rows."""

    kld: np.ndarray  # (n,) float64
    top1: np.ndarray  # (n,) bool
    ref_logp: np.ndarray  # (n,) log p(y)
    cand_logp: np.ndarray  # (n,) log q(y)
    exact: bool  # False when KL is the bucketed lower bound
    rest_mass: np.ndarray | None = None  # (n,) reference mass outside the bucket set, when bucketed
    #: rows whose candidate top-1 is known (None: all); endpoints naming tokens by ambiguous strings leave gaps
    top1_known: np.ndarray | None = None


def bucketed_kl(ref_lp: np.ndarray, cand_lp: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bucketed KL over the set S given per row (columns where ``valid``) plus one rest bucket.

    ``ref_lp``/``cand_lp`` (n, m) are log-probs of the tokens of S on each side. Returns (KL_S, p_R).
    0 ≤ KL_S ≤ KL(P‖Q) when both sides' values are exact (docs/research/evals.md §5.7); probabilities summing
    above 1 through float rounding are clamped.
    """
    ref_lp = np.maximum(np.asarray(ref_lp, dtype=np.float64), LOG_FLOOR)
    cand_lp = np.maximum(np.asarray(cand_lp, dtype=np.float64), LOG_FLOOR)
    p = np.where(valid, np.exp(ref_lp), 0.0)
    q = np.where(valid, np.exp(cand_lp), 0.0)
    p_rest = np.clip(1.0 - p.sum(axis=1), 0.0, 1.0)
    q_rest = np.clip(1.0 - q.sum(axis=1), REST_EPS, 1.0)
    terms = np.where(valid, p * (ref_lp - cand_lp), 0.0).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rest = np.where(p_rest > 0, p_rest * (np.log(np.where(p_rest > 0, p_rest, 1.0)) - np.log(q_rest)), 0.0)
    return terms + rest, p_rest


def full_kl(ref_lp: np.ndarray, cand_lp: np.ndarray, ref_p: np.ndarray | None = None) -> np.ndarray:
    """Exact KL(P‖Q) per row from full log-prob rows, in float32 (three passes over ``n x V``: the harness
    overhead budget). numpy's pairwise summation keeps small KL values (1e-5) accurate despite the
    cancellation of positive and negative terms (tested against a float64 computation).
    """
    p = np.exp(ref_lp) if ref_p is None else ref_p
    diff = ref_lp - cand_lp
    diff *= p
    kld = diff.sum(axis=1).astype(np.float64)  # numpy sums contiguous rows pairwise: error ~log2(V)·eps·Σ|terms|
    bad = ~np.isfinite(kld)
    if bad.any():  # -inf candidate log-probs: clamp them (a huge but finite KL, as JSON needs)
        lq = np.maximum(cand_lp[bad].astype(np.float64), LOG_FLOOR)
        kld[bad] = (np.exp(ref_lp[bad].astype(np.float64)) * (ref_lp[bad] - lq)).sum(axis=1)
    return kld


def _with_target(ids: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Append the actual token as one more column of S; it is invalid where already in S."""
    ids = np.asarray(ids, dtype=np.int64)
    extra = targets.astype(np.int64)[:, None]
    dup = (ids == extra).any(axis=1, keepdims=True)
    all_ids = np.concatenate([ids, extra], axis=1)
    valid = np.concatenate([ids >= 0, ~dup], axis=1)  # negative ids pad a narrower row (an endpoint reference)
    return all_ids, valid


def compare_rows(ref: RefRows, cand: TokenScores, targets: tuple[int, ...] | np.ndarray, where: str) -> RowComparison:
    """Compare one request's reference rows with the candidate's, whatever each side holds (full or top-k)."""
    n = ref.n_rows
    if cand.n_rows != n:
        raise InputError(f"candidate returned {cand.n_rows} rows, the reference has {n}", where=where)
    y = np.asarray(targets, dtype=np.int64)
    ref_logp = ref.target_logprobs.astype(np.float64)
    cand_logp = np.maximum(cand.target_logprobs.astype(np.float64), LOG_FLOOR)
    top1 = np.asarray(ref.argmax) == np.asarray(cand.greedy_ids)
    greedy_known = (np.asarray(cand.greedy_ids) >= 0) & (np.asarray(ref.argmax) >= 0)
    known = None if greedy_known.all() else greedy_known

    if ref.full is not None and cand.full is not None:
        if ref.full.shape != cand.full.shape:
            raise InputError(f"candidate rows have {cand.full.shape[1]} entries, the reference "
                             f"{ref.full.shape[1]}: the vocabularies differ", where=where)
        kld = full_kl(ref.full, cand.full, ref.probs)
        return RowComparison(kld, top1, ref_logp, cand_logp, top1_known=known, exact=True)

    if ref.full is not None:  # candidate top-k: S = candidate's returned set + the actual token
        assert cand.topk_ids is not None and cand.topk_logprobs is not None  # rows without full logits have top-k
        ids, valid = _with_target(cand.topk_ids, y)
        if ids.max(initial=0) >= ref.full.shape[1] or ids.min(initial=0) < 0:
            raise InputError("candidate returned a token id outside the reference vocabulary", where=where)
        lq = np.concatenate([cand.topk_logprobs.astype(np.float64), cand_logp[:, None]], axis=1)
        lp = np.take_along_axis(ref.full, ids, axis=1).astype(np.float64)
        kld, rest = bucketed_kl(lp, lq, valid)
        return RowComparison(kld, top1, ref_logp, cand_logp, top1_known=known, exact=False, rest_mass=rest)

    assert ref.topk_ids is not None and ref.topk_logprobs is not None  # rows without full logits have top-k
    if cand.full is not None:  # reference top-k: S = reference's top-K + the actual token
        ids, valid = _with_target(ref.topk_ids, y)
        lp = np.concatenate([ref.topk_logprobs.astype(np.float64), ref_logp[:, None]], axis=1)
        lq = np.take_along_axis(cand.full, np.maximum(ids, 0), axis=1).astype(np.float64)
        kld, rest = bucketed_kl(lp, lq, valid)
        return RowComparison(kld, top1, ref_logp, cand_logp, top1_known=known, exact=False, rest_mass=rest)

    # both top-k: S = intersection of the two returned sets + the actual token
    assert cand.topk_ids is not None and cand.topk_logprobs is not None
    m = ref.topk_ids.shape[1] + 1
    lp = np.zeros((n, m))
    lq = np.zeros((n, m))
    valid = np.zeros((n, m), dtype=bool)
    for r in range(n):
        cand_map = {int(i): float(v) for i, v in zip(cand.topk_ids[r], cand.topk_logprobs[r], strict=True)}
        cand_map[int(y[r])] = float(cand_logp[r])
        col = 0
        seen = set()
        for i, v in zip(ref.topk_ids[r], ref.topk_logprobs[r], strict=True):
            i = int(i)
            if i >= 0 and i in cand_map and i not in seen:
                lp[r, col], lq[r, col], valid[r, col] = float(v), cand_map[i], True
                seen.add(i)
                col += 1
        if int(y[r]) not in seen:
            lp[r, col], lq[r, col], valid[r, col] = float(ref_logp[r]), float(cand_logp[r]), True
    kld, rest = bucketed_kl(lp, lq, valid)
    return RowComparison(kld, top1, ref_logp, cand_logp, top1_known=known, exact=False, rest_mass=rest)


def choice_predictions(lls: np.ndarray, choices: tuple[str, ...]) -> dict[str, int]:
    """lm-eval's multiple-choice predictions: argmax of ll, ll/chars, ll/UTF-8 bytes (first index on ties)."""
    chars = np.array([float(len(c)) for c in choices])
    nbytes = np.array([float(len(c.encode("utf-8"))) for c in choices])
    return {"acc": int(np.argmax(lls)), "acc_norm": int(np.argmax(lls / chars)),
            "acc_bytes": int(np.argmax(lls / nbytes))}


@dataclass
class ItemOutcome:
    """One choice/generate item, both sides."""

    id: str
    task: str
    kind: str
    ref_correct: bool
    cand_correct: bool
    same_answer: bool
    greedy_same: bool | None = None
    first_divergence: int | None = None
    ref_output: str | None = None
    cand_output: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: generate items: how each side's generation behaved (reference, candidate)
    generation: tuple[Behaviour, Behaviour] | None = None


class CandidateMetrics:
    """Accumulates rows and items for one candidate; ``summary()`` gives metrics + intervals."""

    def __init__(self, choice_metric: str = "acc", n_boot: int = stats.DEFAULT_BOOTSTRAP,
                 seed: int = stats.DEFAULT_SEED):
        if choice_metric not in CHOICE_METRICS:
            raise ValueError(choice_metric)
        self.choice_metric = choice_metric
        self.n_boot = n_boot
        self.seed = seed
        self._kld: list[np.ndarray] = []
        self._top1: list[np.ndarray] = []
        self._ref: list[np.ndarray] = []
        self._cand: list[np.ndarray] = []
        self._rest: list[np.ndarray] = []
        self._docs: list[np.ndarray] = []
        self._pos: list[np.ndarray] = []
        self._top1_pos: list[np.ndarray] = []
        self._doc_ids: dict[str, int] = {}
        self.exact = True
        self.items: list[ItemOutcome] = []
        #: the bootstrap cluster (document) of each generate item, in order
        self.generation_docs: list[str] = []
        self.choice_variants: dict[str, list[tuple[bool, bool]]] = {m: [] for m in CHOICE_METRICS}

    def add_rows(self, doc: str, rows: RowComparison, positions: np.ndarray | None = None) -> None:
        """One request's rows; ``positions`` (tokens of context before each predicted token) feed the
        per-position report (-1: unknown)."""
        doc_index = self._doc_ids.setdefault(doc, len(self._doc_ids))
        pos = np.full(rows.kld.shape[0], -1, dtype=np.int64) if positions is None else \
            np.asarray(positions, dtype=np.int64)
        self._kld.append(rows.kld)
        self._pos.append(pos)
        self._top1.append(rows.top1 if rows.top1_known is None else rows.top1[rows.top1_known])
        self._top1_pos.append(pos if rows.top1_known is None else pos[rows.top1_known])
        self._ref.append(rows.ref_logp)
        self._cand.append(rows.cand_logp)
        self._docs.append(np.full(rows.kld.shape[0], doc_index, dtype=np.int64))
        if not rows.exact:
            self.exact = False
            if rows.rest_mass is not None:
                self._rest.append(rows.rest_mass)

    def add_choice(self, item: TaskItem, ref_lls: np.ndarray, cand_lls: np.ndarray) -> ItemOutcome:
        ref_pred = choice_predictions(ref_lls, item.choices)
        cand_pred = choice_predictions(cand_lls, item.choices)
        for m in CHOICE_METRICS:
            self.choice_variants[m].append((ref_pred[m] == item.answer, cand_pred[m] == item.answer))
        m = self.choice_metric
        outcome = ItemOutcome(item.id, item.task, "choice", ref_pred[m] == item.answer, cand_pred[m] == item.answer,
                              ref_pred[m] == cand_pred[m], ref_output=item.choices[ref_pred[m]],
                              cand_output=item.choices[cand_pred[m]])
        self.items.append(outcome)
        return outcome

    def add_generation(self, item: TaskItem, ref: Generation, cand: Generation, ref_text: str,
                       cand_text: str, stop_ids: Sequence[int] = ()) -> ItemOutcome:
        """One generate item, both sides; ``stop_ids`` are the end-of-sequence ids generation stopped at."""
        ref_ids, cand_ids = list(ref.token_ids), list(cand.token_ids)
        first = next((i for i, (a, b) in enumerate(zip(ref_ids, cand_ids, strict=False)) if a != b), None)
        if first is None and len(ref_ids) != len(cand_ids):
            first = min(len(ref_ids), len(cand_ids))
        check = item.json_check if item.match == "json" else None
        outcome = ItemOutcome(item.id, item.task, "generate", item.is_correct(ref_text), item.is_correct(cand_text),
                              ref_text.strip() == cand_text.strip(), greedy_same=ref_ids == cand_ids,
                              first_divergence=first, ref_output=ref_text, cand_output=cand_text,
                              generation=(behaviour(ref_ids, stop_ids, ref_text, check),
                                          behaviour(cand_ids, stop_ids, cand_text, check)))
        self.generation_docs.append(item.doc)
        self.items.append(outcome)
        return outcome

    # ------------------------------------------------------------------ summary
    def token_arrays(self) -> dict[str, np.ndarray]:
        def cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

        return {"kld": cat(self._kld, np.float64), "top1": cat(self._top1, bool), "ref": cat(self._ref, np.float64),
                "cand": cat(self._cand, np.float64), "doc": cat(self._docs, np.int64),
                "rest": cat(self._rest, np.float64), "pos": cat(self._pos, np.int64),
                "top1_pos": cat(self._top1_pos, np.int64)}

    def summary(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(metrics, intervals) as plain JSON-ready dicts; absent measurements are None."""
        a = self.token_arrays()
        metrics: dict[str, Any] = {}
        intervals: dict[str, Any] = {}
        n = int(a["kld"].size)
        metrics["tokens_scored"] = n
        metrics["kld_kind"] = ("exact" if self.exact else "lower-bound") if n else None
        if n:
            kld = a["kld"]
            q = np.quantile(kld, [0.5, 0.9, 0.95, 0.99, 0.999])
            nll_ref, nll_cand = -a["ref"], -a["cand"]
            dnll = nll_cand - nll_ref
            dp = np.exp(a["cand"]) - np.exp(a["ref"])
            metrics.update({
                "kld_mean": float(kld.mean()), "kld_median": float(q[0]), "kld_p90": float(q[1]),
                "kld_p95": float(q[2]), "kld_p99": float(q[3]), "kld_p999": float(q[4]),
                "kld_max": float(kld.max()), "kld_min": float(kld.min()),
                "top1_agreement": float(a["top1"].mean()) if a["top1"].size else None,
                "delta_p_mean": float(dp.mean()), "delta_p_rms": float(math.sqrt(float((dp * dp).mean()))),
                "ppl_reference": _safe_exp(float(nll_ref.mean())), "ppl": _safe_exp(float(nll_cand.mean())),
                "ln_ppl_ratio": float(dnll.mean()), "ppl_ratio": _safe_exp(float(dnll.mean())),
                "nll_correlation": _pearson(nll_ref, nll_cand),
                "documents": int(np.unique(a["doc"]).size),
            })
            if a["rest"].size:
                metrics["reference_rest_mass_mean"] = float(a["rest"].mean())
            kw = {"n_boot": self.n_boot, "seed": self.seed}
            intervals["kld_mean"] = stats.cluster_bootstrap_mean(kld, a["doc"], **kw).to_json()
            ln_ci = stats.cluster_bootstrap_mean(dnll, a["doc"], **kw)
            intervals["ln_ppl_ratio"] = ln_ci.to_json()
            # a non-finite end stays NaN here and is written as null (math.exp of None would raise)
            intervals["ppl_ratio"] = stats.Interval(_exp_or_nan(ln_ci.low), _exp_or_nan(ln_ci.high),
                                                    "cluster-bootstrap").to_json()
            if a["top1"].size:
                intervals["top1_agreement"] = stats.wilson(int(a["top1"].sum()), int(a["top1"].size)).to_json()
            if a["top1"].size != n:
                metrics["top1_positions"] = int(a["top1"].size)
        else:
            for key in ("kld_mean", "kld_median", "kld_p99", "kld_max", "top1_agreement", "delta_p_rms",
                        "ppl_ratio", "ln_ppl_ratio"):
                metrics[key] = None
        self._task_summary(metrics, intervals)
        return metrics, intervals

    def by_position(self) -> list[dict[str, Any]]:
        """Mean KLD, top-1 agreement and PPL ratio per ``POSITION_BUCKETS`` bucket that has scored tokens, each with
        its 95 % interval (documents resampled within the bucket; Wilson for top-1). Positions count the tokens of
        context before the scored token, within the window it was scored in."""
        a = self.token_arrays()
        kw = {"n_boot": self.n_boot, "seed": self.seed}
        out: list[dict[str, Any]] = []
        for lo, hi in POSITION_BUCKETS:
            sel = (a["pos"] >= lo) & (a["pos"] < (hi if hi is not None else np.iinfo(np.int64).max))
            count = int(sel.sum())
            if not count:
                continue
            kld, docs = a["kld"][sel], a["doc"][sel]
            dnll = a["ref"][sel] - a["cand"][sel]
            ln_ci = stats.cluster_bootstrap_mean(dnll, docs, **kw)
            t_sel = (a["top1_pos"] >= lo) & (a["top1_pos"] < (hi if hi is not None else np.iinfo(np.int64).max))
            top1 = a["top1"][t_sel]
            out.append({
                "from": lo, "to": hi, "tokens": count, "documents": int(np.unique(docs).size),
                "max_position": int(a["pos"][sel].max()),
                "kld_mean": float(kld.mean()),
                "kld_mean_interval": stats.cluster_bootstrap_mean(kld, docs, **kw).to_json(),
                "top1_agreement": float(top1.mean()) if top1.size else None,
                "top1_agreement_interval": stats.wilson(int(top1.sum()), int(top1.size)).to_json() if top1.size
                else None,
                "ppl_ratio": _safe_exp(float(dnll.mean())),
                "ppl_ratio_interval": stats.Interval(_exp_or_nan(ln_ci.low), _exp_or_nan(ln_ci.high),
                                                     "cluster-bootstrap").to_json(),
            })
        return out

    def _task_summary(self, metrics: dict[str, Any], intervals: dict[str, Any]) -> None:
        items = self.items
        m = len(items)
        metrics["items_scored"] = m
        if not m:
            for key in ("accuracy_reference", "accuracy", "accuracy_delta", "recovery", "flips", "flips_c_to_i",
                        "flips_i_to_c", "answer_agreement", *GENERATION_KEYS):
                metrics[key] = None
            return
        ref = np.array([o.ref_correct for o in items])
        cand = np.array([o.cand_correct for o in items])
        b = int((ref & ~cand).sum())  # correct -> incorrect
        c = int((~ref & cand).sum())  # incorrect -> correct
        acc_ref, acc = float(ref.mean()), float(cand.mean())
        delta, delta_ci = stats.paired_accuracy_delta(b, c, m)
        metrics.update({
            "accuracy_reference": acc_ref, "accuracy": acc, "accuracy_delta": delta,
            "recovery": (acc / acc_ref) if acc_ref > 0 else None,
            "flips": (b + c) / m, "flips_c_to_i": b / m, "flips_i_to_c": c / m,
            "flips_c_to_i_count": b, "flips_i_to_c_count": c,
            "answer_agreement": float(np.mean([o.same_answer for o in items])),
            "mcnemar_p": stats.mcnemar_exact(b, c),
            "choice_metric": self.choice_metric,
        })
        intervals["accuracy_delta"] = delta_ci.to_json()
        intervals["flips"] = stats.wilson(b + c, m).to_json()
        intervals["flips_c_to_i"] = stats.wilson(b, m).to_json()
        if acc_ref > 0:
            intervals["recovery"] = stats.paired_bootstrap_ratio(cand.astype(float), ref.astype(float),
                                                                 n_boot=self.n_boot, seed=self.seed).to_json()
        gen = [o for o in items if o.kind == "generate"]
        if gen:
            same = sum(1 for o in gen if o.greedy_same)
            metrics["greedy_agreement"] = same / len(gen)
            metrics["generate_items"] = len(gen)
            intervals["greedy_agreement"] = stats.wilson(same, len(gen)).to_json()
        else:
            metrics["greedy_agreement"] = None
        behaviours = [o.generation for o in gen if o.generation is not None]
        gen_metrics, gen_intervals = summarise(behaviours, self.generation_docs, n_boot=self.n_boot, seed=self.seed)
        metrics.update(gen_metrics)
        intervals.update(gen_intervals)
        choice = self.choice_variants["acc"]
        if choice:
            for name, pairs in self.choice_variants.items():
                metrics[f"choice_{name}_reference"] = float(np.mean([p[0] for p in pairs]))
                metrics[f"choice_{name}"] = float(np.mean([p[1] for p in pairs]))

    def per_task(self) -> dict[str, dict[str, Any]]:
        """Accuracy per task name, reference and candidate (for the text table and HTML plot)."""
        out: dict[str, dict[str, Any]] = {}
        for o in self.items:
            t = out.setdefault(o.task, {"n": 0, "reference": 0, "candidate": 0, "flips_c_to_i": 0, "flips_i_to_c": 0})
            t["n"] += 1
            t["reference"] += int(o.ref_correct)
            t["candidate"] += int(o.cand_correct)
            t["flips_c_to_i"] += int(o.ref_correct and not o.cand_correct)
            t["flips_i_to_c"] += int(o.cand_correct and not o.ref_correct)
        for t in out.values():
            t["accuracy_reference"] = t["reference"] / t["n"]
            t["accuracy"] = t["candidate"] / t["n"]
        return out


def _safe_exp(x: float) -> float | None:
    if not math.isfinite(x):
        return None
    return math.exp(min(x, 700.0))


def _exp_or_nan(x: float) -> float:
    value = _safe_exp(x)
    return math.nan if value is None else value


def _pearson(x: np.ndarray, y: np.ndarray) -> float | None:
    if x.size < 2:
        return None
    sx, sy = float(x.std()), float(y.std())
    if sx == 0 or sy == 0:
        return 1.0 if np.allclose(x, y) else None
    return float(((x - x.mean()) * (y - y.mean())).mean() / (sx * sy))
