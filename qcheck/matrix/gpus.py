"""GPU and architecture lookup: what ``--gpu`` accepts (products, architectures, compute capabilities).

Built from ``matrices/gpus.toml``. Matching ignores case and punctuation (``RTX 4090`` = ``rtx-4090``
= ``rtx4090``); an unknown name is a usage error listing the closest known names.
"""

from __future__ import annotations

import math
import re
from typing import Any

from qcheck.errors import UsageError
from qcheck.matrix.gpu_capacity import CapacityRules, parse_capacity, parse_rules
from qcheck.matrix.schema import (
    ARCH_KEYS,
    FORMATS,
    GPU_KEYS,
    VENDORS,
    Arch,
    Gpu,
    Target,
    Where,
    check_keys,
    require_str,
)

_PUNCT = re.compile(r"[\s\-_/]+")
#: words device tools put before the product name (nvidia-smi, rocm-smi, xpu-smi), normalised
_VENDOR_WORDS = ("nvidia", "amd", "intel", "tesla")
_CC_DOTTED = re.compile(r"^(?:sm)?(\d{1,2})\.(\d)[af]?$")
_CC_PLAIN = re.compile(r"^(?:sm)?(\d{2,3})[af]?$")
_CC_TEXT = re.compile(r"^\d{1,2}\.\d$")
_ID = re.compile(r"^[a-z0-9][a-z0-9.+-]*$")
#: a memory size inside a normalised name ("h10080gbhbm3", "a100sxm440gb")
_SIZE_IN = re.compile(r"[0-9]+gb?(?![a-z0-9])|[0-9]+gb")


def normalise(name: str) -> str:
    """The comparison key of a GPU/arch/engine name: lower case, no spaces, hyphens, underscores or slashes."""
    return _PUNCT.sub("", name.strip().lower())


def _tool_spellings(key: str) -> list[str]:
    """A normalised name, then without what device tools decorate it with: "(R)"/"(TM)" and a trailing
    "Graphics" (xpu-smi, sycl-ls: "Intel(R) Arc(TM) A770 Graphics"), "GeForce" after the vendor word
    ("NVIDIA GeForce RTX 2060 SUPER")."""
    bare = key.replace("(r)", "").replace("(tm)", "")
    if bare.endswith("graphics"):
        bare = bare[: -len("graphics")]
    out = [key, bare]
    for prefix in ("nvidiageforce", "geforce"):
        if bare.startswith(prefix):
            out.append(bare[len(prefix):])
    return list(dict.fromkeys(c for c in out if c))


def parse_cc_name(name: str) -> str | None:
    """'sm90', 'sm_90', '9.0', '90', 'sm121', '12.1' -> '9.0' / '12.1'; None if it is not a capability."""
    key = normalise(name)
    m = _CC_DOTTED.match(key)
    if m:
        return f"{int(m.group(1))}.{m.group(2)}"
    m = _CC_PLAIN.match(key)
    if m:
        digits = m.group(1)
        return f"{int(digits[:-1])}.{digits[-1]}"
    return None


