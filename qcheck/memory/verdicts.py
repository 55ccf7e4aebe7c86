"""The memory estimate (and its speed ceiling) of every verdict on hardware: ``Verdict.memory``.

The one place verdicts get memory: the pipeline calls it for every front end (check, gate, hook, the
which-quant-fits table, the Python API), so the same question always gets the same figure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from qcheck.errors import UsageError
from qcheck.memory.estimate import MemoryTarget, estimate_memory
from qcheck.memory.records import GIB, MemoryEstimate

if TYPE_CHECKING:
    from qcheck.matrix.loader import Matrix
    from qcheck.model import Inspection, Verdict
    from qcheck.request import Deploy


def device_of(matrix: Matrix, gpu_id: str | None, arch_id: str | None) -> str:
    """GPU, RAM (a CPU target) or unified (a GPU sharing the host's memory: Apple, GB10, Strix Halo, MI300A)."""
    arch = matrix.gpus.archs.get(arch_id) if arch_id else None
    if arch is not None and arch.vendor == "cpu":
        return "RAM"
    unified: frozenset[str] = getattr(matrix.gpus, "unified", frozenset())
    if (gpu_id and gpu_id in unified) or (arch is not None and (arch.vendor == "apple" or arch.id in unified)):
        return "unified"
    return "GPU"


def apply_memory(verdicts: Iterable[Verdict], inspection: Inspection, deploy: Deploy, matrix: Matrix,
                 gpu_memory_gib: Callable[[str], float | None] | None = None, *,
                 host_bandwidth_gbs: float | None = None, warn_no_fit: bool = True) -> None:
    """Fill ``Verdict.memory`` for every verdict on hardware (hosted providers have none).

    A product's memory comes from ``matrices/gpus.toml`` unless ``gpu_memory_gib(gpu_id)`` says otherwise (``--gpu
    auto``: what is free); for an architecture or a compute capability there is no product, so the need is
    reported without a fit. ``warn_no_fit``: a model that does not fit gets a warning (off when the start-up is
    judged: the ``start-up`` dimension says it).
    """
    from qcheck.memory.device import device_memory

    for v in verdicts:
        if v.gpu is None and v.arch is None:
            continue
        measured = gpu_memory_gib(v.gpu) if gpu_memory_gib is not None and v.gpu else None
        try:
            params = matrix.engine(v.engine).memory
        except UsageError:
            params = None
        device = device_of(matrix, v.gpu, v.arch)
        arch = matrix.gpus.archs.get(v.arch) if v.arch else None
        memory = device_memory(matrix.gpus, v.gpu, arch.vendor if arch is not None else None, device, measured)
        mem_gib = memory.gib
        target = MemoryTarget(v.engine, params, device, mem_gib, v.weights_loaded_as, v.engine_version, memory)
        est = estimate_memory(inspection, deploy, target)
        if mem_gib is None and device != "RAM":
            est.note = ("name a GPU product (e.g. h100, rtx-4090) rather than an architecture to compare "
                        "with its memory")
        _speed(v, inspection, est, matrix, host_bandwidth_gbs)
        v.memory = est
        if est.fits is False and warn_no_fit:
            v.warnings.append(_no_fit_warning(v, est))


def _speed(v: Verdict, inspection: Inspection, est: MemoryEstimate, matrix: Matrix,
           host_bandwidth_gbs: float | None = None) -> None:
    from qcheck.speed import estimate_speed

    perf = matrix.gpus.perf.get(v.gpu) if v.gpu else None
    arch = matrix.gpus.archs.get(v.arch) if v.arch else None
    if perf is None or arch is None or v.status == "unsupported":
        return
    try:
        memory = matrix.engine(v.engine).memory
    except UsageError:
        memory = None
    engines = matrix.gpus.speed_engines
    own = engines.get(memory.formula) if memory is not None else None
    est.speed = estimate_speed(v, inspection, est, perf, arch, (own, engines), host_bandwidth_gbs)


def _no_fit_warning(v: Verdict, est: MemoryEstimate) -> str:
    if est.refusal:
        return f"memory: {est.refusal}"
    usable = (est.usable_bytes or 0) / GIB
    if est.offload:
        more = f"; {est.offload.summary}"
    elif est.gpus_needed:
        more = f"; {est.gpus_needed} GPUs would ({est.parallelism})"
    else:
        more = f"; not even {est.max_gpus}"
    return f"memory: needs {est.total_bytes / GIB:.1f} GiB, more than one {v.gpu} ({usable:.1f} GiB usable){more}"
