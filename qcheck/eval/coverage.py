"""How much of the task set a candidate was measured on: items, and the reference's scored tokens.

Why: a number measured on part of the tasks must say so, and a gate must be able to refuse a candidate that was
measured on too little (``--min-coverage``). Items or positions go unmeasured when a backend cannot do something
(an endpoint without prompt log-probs scores no text or choice item), when a server cannot return a position
(llama-cpp-python's echo nulls the first token), or when a server that tokenises text itself splits a request so
that its scored part cannot be found again (``qcheck.eval.runners.endpoint.align``). A request the server scored
in its own token ids is still measured (the reference is scored on the same ids) and counted as re-tokenised.

Tokens are counted in the reference tokenizer's positions: a re-tokenised request contributes its share of
positions compared (positions compared / positions the server's tokens have) of its reference positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: excluded requests listed in the report (the count is always complete)
MAX_LISTED = 50


@dataclass
class Coverage:
    items_total: int = 0
    items: int = 0
    tokens_total: int = 0
    tokens: float = 0.0
    #: requests scored in the server's own token ids (the reference scored on the same ids)
    retokenised: int = 0
    #: (item id, request key, why) of every request that could not be compared
    excluded: list[tuple[str, str, str]] = field(default_factory=list)

    def exclude(self, item: str, request: str, reason: str) -> None:
        self.excluded.append((item, request, reason))

    @property
    def excluded_items(self) -> int:
        return len({item for item, _, _ in self.excluded})

    def metrics(self) -> dict[str, float | None]:
        """``coverage_items``, ``coverage_tokens`` and ``coverage`` (the smaller: what ``--min-coverage`` gates)."""
        items = self.items / self.items_total if self.items_total else None
        tokens = min(1.0, self.tokens / self.tokens_total) if self.tokens_total else None
        shares = [v for v in (items, tokens) if v is not None]
        return {"coverage_items": items, "coverage_tokens": tokens, "coverage": min(shares) if shares else None}

    def to_json(self) -> dict[str, Any]:
        return {"items": self.items, "items_total": self.items_total, "tokens": round(self.tokens),
                "tokens_total": self.tokens_total, "retokenised_requests": self.retokenised,
                "excluded_items": self.excluded_items, "excluded_requests": len(self.excluded),
                "excluded": [{"item": i, "request": r, "reason": why} for i, r, why in self.excluded[:MAX_LISTED]]}

    def notes(self) -> list[str]:
        out = []
        if self.retokenised:
            out.append(f"{self.retokenised} request(s) were tokenised by the server differently from the reference's "
                       "tokenizer; the reference was scored on the server's own token ids for them")
        if self.excluded:
            _, request, why = self.excluded[0]
            out.append(f"{len(self.excluded)} request(s) of {self.excluded_items} item(s) could not be compared and "
                       f"are left out (first: {request}: {why})")
        if self.items < self.items_total or round(self.tokens) < self.tokens_total:
            out.append(f"coverage: {self.items}/{self.items_total} items, {round(self.tokens):,}/{self.tokens_total:,} "
                       "reference tokens measured")
        return out