class GpuTable:
    """Architectures and products, indexed by every normalised name they answer to."""

    def __init__(self, archs: list[Arch], gpus: list[Gpu]):
        self.archs: dict[str, Arch] = {a.id: a for a in archs}
        self.gpus: dict[str, Gpu] = {g.id: g for g in gpus}
        self._names: dict[str, tuple[str, str]] = {}  # normalised name -> ("gpu"|"arch", id)
        self._display: dict[str, str] = {}  # normalised name -> what to show in "did you mean"
        self._cc: dict[str, str] = {}  # "8.6" -> arch id
        self._arch_ids = frozenset(self.archs)
        self._gpu_ids = frozenset(self.gpus)
        #: a product sold in several configurations: its default entry's id -> every member, the default first
        self.families: dict[str, tuple[str, ...]] = {}
        #: [[perf]] by gpu id and the [unified_memory] ids (qcheck.matrix.gpu_perf), filled by build_gpu_table
        self.perf: dict[str, Any] = {}
        self.unified: frozenset[str] = frozenset()
        #: how a product's missing driver figure is estimated ([capacity]), filled by build_gpu_table
        self.capacity_rules = CapacityRules()
        #: per engine family: speed floor and calibration ([[speed_engine]], qcheck.matrix.gpu_perf.SpeedEngine)
        self.speed_engines: dict[str, Any] = {}
        for gpu in gpus:
            if gpu.variant_of is not None:
                self.families[gpu.variant_of] = (*self.families.get(gpu.variant_of, (gpu.variant_of,)), gpu.id)
            for name in (gpu.id, *gpu.names):
                self._names.setdefault(normalise(name), ("gpu", gpu.id))
                self._display.setdefault(normalise(name), gpu.id)
        for gpu in gpus:  # "rtx-4060-ti 16gb", "NVIDIA GeForce RTX 4060 Ti 16GB": a size after any name of the product
            base = self.gpus[gpu.variant_of] if gpu.variant_of else gpu
            if gpu.memory_gib is not None:
                for name in {base.id, *base.names, gpu.id, *gpu.names}:
                    self._names.setdefault(normalise(name) + _size_text(gpu.memory_gib), ("gpu", gpu.id))
                    self._display.setdefault(normalise(name) + _size_text(gpu.memory_gib), gpu.id)
        for arch in archs:
            for name in (arch.id, *arch.aliases):
                self._names.setdefault(normalise(name), ("arch", arch.id))
                self._display.setdefault(normalise(name), name)
            for cc in arch.ccs:
                self._cc.setdefault(cc, arch.id)

    def arch_ids(self) -> frozenset[str]:
        """Every architecture id (built once: each rule's ``hardware`` is checked against it)."""
        return self._arch_ids

    def gpu_ids(self) -> frozenset[str]:
        """Every product id (built once, as ``arch_ids``)."""
        return self._gpu_ids

    def family(self, gpu_id: str) -> tuple[str, ...]:
        """Every configuration of the product ``gpu_id`` belongs to, its default first (just itself if it has one)."""
        gpu = self.gpus[gpu_id]
        return self.families.get(gpu.variant_of or gpu.id, (gpu.id,))

    def lookup(self, name: str) -> Target:
        """Resolve one ``--gpu`` value; raises UsageError (exit 2) with close matches if unknown.

        The names ``nvidia-smi``, ``rocm-smi`` and ``xpu-smi`` print work as they are: a leading vendor word
        ("NVIDIA H100 80GB HBM3", "AMD Instinct MI300X", "Tesla V100-SXM2-32GB"), "GeForce", "(R)"/"(TM)" and a
        trailing "Graphics" ("Intel(R) Arc(TM) A770 Graphics") are dropped when the full name is not known itself.
        A memory size picks a configuration (``rtx-4060-ti:16gb``, ``rtx-4060-ti-16gb``, "RTX 4060 Ti 16GB"); a
        product sold in several sizes named without one is judged at its default, and the Target's ``note`` says so.
        """
        key = normalise(name)
        base, colon, size_text = key.rpartition(":")
        if colon:
            size = _parse_size(size_text)
            if size is None or not base:
                raise UsageError(f"GPU {name!r}: after ':' give a memory size such as 16gb (e.g. rtx-4060-ti:16gb)")
            return self._sized(name, self._product(base, name), size)
        found = self._find(key)
        if found is not None:
            kind, ident, matched = found
            if kind == "arch":
                arch = self.archs[ident]
                return Target(label=arch.id, arch=arch, cc=arch.cc)
            gpu = self.gpus[ident]
            return self._target(gpu, self._default_note(gpu) if self._leaves_open(gpu, matched) else None)
        cc = parse_cc_name(name)
        if cc is not None:
            arch_id = self._cc.get(cc)
            if arch_id is None:
                known = ", ".join(f"sm{c.replace('.', '')}" for c in sorted(self._cc, key=lambda c: tuple(map(int, c.split(".")))))
                raise UsageError(f"no known architecture has compute capability {cc} (known: {known})")
            return Target(label=f"sm{cc.replace('.', '')}", arch=self.archs[arch_id], cc=cc)
        for digits in range(1, 5):  # "rtx-4090-48gb": a size this product is not sold in (the shortest size first)
            base, size_digits = key[:-2 - digits], key[-2 - digits:-2]
            if key.endswith("gb") and base and size_digits.isascii() and size_digits.isdigit() and \
                    self._find(base) is not None:
                return self._sized(name, self._product(base, name), float(size_digits))
        import difflib  # only for a name that is not known

        close = difflib.get_close_matches(key, list(self._names), n=5, cutoff=0.6)
        hint = f"; did you mean: {', '.join(dict.fromkeys(self._display.get(c, c) for c in close))}?" if close else ""
        raise UsageError(f"unknown GPU {name!r}{hint} (give a product like h100 or rtx-4090, an architecture "
                         "like hopper, or a compute capability like sm90; `qcheck matrix --list` shows all)")

    def _find(self, key: str) -> tuple[str, str, str] | None:
        """(kind, id, the spelling that matched) for a normalised name, trying what device tools decorate it with."""
        for candidate in _tool_spellings(key):
            if candidate in self._names:
                return (*self._names[candidate], candidate)
            for prefix in _VENDOR_WORDS:
                rest = candidate[len(prefix):]
                if candidate.startswith(prefix) and rest in self._names:
                    return (*self._names[rest], rest)
        return None

    def _product(self, key: str, name: str) -> Gpu:
        found = self._find(key)
        if found is None or found[0] != "gpu":
            what = "an architecture" if found else "not a GPU the catalogue knows"
            raise UsageError(f"GPU {name!r}: a memory size picks a product's configuration, and {key!r} is {what} "
                             "(give a product such as rtx-4060-ti:16gb; `qcheck matrix --list` shows all)")
        return self.gpus[found[1]]

    def _sized(self, name: str, gpu: Gpu, size: float) -> Target:
        """The configuration of ``gpu``'s product with ``size`` GB (the default first when several share it)."""
        members = [self.gpus[i] for i in self.family(gpu.id)]
        if gpu.memory_gib == size:
            return self._target(gpu, None)
        for member in members:
            if member.memory_gib == size:
                return self._target(member, None)
        sold = " and ".join(dict.fromkeys(f"{m.memory_gib:g} GB" for m in members if m.memory_gib is not None))
        raise UsageError(f"GPU {name!r}: the catalogue knows {gpu.id} with {sold or 'no memory size'}, not "
                         f"{size:g} GB (a board with other memory: add a [[gpu]] entry with variant_of = "
                         f"\"{members[0].id}\" to matrices/gpus.toml, or judge the card itself with --gpu auto)")

    def _target(self, gpu: Gpu, note: str | None) -> Target:
        return Target(label=gpu.id, arch=self.archs[gpu.arch], cc=gpu.cc, gpu=gpu.id, note=note)

    def _leaves_open(self, gpu: Gpu, matched: str) -> bool:
        """Whether the name that matched leaves the configuration open: it has no size, and another configuration
        differs in memory only (its names carry a size: "RTX 4060 Ti" is either) or is named by a longer form of it
        ("H100" is also "H100 PCIe"; "H100 SXM" says which)."""
        if _SIZE_IN.search(matched):
            return False
        for member in self.family(gpu.id)[1:]:
            other = self.gpus[member]
            keys = [normalise(n) for n in (other.id, *other.names)]
            if any(_SIZE_IN.search(k) for k in keys[1:]) or any(k.startswith(matched) for k in keys):
                return True
        return False

    def _default_note(self, gpu: Gpu) -> str | None:
        """What a verdict says when a name left the configuration open: the one judged, why, and the others."""
        members = self.family(gpu.id)
        if len(members) < 2 or gpu.id != members[0]:
            return None
        others = [self.gpus[m] for m in members[1:]]
        sizes = [self.gpus[m].memory_gib for m in members]
        listed = ", ".join(f"{o.id} ({o.memory_gib:g} GB)" for o in others if o.memory_gib is not None)
        first = others[0]
        example = f"{gpu.id}:{first.memory_gib:g}gb" if sizes.count(first.memory_gib) == 1 else first.id
        size = f"the {gpu.memory_gib:g} GB configuration" if gpu.memory_gib is not None else "its default"
        return (f"{gpu.id} judged as {size}, its default: {gpu.default_because}; also sold as {listed}: name it, "
                f"e.g. --gpu {example}")

    def variant_for_memory(self, gpu_id: str, total_gib: float) -> str:
        """The configuration of ``gpu_id``'s product whose memory is nearest a measured total (``--gpu auto``)."""
        members = [self.gpus[i] for i in self.family(gpu_id)]
        sized = [m for m in members if m.memory_gib]
        if total_gib <= 0 or not sized:
            return gpu_id
        return min(sized, key=lambda m: abs(math.log(total_gib / float(m.memory_gib or 1)))).id

    def archs_of(self, vendor: str) -> list[Arch]:
        """The vendor's architectures, oldest first."""
        return sorted((a for a in self.archs.values() if a.vendor == vendor), key=lambda a: a.order)

    def gpus_of(self, arch_id: str) -> list[Gpu]:
        """The products of an architecture, in data-file order (for listings and examples)."""
        return [g for g in self.gpus.values() if g.arch == arch_id]

    def smallest_gpu(self, arch_id: str) -> Gpu | None:
        """The product with the least memory on an architecture: the cheapest way to name it."""
        gpus = self.gpus_of(arch_id)
        if not gpus:
            return None
        return min(gpus, key=lambda g: (g.memory_gib if g.memory_gib is not None else float("inf"), g.id))


