"""The items every side of ``qcheck eval`` scores: tasks tokenised once with the reference's tokenizer, plus the
run's progress display and event log.

Why one object: the reference, every candidate and the noise floor score exactly these requests; passing them
together keeps the functions that use them short and their signatures honest.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from qcheck.eval.encode import EncodedItem, Encoder, chunk_scored
from qcheck.eval.runners.base import ScoreRequest
from qcheck.eval.tasks import TaskSet, load_tasks


class Progress:
    """A rich progress bar on stderr when it is a terminal; periodic lines otherwise (``eval/progress.py``)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()
        self._p: Any = None  # a rich Progress while shown (rich is imported only then)
        self._task = None
        self._lines = None
        if enabled and not self.enabled:
            from qcheck.eval.progress import LineProgress

            self._lines = LineProgress()

    def start(self, label: str, total: int) -> None:
        if self._lines is not None:
            self._lines.start(label, total)
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.stop()
        self._p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                           console=Console(stderr=True), transient=True)
        self._p.start()
        self._task = self._p.add_task(label, total=total)

    def advance(self, n: int = 1) -> None:
        if self._lines is not None:
            self._lines.advance(n)
        if self._p is not None:
            self._p.advance(self._task, n)

    def stop(self) -> None:
        if self._lines is not None:
            self._lines.stop()
        if self._p is not None:
            self._p.stop()
            self._p = None


@dataclass
class Workload:
    """The tokenised task set, shared by the reference, the candidates and the noise floor."""

    tasks: TaskSet
    encoder: Encoder
    encoded: list[EncodedItem]
    progress: Progress
    log: Callable[[str], None]
    #: what the report says about windows and truncation
    notes: list[str] = field(default_factory=list)
    #: KV-cache-alone measurements (``qcheck.eval.kv_split``) by emulation, shared by the candidates that ask the same
    kv_only: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)
    #: requests the reference could not score (an endpoint reference), by key, with why: no candidate scores them
    reference_excluded: dict[str, str] = field(default_factory=dict)

    def follow_reference(self, redirects: dict[str, Any], excluded: dict[str, str]) -> None:
        """Score what an endpoint reference scored: a request its server tokenised itself becomes that server's
        token ids (``redirects``: key -> key, ids, start), one it could not score is left out (``excluded``)."""
        for enc in self.encoded:
            for i, req in enumerate(enc.score):
                target = redirects.get(req.key)
                if isinstance(target, dict):
                    enc.score[i] = ScoreRequest(key=str(target["key"]), input_ids=tuple(int(t) for t in target["ids"]),
                                                start=int(target["start"]))
        self.reference_excluded = {str(k): str(v) for k, v in excluded.items()}

    @property
    def truncated(self) -> int:
        return sum(1 for e in self.encoded if e.truncated)

    @property
    def windowed(self) -> list[int]:
        """The window count of every text item longer than ``max_length``."""
        return [e.windows for e in self.encoded if e.windowed]

    def units(self) -> int:
        """Progress units of one pass: every score request and every generation."""
        return sum(len(e.score) + (1 if e.generate else 0) for e in self.encoded)

    def to_json(self) -> dict[str, Any]:
        """The report's ``tasks`` record."""
        windowed = self.windowed
        return self.tasks.to_json() | {"tokens_per_item_limit": self.encoder.max_length,
                                       "windowed_items": len(windowed), "windows": sum(windowed),
                                       "unscored_tokens": self.encoder.unscored_tokens,
                                       "truncated_items": self.truncated}


@dataclass(frozen=True)
class WindowSettings:
    """How items are cut into requests: ``--max-length``, ``--stride``, ``--windows``, ``--max-items``."""

    max_length: int = 512
    stride: int | None = None
    windows: str = "sliding"
    max_items: int | None = None


def load_task_set(task_specs: list[str], settings: WindowSettings) -> TaskSet:
    """The task files (bundled sets by name), cut to ``--max-items``."""
    tasks = load_tasks(task_specs)
    if settings.max_items is not None:
        tasks.items = tasks.items[: settings.max_items]
    return tasks


def prepare_workload(tasks: TaskSet, tokenizer: Any, settings: WindowSettings, progress: Progress,
                     log: Callable[[str], None]) -> Workload:
    """Tokenise every item once with the reference's tokenizer."""
    encoder = Encoder(tokenizer, max_length=settings.max_length, stride=settings.stride, windows=settings.windows)
    work = Workload(tasks=tasks, encoder=encoder, encoded=[encoder.encode_item(item) for item in tasks.items],
                    progress=progress, log=log)
    work.notes.extend(_window_notes(work, settings))
    return work


def _window_notes(work: Workload, settings: WindowSettings) -> list[str]:
    notes: list[str] = []
    truncated, windowed, encoder = work.truncated, work.windowed, work.encoder
    if truncated:
        notes.append(f"{truncated} choice/generate item(s) were left-truncated to the {settings.max_length}-token "
                     "limit")
    if windowed and settings.windows == "chunks":
        notes.append(f"{len(windowed)} text item(s) longer than {settings.max_length} tokens were scored in "
                     f"{sum(windowed)} llama-perplexity chunks (non-overlapping, each scoring its last "
                     f"{chunk_scored(settings.max_length)} tokens; {encoder.unscored_tokens} token(s) after "
                     "the last whole chunk not scored)")
    elif windowed:
        notes.append(f"{len(windowed)} text item(s) longer than {settings.max_length} tokens were scored in "
                     f"{sum(windowed)} sliding windows (stride {encoder.stride}: each window scores only its last "
                     f"{encoder.stride} tokens, with at least {settings.max_length - encoder.stride} tokens of context)")
    return notes
