"""Capacity (``qcheck check ... --capacity``): concurrent sequences per context for each KV-cache type the engine
accepts on the GPU, with vLLM's own "maximum concurrency" figure.

The table a platform team asks for, from the same answer as the headline: each KV type is judged by the matrix
(``resolve``: a type the engine refuses on that GPU, or that no rule vouches for, is left out and named), and each
cell is the memory estimate of that deployment (``apply_memory``: the one home of every memory figure) at that
context:

* ``sequences``: the most sequences of that context held at once (``MemoryEstimate.max_batch``), on the GPU count
  the plan uses: ``--tp``, else the count the headline estimate needs when one GPU is not enough (the whole table
  is judged at that count, as ``--tp N``), else one;
* ``engine_concurrency``: what vLLM prints at start-up, ``Maximum concurrency for N tokens per request: X``, the
  pool's tokens over the context (``kv_available_tokens / context``; checked against published logs in
  docs/memory.md); None for engines that print no such figure.

Nothing here computes memory: a figure that differs from ``qcheck check --context N --kv-cache-dtype T`` would be a
second formula.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from qcheck.memory.records import CapacityCell, CapacityRow, CapacityTable

if TYPE_CHECKING:
    from qcheck.matrix.loader import Matrix
    from qcheck.matrix.resolve import EngineRequest
    from qcheck.matrix.schema import Target
    from qcheck.memory.records import MemoryEstimate
    from qcheck.model import Inspection, Verdict
    from qcheck.request import Deploy

#: the contexts a capacity table shows (the user's --context joins them)
CONTEXTS = (4096, 8192, 32768, 131072)
#: the largest batch the estimate searches (estimate._fit): a count at this bound means "at least"
SEARCH_BOUND = 4096


def engine_concurrency(est: MemoryEstimate) -> float | None:
    """vLLM's "Maximum concurrency for N tokens per request": the KV pool's tokens over the context; None for an
    engine that prints none."""
    if est.engine != "vllm" or est.kv_available_tokens is None or not est.context:
        return None
    return est.kv_available_tokens / est.context


def contexts_for(deploy: Deploy) -> list[int]:
    """The table's contexts: 4k, 8k, 32k, 128k and the one asked for."""
    return sorted({*CONTEXTS, *([deploy.context] if deploy.context else [])})


def add_capacity(verdicts: Iterable[Verdict], inspection: Inspection, deploy: Deploy, matrix: Matrix,
                 pairs: tuple[Sequence[EngineRequest], Sequence[Target]],
                 gpu_memory_gib: Callable[[str], float | None] | None = None) -> None:
    """Fill ``verdict.memory.concurrency`` for every verdict with a memory estimate that the engine can run."""
    requests, targets = pairs
    from qcheck.outcome import decided_by_startup

    for v in verdicts:
        # a deployment that does not start as asked still gets its table (what would start is the point of it);
        # a checkpoint the engine refuses does not
        if v.memory is None or (v.status == "unsupported" and not decided_by_startup(v)):
            continue
        request = _request_of(v, requests)
        target = next((t for t in targets if t.gpu == v.gpu and t.arch.id == v.arch), None)
        if request is None or target is None:
            continue
        v.memory.concurrency = capacity_table(inspection, _at_plan(deploy, v.memory), matrix, request, target,
                                              gpu_memory_gib)


def _at_plan(deploy: Deploy, headline: MemoryEstimate) -> Deploy:
    """The deployment every cell is judged at: the --tp asked for, else the GPU count the headline needs when one
    GPU is not enough (so the table reads at one GPU count, not a count per context)."""
    if deploy.parallel.tp or headline.fits is not False or not headline.gpus_needed or headline.gpus_needed < 2:
        return deploy
    return dataclasses.replace(deploy, parallel=dataclasses.replace(deploy.parallel, tp=headline.gpus_needed))