def _size_text(gib: float) -> str:
    """The normalised size suffix of a name: 16 -> '16gb'."""
    return f"{gib:g}gb"


def _parse_size(text: str) -> float | None:
    """'16gb', '16g', '16', '16gib' -> 16.0 (a whole number of GB, 1-4096); None otherwise."""
    m = re.fullmatch(r"([0-9]{1,4})(?:gb|g|gib)?", text)
    return float(m.group(1)) if m and 0 < int(m.group(1)) <= 4096 else None


def build_gpu_table(raw: dict[str, Any], file: str) -> GpuTable:
    """Validate the parsed ``gpus.toml`` and build the lookup table."""
    fail = Where(file).fail
    for key in raw:
        if key not in ("arch", "gpu", "perf", "unified_memory", "capacity", "speed_engine"):
            fail("unknown-key", f"unknown top-level key {key!r} (allowed: [[arch]], [[gpu]], [[perf]], "
                 "[unified_memory], [capacity], [[speed_engine]])")
    raw_archs = raw.get("arch", [])
    raw_gpus = raw.get("gpu", [])
    if not isinstance(raw_archs, list) or not raw_archs:
        fail("missing-key", "no [[arch]] entries")
    if not isinstance(raw_gpus, list):
        fail("bad-type", "[[gpu]] must be an array of tables")
    names = _Names()
    archs = _build_archs(raw_archs, file, names)
    gpus = _build_gpus(raw_gpus, file, {a.id: a for a in archs}, names)
    table = GpuTable(archs, gpus)
    from qcheck.matrix.gpu_perf import parse_perf

    table.perf, table.unified = parse_perf(raw, file, {g.id for g in gpus}, {a.id for a in archs})
    table.capacity_rules = parse_rules(raw.get("capacity"), file)
    from qcheck.matrix.gpu_perf import parse_speed_engines
    from qcheck.matrix.memory_params import FORMULAS

    table.speed_engines = parse_speed_engines(raw, file, FORMULAS)
    return table


