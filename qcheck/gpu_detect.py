"""``--gpu auto``: the GPUs of the machine qcheck runs on, with their total and free memory.

Asks the vendors' command-line tools (``nvidia-smi``, ``rocm-smi``; ``sysctl`` on macOS), each with a short
timeout, and PyTorch only when it is already imported (importing it would cost seconds). Detected names are
mapped through the same catalogue as ``--gpu`` (``matrices/gpus.toml`` names and aliases), after dropping the
vendor words the tools print ("NVIDIA GeForce RTX 4090" -> "RTX 4090"). Nothing here runs unless asked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qcheck.matrix.gpus import GpuTable

from qcheck.errors import UsageError

#: seconds each tool may take before it is abandoned
TIMEOUT = 3.0
#: at most this many devices are taken from a tool's output
MAX_DEVICES = 64
_VENDOR_WORDS = ("nvidia", "geforce", "amd", "radeon", "instinct", "apple", "intel(r)", "intel", "tesla")


@dataclass(frozen=True)
class DetectedGpu:
    """One device as a tool reported it."""

    name: str
    total_mib: float | None
    free_mib: float | None
    tool: str


def _run(argv: list[str]) -> str | None:
    exe = shutil.which(argv[0])
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=TIMEOUT,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return proc.stdout[:1_000_000]


def _num(text: str) -> float | None:
    try:
        value = float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None
    return value if 0 <= value < 1e12 else None


def parse_nvidia_smi(out: str) -> list[DetectedGpu]:
    """``nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv,noheader,nounits`` (MiB)."""
    found = []
    for line in out.splitlines()[:MAX_DEVICES]:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not parts[0]:
            continue
        found.append(DetectedGpu(parts[0][:200], _num(parts[1]), _num(parts[2]), "nvidia-smi"))
    return found


def parse_rocm_smi(out: str) -> list[DetectedGpu]:
    """``rocm-smi --showproductname --showmeminfo vram --json``: one object per card, memory in bytes."""
    try:
        data = json.loads(out)
    except ValueError:
        return []
    if not isinstance(data, dict):
        return []
    found = []
    for key, card in list(data.items())[:MAX_DEVICES]:
        if not (isinstance(key, str) and key.lower().startswith("card") and isinstance(card, dict)):
            continue
        fields = {str(k).lower(): v for k, v in card.items()}
        name = next((str(fields[k]) for k in ("card series", "card model", "card sku", "marketing name")
                     if isinstance(fields.get(k), str) and fields[k].strip()), None)
        if name is None:
            continue
        total = _num(str(fields.get("vram total memory (b)", "")))
        used = _num(str(fields.get("vram total used memory (b)", "")))
        total_mib = total / 2**20 if total is not None else None
        free_mib = (total - used) / 2**20 if total is not None and used is not None and used <= total else None
        found.append(DetectedGpu(name[:200], total_mib, free_mib, "rocm-smi"))
    return found


def _apple() -> list[DetectedGpu]:
    if sys.platform != "darwin":
        return []
    brand = _run(["sysctl", "-n", "machdep.cpu.brand_string"])
    mem = _run(["sysctl", "-n", "hw.memsize"])
    if not brand or not brand.strip().lower().startswith("apple"):
        return []
    total = _num(mem or "")
    return [DetectedGpu(brand.strip()[:200], total / 2**20 if total else None, None, "sysctl")]


def _torch() -> list[DetectedGpu]:
    torch: Any = sys.modules.get("torch")  # only if something already paid for the import
    if torch is None:
        return []
    try:
        if not torch.cuda.is_available():
            return []
        found = []
        for i in range(min(torch.cuda.device_count(), MAX_DEVICES)):
            free, total = torch.cuda.mem_get_info(i)
            found.append(DetectedGpu(str(torch.cuda.get_device_name(i)), total / 2**20, free / 2**20, "torch"))
        return found
    except Exception:
        return []


def detect() -> tuple[list[DetectedGpu], list[str]]:
    """The local GPUs (first tool that reports any) and the tools that were tried."""
    tried = []
    for tool, argv, parse in (
        ("nvidia-smi", ["nvidia-smi", "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"],
         parse_nvidia_smi),
        ("rocm-smi", ["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"], parse_rocm_smi),
    ):
        tried.append(tool)
        out = _run(argv)
        if out:
            found = parse(out)
            if found:
                return found, tried
    tried.append("sysctl (macOS)")
    found = _apple()
    if found:
        return found, tried
    tried.append("torch (when already imported)")
    return _torch(), tried


def candidate_names(name: str) -> list[str]:
    """Spellings to try in the catalogue: the name, without vendor words, then with trailing words dropped
    ("NVIDIA H100 80GB HBM3" -> "H100 80GB HBM3" -> "H100 80GB" -> "H100")."""
    words = name.replace("-", " ").split()
    core = [w for w in words if w.lower() not in _VENDOR_WORDS]
    out = [name, " ".join(core)]
    for n in range(len(core) - 1, 0, -1):
        out.append(" ".join(core[:n]))
    return [c for c in dict.fromkeys(out) if c]


def resolve(gpus: GpuTable, detected: list[DetectedGpu]) -> list[tuple[str, DetectedGpu]]:
    """(catalogue id, device) for each detected device; a device the catalogue does not know is a UsageError.

    A product sold in several memory sizes whose name does not say which ("NVIDIA GeForce RTX 4060 Ti") is the
    configuration nearest the total memory the tool reported, not the catalogue's default."""
    out = []
    for dev in detected:
        for cand in candidate_names(dev.name):
            try:
                target = gpus.lookup(cand)
            except UsageError:
                continue
            if target.gpu is not None:
                gid = target.gpu
                if target.note is not None and dev.total_mib:
                    gid = gpus.variant_for_memory(gid, dev.total_mib / 1024)
                out.append((gid, dev))
                break
        else:
            raise UsageError(f"--gpu auto: found {dev.name!r} ({dev.tool}) but the GPU catalogue does not know it; "
                             "name the closest product with --gpu (see `qcheck matrix --list`)")
    return out


