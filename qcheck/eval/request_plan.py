"""Which token ids each request is compared on, for one candidate, and which requests cannot be compared.

Why apart from the scoring loop: most runners score exactly the workload's ids; a server that takes prompts only as
text scores its own tokenisation (``qcheck.eval.runners.endpoint.align``), for which the reference must be scored
too (``qcheck.eval.supplement``), and now and then a request that cannot be compared at all. Deciding that per
request, before any row is read, keeps the loop simple and makes every exclusion visible in the coverage
(``qcheck.eval.coverage``). A choice item is compared whole or not at all: its accuracy needs every choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qcheck.eval.coverage import Coverage
from qcheck.eval.encode import EncodedItem
from qcheck.eval.runners.base import CandidateRunner, ScoreRequest
from qcheck.eval.supplement import RowSource
from qcheck.eval.workload import Workload


@dataclass(frozen=True)
class Scored:
    """One request to compare: its item, its index among the item's requests, and the ids the candidate scores."""

    enc: EncodedItem
    index: int
    request: ScoreRequest

    @property
    def counts_tokens(self) -> bool:
        """Whether its rows feed the token metrics (a text item's, or a choice item's gold answer)."""
        return self.enc.item.kind == "text" or self.index == self.enc.item.answer


@dataclass
class RequestPlan:
    scored: list[Scored]
    rows: RowSource
    coverage: Coverage
    #: items with prompt requests the runner cannot score at all (no prompt log-probs), by kind
    skipped: dict[str, int]


def plan_requests(runner: CandidateRunner, work: Workload, ref: Any, skipped: dict[str, int]) -> RequestPlan:
    """Every request the candidate can be compared on, in the ids it scores them in, with the reference's rows
    for them (scored again where the candidate's server chose other ids)."""
    coverage = Coverage(items_total=len(work.encoded),
                        tokens_total=sum(r.n_rows for e in work.encoded for i, r in enumerate(e.score)
                                         if e.item.kind == "text" or i == e.item.answer))
    scored: list[Scored] = []
    for enc in work.encoded:
        if not enc.score:
            continue
        if not runner.capabilities.has_prompt_logprobs:
            skipped[enc.item.kind] += 1
            continue
        scored.extend(_item_requests(runner, enc, coverage, work.reference_excluded))
    substitutes = [s.request for s in scored if s.request is not s.enc.score[s.index]]
    coverage.retokenised = len(substitutes)
    rows, excluded = RowSource(ref.reader), {}
    if substitutes and ref.rescorer is not None:
        text_keys = {s.request.key for s in scored if s.enc.item.kind == "text"}
        rows, excluded = ref.rescorer.rows_for(ref.reader, substitutes, text_keys, work.progress, work.log)
    dropped = {id(s.enc) for s in scored if s.request.key in excluded and s.enc.item.kind == "choice"}
    for s in scored:
        if s.request.key in excluded or id(s.enc) in dropped:
            coverage.exclude(s.enc.item.id, s.enc.score[s.index].key,
                             excluded.get(s.request.key, "another choice of this item could not be compared"))
    kept = [s for s in scored if s.request.key not in excluded and id(s.enc) not in dropped]
    covered = {id(s.enc) for s in kept}
    coverage.items += sum(1 for e in work.encoded if e.score and id(e) in covered
                          and sum(1 for s in kept if s.enc is e) == len(e.score))
    return RequestPlan(scored=kept, rows=rows, coverage=coverage, skipped=skipped)


def _item_requests(runner: CandidateRunner, enc: EncodedItem, coverage: Coverage,
                   excluded: dict[str, str]) -> list[Scored]:
    """The item's requests as the runner scores them; the excluded ones recorded (all of a choice item's when one
    of them is excluded)."""
    scored_as = getattr(runner, "scored_as", None)
    views: list[ScoreRequest | str] = [
        f"the reference endpoint could not score it: {excluded[r.key]}" if r.key in excluded
        else scored_as(r) if scored_as is not None else r for r in enc.score]
    reasons = [(enc.score[i].key, v) for i, v in enumerate(views) if isinstance(v, str)]
    for key, why in reasons:
        coverage.exclude(enc.item.id, key, why)
    if reasons and enc.item.kind == "choice":
        for i, v in enumerate(views):
            if not isinstance(v, str):
                coverage.exclude(enc.item.id, enc.score[i].key, "another choice of this item could not be compared")
        return []
    return [Scored(enc, i, v) for i, v in enumerate(views) if not isinstance(v, str)]