class _Names:
    """Every name (normalised) an arch or product answers to, and its owner: two owners of one name are an error."""

    def __init__(self) -> None:
        self._owners: dict[str, str] = {}

    def claim(self, name: str, owner: str, ctx: Where) -> None:
        key = normalise(name)
        if self._owners.setdefault(key, owner) != owner:
            ctx.fail("duplicate-name", f"name {name!r} is used by both {self._owners[key]} and {owner}")


def _build_archs(raw_archs: list[Any], file: str, names: _Names) -> list[Arch]:
    """The ``[[arch]]`` entries, each vendor's in order (``order`` counts per vendor, oldest first)."""
    archs: list[Arch] = []
    orders: dict[str, int] = {}
    for i, entry in enumerate(raw_archs):
        ctx, ident = _entry("arch", i, entry, ARCH_KEYS, {"id", "vendor", "native_formats", "source"},
                            file, {a.id for a in archs})
        vendor = require_str(entry, "vendor", ctx)
        if vendor not in VENDORS:
            ctx.fail("unknown-vendor", f"vendor {vendor!r} is not one of {', '.join(VENDORS)}")
        ccs = _arch_ccs(entry.get("compute_capability"), vendor, ctx)
        formats = _as_str_list(entry["native_formats"], "native_formats", ctx)
        for f in formats:
            if f not in FORMATS:
                ctx.fail("unknown-format", f"native format {f!r} is not one of {', '.join(FORMATS)}")
        aliases = tuple(_as_str_list(entry.get("aliases", []), "aliases", ctx, allow_empty=True))
        for name in (ident, *aliases):
            names.claim(name, f"arch '{ident}'", ctx)
        explicit = entry.get("explicit_rules", False)
        if not isinstance(explicit, bool):
            ctx.fail("bad-type", "explicit_rules must be true or false")
        orders[vendor] = orders.get(vendor, -1) + 1
        archs.append(Arch(id=ident, vendor=vendor, name=str(entry.get("name") or ident), aliases=aliases, ccs=ccs,
                          native_formats=frozenset(formats), source=require_str(entry, "source", ctx),
                          order=orders[vendor], explicit_rules=explicit))
    return archs