def exact_name(gpus: GpuTable, gpu_id: str) -> str:
    """A ``--gpu`` value that names exactly this configuration (a product's default is named with its size, so
    the verdict does not say a default was taken: the device said which)."""
    gpu = gpus.gpus[gpu_id]
    if len(gpus.family(gpu_id)) > 1 and gpu.variant_of is None and gpu.memory_gib is not None:
        return f"{gpu_id}:{gpu.memory_gib:g}gb"
    return gpu_id


def auto_gpus(gpus: GpuTable) -> tuple[list[str], dict[str, float], list[str]]:
    """For ``--gpu auto``: the ``--gpu`` values naming each detected configuration, the memory to judge against per
    catalogue id (free memory when the tool reports it, else the total), and one note per device. No GPU found
    is a UsageError (exit 2)."""
    detected: list[DetectedGpu]
    if os.environ.get("QCHECK_NO_GPU_DETECT"):
        detected, tried = [], ["none (QCHECK_NO_GPU_DETECT is set)"]
    else:
        detected, tried = detect()
    if not detected:
        raise UsageError(f"--gpu auto: no GPU found (tried {', '.join(tried)}); name one with --gpu, e.g. "
                         "--gpu rtx-4090, or --gpu cpu")
    names: list[str] = []
    memory: dict[str, float] = {}
    notes: list[str] = []
    for gid, dev in resolve(gpus, detected):
        use = dev.free_mib if dev.free_mib is not None else dev.total_mib
        if exact_name(gpus, gid) not in names:
            names.append(exact_name(gpus, gid))
            if use is not None:
                memory[gid] = round(use / 1024, 2)
        what = (f"{dev.free_mib / 1024:.1f} GiB free of {dev.total_mib / 1024:.1f} GiB"
                if dev.free_mib is not None and dev.total_mib is not None
                else f"{dev.total_mib / 1024:.1f} GiB" if dev.total_mib is not None else "memory not reported")
        notes.append(f"--gpu auto: {dev.name} ({dev.tool}) -> {gid}, {what}")
    return names, memory, notes