def capacity_table(inspection: Inspection, deploy: Deploy, matrix: Matrix, request: EngineRequest, target: Target,
                   gpu_memory_gib: Callable[[str], float | None] | None = None) -> CapacityTable:
    """The capacity table of one engine on one GPU: each KV type judged, each context estimated."""
    from qcheck.request import KVCacheTypes

    kv = request.engine.kv_cache
    rows: list[CapacityRow] = []
    left_out: list[str] = []
    for name in dict.fromkeys(["auto", *(kv.accepts if kv is not None else ())]):
        types = KVCacheTypes() if name == "auto" else KVCacheTypes(name, name)
        at = dataclasses.replace(deploy, kv_cache=types)
        verdict = _judged(inspection, at, matrix, request, target)
        kv_status = next((d.status for d in verdict.dimensions if d.dimension == "kv-cache"), None)
        if verdict.status == "unsupported" or kv_status in ("unsupported", "unknown"):
            if name != "auto":
                left_out.append(f"{name} ({kv_status or verdict.status})")
            continue
        row = _row(name, verdict, inspection, at, matrix, gpu_memory_gib)
        if row is None or any(r.kv_cache_dtype == row.kv_cache_dtype for r in rows):
            continue  # an alias of a type already shown (bf16 = bfloat16, auto = the model's own)
        twin = next((r for r in rows if r.status == row.status and r.cells == row.cells), None)
        if twin is not None:
            twin.same_as.append(row.kv_cache_dtype)
        else:
            rows.append(row)
    return CapacityTable(rows, left_out, _note(request))


def _row(name: str, verdict: Verdict, inspection: Inspection, deploy: Deploy, matrix: Matrix,
         gpu_memory_gib: Callable[[str], float | None] | None) -> CapacityRow | None:
    """One KV type's cells: the verdict's memory estimate at each context, one sequence asked."""
    from qcheck.memory.verdicts import apply_memory

    row: CapacityRow | None = None
    for ctx in contexts_for(deploy):
        one = copy.copy(verdict)
        one.warnings = list(verdict.warnings)
        apply_memory([one], inspection, dataclasses.replace(deploy, context=ctx, batch=1), matrix, gpu_memory_gib)
        est = one.memory
        if est is None:
            return None
        if row is None:
            row = CapacityRow(est.kv_cache_dtype, name, verdict.status)
        row.cells.append(_cell(est, ctx, inspection, deploy.parallel.tp or 1))
    return row


def _judged(inspection: Inspection, deploy: Deploy, matrix: Matrix, request: EngineRequest,
            target: Target) -> Verdict:
    from qcheck.matrix.verdicts import resolve

    return resolve(matrix, inspection, [request], [target], suggestions=False, deploy=deploy)[0]


def _cell(est: MemoryEstimate, ctx: int, inspection: Inspection, gpus: int) -> CapacityCell:
    """One cell at the table's GPU count: a context that needs more GPUs than that holds no sequence there."""
    limit = inspection.context_length
    if limit and ctx > limit:
        return CapacityCell(ctx, None, gpus)
    sequences = est.max_batch if est.max_batch is not None else (0 if est.fits is False else None)
    if est.max_context_gpus > gpus:
        sequences = 0
    return CapacityCell(ctx, sequences, gpus, sequences == SEARCH_BOUND, engine_concurrency(est),
                        est.kv_available_tokens)


def _request_of(v: Verdict, requests: Sequence[EngineRequest]) -> EngineRequest | None:
    from qcheck.matrix.resolve import select_version

    for r in requests:
        if r.engine.id != v.engine or (r.backend is not None and r.backend != v.backend):
            continue
        if r.installed is not None or select_version(r.engine, r.version)[0] == v.engine_version:
            return r
    return None


def _note(request: EngineRequest) -> str:
    engine = request.engine.id
    if engine == "vllm":
        return ("sequences of the whole context held in the KV pool at once; vLLM also schedules at most "
                "--max-num-seqs of them (256 below 70 GiB, 1024 above); in brackets vLLM's own start-up figure")
    if engine == "sglang":
        return "sequences of the whole context held in the KV pool at once (SGLang also caps --max-running-requests)"
    return "sequences of the whole context that fit at once (llama.cpp family: -np slots of that context each)"