def _arch_ccs(value: Any, vendor: str, ctx: Where) -> tuple[str, ...]:
    """An architecture's compute capabilities ('9.0'); NVIDIA architectures must have them."""
    if value is None:
        if vendor == "nvidia":
            ctx.fail("missing-key", "NVIDIA architectures need compute_capability")
        return ()
    ccs = tuple(_as_str_list(value, "compute_capability", ctx))
    for cc in ccs:
        if not _CC_TEXT.match(cc):
            ctx.fail("bad-type", f"compute_capability {cc!r} must look like '9.0'")
    return ccs


def _build_gpus(raw_gpus: list[Any], file: str, arch_by_id: dict[str, Arch], names: _Names) -> list[Gpu]:
    """The ``[[gpu]]`` entries: each names a known architecture and one of its compute capabilities."""
    gpus: list[Gpu] = []
    for i, entry in enumerate(raw_gpus):
        ctx, ident = _entry("gpu", i, entry, GPU_KEYS, {"id", "names", "arch", "source"}, file,
                            {g.id for g in gpus})
        arch_id = require_str(entry, "arch", ctx)
        arch = arch_by_id.get(arch_id)
        if arch is None:
            ctx.fail("unknown-arch",
                     f"arch {arch_id!r} is not an [[arch]] id (known: {', '.join(arch_by_id)})")
        cc = _gpu_cc(entry.get("compute_capability"), arch, ctx)
        product_names = tuple(_as_str_list(entry["names"], "names", ctx))
        for name in (ident, *product_names):
            names.claim(name, f"gpu '{ident}'", ctx)
        memory = entry.get("memory_gib")
        if memory is not None and (isinstance(memory, bool) or not isinstance(memory, (int, float)) or memory <= 0):
            ctx.fail("bad-type", f"memory_gib must be a positive number, not {memory!r}")
        capacity = parse_capacity(entry["capacity"], ctx) if "capacity" in entry else None
        gpus.append(Gpu(id=ident, names=product_names, arch=arch_id, cc=cc, memory_gib=memory,
                        source=require_str(entry, "source", ctx), capacity=capacity,
                        variant_of=_optional_str(entry, "variant_of", ctx),
                        default_because=_optional_str(entry, "default_because", ctx)))
    _check_families(gpus, file)
    return gpus


