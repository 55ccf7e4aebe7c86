"""One device's memory as the engines see it: the runtime total (``cudaMemGetInfo``, what vLLM's
``gpu_memory_utilization``, SGLang's KV pool and llama.cpp's ``--fit`` start from), the management tool's total
(``nvidia-smi``, what SGLang's ``mem_fraction_static`` heuristic divides by), and free memory when it was measured
on this machine (``--gpu auto``).

The figures come from the product's ``capacity`` in ``matrices/gpus.toml``; a missing one is estimated by the
``[capacity]`` rules, on the side that cannot make a model fit that does not, and the text says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from qcheck.memory.records import GIB, MIB

if TYPE_CHECKING:
    from qcheck.matrix.gpus import GpuTable


@dataclass(frozen=True)
class DeviceMemory:
    """A device's memory for the memory estimate (JSON ``memory.device_memory``)."""

    kind: str = "GPU"  # GPU | RAM | unified
    #: the runtime total in bytes (cudaMemGetInfo / torch / HIP), what the engines' fractions apply to
    total_bytes: int | None = None
    #: the management tool's total (nvidia-smi / amd-smi memory.total), SGLang's heuristic reads it
    smi_bytes: int | None = None
    #: free memory measured on this machine (--gpu auto); None: a GPU with nothing else on it
    free_bytes: int | None = None
    vendor: str | None = None
    gpu: str | None = None
    #: the marketed size (gpus.toml memory_gib)
    datasheet_gib: float | None = None
    #: where total_bytes comes from: driver | estimate | measured | none
    basis: str = "none"
    #: one phrase for people: "79.19 GiB as CUDA reports an H100 (81,559 MiB in nvidia-smi)"
    text: str = ""
    #: the product's architecture id (gpus.toml), which decides the kernels an engine picks (MoE layouts)
    arch: str | None = None

    @property
    def gib(self) -> float | None:
        return None if self.total_bytes is None else self.total_bytes / GIB

    def to_json(self) -> dict[str, object]:
        return {"total_bytes": self.total_bytes, "smi_bytes": self.smi_bytes, "free_bytes": self.free_bytes,
                "datasheet_gib": self.datasheet_gib, "basis": self.basis, "text": self.text}


def device_memory(gpus: GpuTable, gpu_id: str | None, vendor: str | None, kind: str,
                  measured_gib: float | None = None) -> DeviceMemory:
    """The device's memory from the catalogue (and a measured free figure, ``--gpu auto``)."""
    gpu = gpus.gpus.get(gpu_id) if gpu_id else None
    datasheet = gpu.memory_gib if gpu is not None else None
    arch = gpu.arch if gpu is not None else None
    if kind == "unified" or gpu is None:
        # unified memory: the engines' own wired limit applies to the whole pool (families); an architecture or a
        # measured device without a catalogue entry: what was measured, else nothing to compare with
        gib = measured_gib if measured_gib is not None else datasheet
        total = int(gib * GIB) if gib else None
        basis = "measured" if measured_gib is not None else ("datasheet" if gib else "none")
        text = f"{gib:g} GiB" + (" free, measured on this machine" if measured_gib is not None else "") if gib else ""
        return DeviceMemory(kind, total, None, total if measured_gib is not None else None, vendor, gpu_id,
                            datasheet, basis, text, arch)
    rules = gpus.capacity_rules
    cap = gpu.capacity
    runtime = cap.runtime_total_gib if cap is not None else None
    smi_mib = cap.smi_total_mib if cap is not None else None
    name = gpu.id
    if runtime is not None:
        total, basis = int(runtime * GIB), "driver"
        text = f"{runtime:g} GiB as the driver reports a {name}"
    elif smi_mib is not None:
        total, basis = int((smi_mib - rules.smi_gap_max_mib) * MIB), "estimate"
        text = (f"{total / GIB:.2f} GiB for a {name}: its {smi_mib:,.0f} MiB nvidia-smi total less "
                f"{rules.smi_gap_max_mib:g} MiB, the largest gap to the runtime total measured (an estimate)")
    elif datasheet is not None:
        total, basis = int(datasheet * rules.datasheet_ratio * GIB), "estimate"
        text = (f"{total / GIB:.2f} GiB for a {name}: {rules.datasheet_ratio:g} x its {datasheet:g} GB datasheet "
                "size, the smallest ratio measured (no driver figure for this product; an estimate)")
    else:
        return DeviceMemory(kind, None, None, None, vendor, gpu_id, None, "none", "", arch)
    smi = int(smi_mib * MIB) if smi_mib is not None else int(total + rules.smi_gap_min_mib * MIB)
    if smi_mib is not None and runtime is not None:
        text += f" ({smi_mib:,.0f} MiB in nvidia-smi)"
    free = None
    if measured_gib is not None:
        free = int(measured_gib * GIB)
        text += f"; {measured_gib:g} GiB free, measured on this machine"
    return DeviceMemory(kind, total, smi, free, vendor, gpu_id, datasheet, basis, text, arch)


def plain_device(kind: str, gib: float | None, vendor: str | None = None) -> DeviceMemory:
    """A device known only by a size (tests, the Python API's ``gpu_memory_gib``): total and nvidia-smi figure
    alike, no context or ECC adjustment."""
    total = int(gib * GIB) if gib else None
    return DeviceMemory(kind, total, total, None, vendor, None, gib, "given" if gib else "none",
                        f"{gib:g} GiB" if gib else "")