def _optional_str(entry: dict[str, Any], key: str, ctx: Where) -> str | None:
    value = entry.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        ctx.fail("bad-type", f"{key} must be a non-empty string")
    return value


def _check_families(gpus: list[Gpu], file: str) -> None:
    """``variant_of`` names another product's default entry (same architecture, not itself a variant); a default
    with variants says why it is the default (``default_because``), and only such a default does."""
    by_id = {g.id: g for g in gpus}
    defaults = {g.variant_of for g in gpus if g.variant_of}
    for gpu in gpus:
        ctx = Where(file, f"gpu '{gpu.id}'")
        if gpu.variant_of is not None:
            base = by_id.get(gpu.variant_of)
            if base is None or base.id == gpu.id or base.variant_of is not None:
                ctx.fail("bad-variant", f"variant_of {gpu.variant_of!r} must be the id of another product's default "
                                        "entry (one without variant_of)")
            if base.arch != gpu.arch:
                ctx.fail("bad-variant", f"variant_of {gpu.variant_of!r}: a configuration of a product has its "
                                        f"architecture ({base.arch}), not {gpu.arch}")
        if (gpu.id in defaults) != (gpu.default_because is not None):
            ctx.fail("bad-variant", "a product with variants says why its default is judged when a name leaves "
                                    "the configuration open (default_because), and only such a product does")


def _gpu_cc(cc: Any, arch: Arch, ctx: Where) -> str | None:
    """A product's compute capability: one of its architecture's; NVIDIA products must have one."""
    if cc is None:
        if arch.vendor == "nvidia":
            ctx.fail("missing-key", "NVIDIA GPUs need compute_capability")
        return None
    if not isinstance(cc, str) or not _CC_TEXT.match(cc):
        ctx.fail("bad-type", f"compute_capability {cc!r} must be a string like '8.9'")
    if cc not in arch.ccs:
        known = ", ".join(arch.ccs) or "none"
        ctx.fail("cc-mismatch", f"compute capability {cc} is not one of arch '{arch.id}' ({known})")
    return cc


def _entry(kind: str, index: int, entry: Any, allowed: set[str], required: set[str], file: str,
           taken: set[str]) -> tuple[Where, str]:
    """The checks every [[arch]]/[[gpu]] entry starts with: a table, known keys, a well-formed unique id."""
    named = isinstance(entry, dict) and entry.get("id")
    ctx = Where(file, f"{kind} #{index + 1}" + (f" '{entry.get('id')}'" if named else ""))
    if not isinstance(entry, dict):
        ctx.fail("bad-type", f"[[{kind}]] entries must be tables")
    check_keys(entry, allowed, required, ctx)
    ident = require_str(entry, "id", ctx)
    if not _ID.match(ident):
        ctx.fail("bad-id", f"id {ident!r} must be lower case letters, digits, '.', '+' or '-'")
    if ident in taken:
        ctx.fail("duplicate-id", f"{kind} {ident!r} is defined twice")
    return ctx, ident


def _as_str_list(value: Any, key: str, ctx: Where, allow_empty: bool = False) -> list[str]:
    items = value if isinstance(value, list) else [value]
    if (not items and not allow_empty) or not all(isinstance(v, str) and v for v in items):
        ctx.fail("bad-type", f"{key!r} must be a string or a non-empty list of strings")
    return items
