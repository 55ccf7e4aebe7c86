"""The classifier: a ``Checkpoint`` (what the headers say) -> an ``Inspection`` (what it is).

Tensors are the truth, configs are claims: every quantised weight is found from tensor names, dtypes
and packed shapes (``fingerprints.scan_all``), bits and group sizes are recomputed from those shapes,
and the config found (``configs.read_configs``) is read by its family's reader and cross-checked.
Disagreements become ``config-mismatch`` findings and warnings, never crashes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from itertools import chain, compress
from operator import and_
from typing import Any, cast

from qcheck.classify.adapter import apply_adapter, is_adapter
from qcheck.classify.arch import fill_from_config, fill_from_tensors
from qcheck.classify.base import Draft, Hints, QLinear, bits_per_weight
from qcheck.classify.configs import ConfigView, as_int, first, read_configs
from qcheck.classify.dtypes import FLOAT_DTYPES, config_word, container_word, tensor_nbytes
from qcheck.classify.fingerprints import config_family, scan_all
from qcheck.classify.gguf import classify_gguf
from qcheck.classify.kv_scales import check_declared, kv_scales
from qcheck.classify.params import logical_parameters
from qcheck.classify.table import TensorTable
from qcheck.formats import REGISTRY
from qcheck.model import Checkpoint, Inspection, InspectionFinding, Quantization
from qcheck.model_shape import shape_of_checkpoint
from qcheck.readers.jsonfile import paused_gc

__all__ = ["classify", "classify_weights", "unsafe_pickle_message"]

KV_SCALE_SUFFIXES = (".k_scale", ".v_scale", ".kv_scale", "k_proj.output_scale", "v_proj.output_scale")


def classify(checkpoint: Checkpoint) -> Inspection:
    """Classify a checkpoint read by ``qcheck.readers.load_checkpoint`` (headers and side files only)."""
    return classify_weights(checkpoint)[0]


def classify_weights(checkpoint: Checkpoint) -> tuple[Inspection, list[QLinear]]:
    """``classify`` plus every quantised weight found, each with the layout its tensors were recognised as
    (what ``qcheck eval`` simulation dequantises, without recognising the tensors a second time)."""
    with paused_gc():  # many short-lived lists beside 10^5+ long-lived records: no cycles, no collections
        return _classify_weights(checkpoint)


def _classify_weights(checkpoint: Checkpoint) -> tuple[Inspection, list[QLinear]]:
    if checkpoint.container == "pickle":
        insp = _classify_pickle(checkpoint)
        if is_adapter(checkpoint):
            apply_adapter(checkpoint, insp)
        return insp, []
    qlinears: list[QLinear] = []
    table = TensorTable(checkpoint.tensors)
    if checkpoint.container == "gguf":
        insp = classify_gguf(checkpoint)
    else:
        insp, qlinears = _classify_safetensors(checkpoint, table)
    insp.type_stats = type_stats(checkpoint, table)
    if checkpoint.container == "gguf":
        from qcheck.matrix.architectures import note_unknown_gguf_architecture

        note_unknown_gguf_architecture(insp)
    if checkpoint.container == "safetensors" and is_adapter(checkpoint):
        apply_adapter(checkpoint, insp)
    insp.shape = shape_of_checkpoint(checkpoint, insp)  # what memory needs, so it never needs the Checkpoint
    return insp, qlinears


def type_stats(checkpoint: Checkpoint, table: TensorTable) -> list[dict[str, Any]]:
    """Per tensor type: tensor count, stored elements and bytes (None if unknown), largest first (``table``: the
    checkpoint's tensors as columns)."""
    count = Counter(table.dtypes)
    nbytes = table.nbytes()
    if checkpoint.container == "safetensors" and None in nbytes:
        nbytes = [n if n is not None else tensor_nbytes(t) for n, t in zip(nbytes, table.infos, strict=True)]
    elements: dict[str, int] = {}
    size: dict[str, int | None] = {}
    if len(count) == 1:  # one type: the whole columns
        (dtype,) = count
        elements[dtype] = sum(table.numels)
        size[dtype] = None if None in nbytes else sum(nbytes)  # type: ignore[arg-type]
    elif len(count) <= 16:  # a few types (any real checkpoint): C-speed passes per type
        for dtype in count:
            mask = list(map(dtype.__eq__, table.dtypes))
            elements[dtype] = sum(compress(table.numels, mask))
            sizes = list(compress(nbytes, mask))
            size[dtype] = None if None in sizes else sum(sizes)  # type: ignore[arg-type]
    else:
        for dtype, numel, n in zip(table.dtypes, table.numels, nbytes, strict=True):
            elements[dtype] = elements.get(dtype, 0) + numel
            prev = size.get(dtype, 0)
            size[dtype] = None if n is None or prev is None else prev + n
    rows = [{"type": k, "tensors": count[k], "elements": elements[k], "bytes": size[k]} for k in count]
    return sorted(rows, key=lambda r: (-(r["bytes"] or 0), -r["tensors"], r["type"]))


# ------------------------------------------------------------------------------------------ pickle

def _ordered_globals(globals_: list[str]) -> list[str]:
    """Dangerous imports first (they are the point of the message), then the rest, each in file order."""
    from qcheck.readers.pickle import is_dangerous_global

    dangerous = [g for g in globals_ if is_dangerous_global(g)]
    flagged = set(dangerous)  # a hostile pickle may name thousands: no list scans
    return dangerous + [g for g in globals_ if g not in flagged]


def unsafe_pickle_message(globals_: list[str], limit: int = 8) -> str:
    """The one-line explanation for a pickle checkpoint (also the CLI's stderr line after the path)."""
    ordered = _ordered_globals(globals_)
    shown = ", ".join(ordered[:limit]) + (f", ... ({len(ordered) - limit} more)" if len(ordered) > limit else "")
    return (f"pickle checkpoint: not statically verifiable, never unpickled (imports: {shown or 'none found'}); "
            "convert it to safetensors")


def _classify_pickle(ckpt: Checkpoint) -> Inspection:
    insp = Inspection(path=ckpt.path, container="pickle", files=list(ckpt.files), revision=ckpt.revision,
                      size_bytes=ckpt.size_bytes or None)
    insp.quantization = Quantization(method="unknown")
    insp.pickle_globals = _ordered_globals(list(ckpt.pickle_globals))
    insp.warnings = list(ckpt.warnings)
    insp.findings.append(InspectionFinding("unsafe-pickle", ckpt.path, unsafe_pickle_message(ckpt.pickle_globals)))
    view = read_configs(ckpt)
    fill_from_config(insp, view.model)
    return insp


# ------------------------------------------------------------------------------------- safetensors

def _hints(view: ConfigView, family: str | None) -> Hints:
    """Bits/group values scanners need where shapes alone are ambiguous (a family may read its own)."""
    fam = REGISTRY.family(family) if family else None
    if fam is not None and fam.hints is not None:
        return fam.hints(view)
    q = view.quant or {}
    side = next(iter(view.side.values()), {})
    hints = Hints(bits=as_int(first(q, "bits", "w_bit")) or as_int(first(side, "bits", "w_bit")),
                  group_size=as_int(first(q, "group_size", "q_group_size")) or as_int(first(side, "group_size",
                                                                                              "q_group_size")))
    groups = q.get("config_groups")
    if isinstance(groups, dict):  # compressed-tensors: the first group's weight args
        for scheme in groups.values():
            w = scheme.get("weights") if isinstance(scheme, dict) else None
            if isinstance(w, dict):
                hints.bits = hints.bits or as_int(w.get("num_bits"))
                hints.group_size = hints.group_size or as_int(w.get("group_size"))
                break
    g = q.get("global_quant_config")
    if isinstance(g, dict) and isinstance(g.get("weight"), dict):  # Quark
        hints.bits = hints.bits or {"int4": 4, "uint4": 4, "int8": 8}.get(str(g["weight"].get("dtype")).lower())
        hints.group_size = hints.group_size or as_int(g["weight"].get("group_size"))
    dynamic = q.get("dynamic") if isinstance(q.get("dynamic"), dict) else side.get("dynamic")
    if isinstance(dynamic, dict):  # GPTQModel "+:regex" overrides are regexes; exact-name ones still help
        for key, value in dynamic.items():
            if isinstance(key, str) and isinstance(value, dict) and not key.startswith("-:"):
                hints.overrides[key.removeprefix("+:")] = (as_int(value.get("bits")), as_int(value.get("group_size")))
    return hints


def _majority(qlinears: list[QLinear]) -> tuple[str | None, dict[str, int]]:
    """The method holding the most logical weight elements, and every method's element count."""
    shares: Counter[str] = Counter()
    for q in qlinears:
        shares[q.method] += q.logical if q.logical is not None else 1
    if not shares:
        return None, {}
    return shares.most_common(1)[0][0], dict(shares.most_common())


def _mode(values: list[Any]) -> Any:
    """The most common non-null value (lists compared as tuples): the layer-wide answer despite odd layers."""
    values = [v for v in values if v is not None]
    if not values:
        return None
    return Counter(map(lambda v: tuple(v) if isinstance(v, list) else v, values)).most_common(1)[0][0]


def _apply_family(family: str, view: ConfigView, draft: Draft, tensor_method: str | None) -> None:
    """Let the family's own reader say what its config claims (``config_family`` chose the family)."""
    if family == "unknown-method":
        draft.config_method = view.quant_method
        draft.expected_method = "unknown"
        draft.warn(f"{view.quant_where}: unknown quant_method {view.quant_method!r}; classified from the tensors")
        return
    fam = REGISTRY.family(family)
    if fam is not None and fam.reader is not None:
        fam.reader(view, draft, family, tensor_method)


def _plain_dtype(table: TensorTable, claimed: set[str]) -> str | None:
    """The float dtype holding the most elements of 2-D ``*.weight`` tensors (else of any float tensor)."""
    if not claimed and "plain_dtype" in table.memo:
        return cast("str | None", table.memo["plain_dtype"])
    rows = _kept(table, claimed, lambda d: d in FLOAT_DTYPES)
    dtypes, numels, ndims, keys, names = table.upper, table.numels, table.ndims, table.keys(), table.names
    if len(rows) != len(names):  # some left out: the kept rows of each column
        dtypes, keys, names = ([col[i] for i in rows] for col in (dtypes, keys, names))
        numels, ndims = ([col[i] for i in rows] for col in (numels, ndims))
    # 2-D "*.weight": last component "weight" (a tensor named just "weight" has no dot: not one of them)
    is_weight = list(map(and_, map((2).__eq__, ndims), map("weight".__eq__, keys)))
    if "weight" in table.tensors:
        is_weight = [w and n != "weight" for w, n in zip(is_weight, names, strict=True)]
    # the Counters are filled in order of first occurrence, as a loop over the tensors would: ties go to it
    anything: Counter[str] = Counter()
    weights: Counter[str] = Counter()
    firsts: list[tuple[int, str, int]] = []
    kinds = set(dtypes)
    for dtype in sorted(kinds, key=dtypes.index):
        if len(kinds) == 1:  # one dtype: every row
            anything[dtype] = sum(numels)
            mask = is_weight
        else:
            mask = list(map(dtype.__eq__, dtypes))
            anything[dtype] = sum(compress(numels, mask))
            mask = list(map(and_, mask, is_weight))
        if True in mask:
            firsts.append((mask.index(True), dtype, sum(compress(numels, mask))))
    for _, dtype, total in sorted(firsts):
        weights[dtype] = total
    pick = weights or anything
    result = container_word(pick.most_common(1)[0][0]) if pick else None
    if not claimed:
        table.memo["plain_dtype"] = result
    return result


def _kept(table: TensorTable, claimed: set[str], dtype_ok: Callable[[str], bool]) -> Sequence[int]:
    """Indexes, in tensor order, of tensors whose upper-cased dtype passes, neither side tensors nor claimed."""
    present = set(table.upper)
    wanted = [d for d in present if dtype_ok(d)]
    if not wanted:
        return []
    side, names = table.side, table.names
    if len(wanted) == len(present):
        rows: Sequence[int] = range(len(names))
    else:
        rows = sorted(chain.from_iterable(compress(range(len(names)), map(d.__eq__, table.upper)) for d in wanted))
    if claimed or True in side:
        return [i for i in rows if not side[i] and names[i] not in claimed]
    return rows


def _unclaimed_packed(table: TensorTable, claimed: set[str]) -> list[str]:
    """Weights stored in integer/FP8/FP4 dtypes that no scanner explained (an unknown layout)."""
    ndims, names = table.ndims, table.names
    return [names[i] for i in _kept(table, claimed, lambda d: d not in (*FLOAT_DTYPES, "BOOL")) if ndims[i] >= 2]


def _classify_safetensors(ckpt: Checkpoint, table: TensorTable) -> tuple[Inspection, list[QLinear]]:
    view = read_configs(ckpt)
    family = config_family(view)
    hints = _hints(view, family)
    qlinears = scan_all(ckpt.tensors, ckpt.metadata, hints, table)
    draft = Draft(tensors=ckpt.tensors, metadata=ckpt.metadata, qlinears=qlinears, config_where=view.quant_where)
    tensor_method, shares = _majority(qlinears)
    if family is not None:
        _apply_family(family, view, draft, tensor_method)
    if family is None and qlinears:
        # no config: what the layouts alone prove about the producer and activations
        producers = Counter(q.producer for q in qlinears if q.method == tensor_method and q.producer)
        draft.producer = producers.most_common(1)[0][0] if producers else None
        if ckpt.metadata.get("format") == "mlx" and tensor_method == "mlx":
            draft.producer = "mlx-lm"
        draft.warn("no quantization config found; classified from tensor names, dtypes and shapes")
    claimed = {n for q in qlinears for n in q.tensors}

    method = _resolve_method(ckpt, table, view, draft, tensor_method, shares)
    insp = Inspection(path=ckpt.path, container="safetensors", files=list(ckpt.files), revision=ckpt.revision)
    insp.warnings = list(ckpt.warnings)
    fill_from_config(insp, view.model)
    fill_from_tensors(insp, ckpt.tensors, table)
    insp.tensor_count = len(ckpt.tensors)
    insp.size_bytes = ckpt.size_bytes or None
    insp.dtype = _plain_dtype(table, claimed) or config_word(first(view.model, "torch_dtype", "dtype"))
    params, unknown = logical_parameters(ckpt.tensors, qlinears, table)
    insp.parameters = params if ckpt.tensors else None
    if not ckpt.tensors:
        draft.warn("no tensors were found: nothing to classify beyond the config")
    if unknown:
        draft.warn(f"unpacked size unknown for {len(unknown)} quantised weights (e.g. {unknown[0]}); "
                   "the parameter count is a lower bound")
    insp.quantization = _quantization(ckpt, table, view, draft, method)
    insp.warnings.extend(w for w in draft.warnings if w not in insp.warnings)
    insp.findings.extend(draft.findings)
    return insp, qlinears


def _resolve_method(ckpt: Checkpoint, table: TensorTable, view: ConfigView, draft: Draft,
                    tensor_method: str | None, shares: dict[str, int]) -> str:
    """Tensors decide; the config is checked against them."""
    expected = draft.expected_method
    where = draft.config_where or ("hf_quant_config.json" if view.hf_quant else "config")
    if tensor_method is None:
        odd = _unclaimed_packed(table, set())
        if expected and expected not in ("none", "unknown"):
            if odd:
                draft.warn(f"{where} says {expected}, but no tensor matches its layout (e.g. {odd[0]} is "
                           f"{ckpt.tensors[odd[0]].dtype}); reported as the config says")
                return expected
            draft.mismatch(where, f"config says {expected}, but every weight is stored unquantised "
                                  f"({_plain_dtype(table, set()) or 'float'})")
            return "none"
        if odd:
            draft.warn(f"weights in non-float dtypes that match no known layout (e.g. {odd[0]}: "
                       f"{ckpt.tensors[odd[0]].dtype}{list(ckpt.tensors[odd[0]].shape)})")
            return "unknown"
        return expected or "none"
    if expected and expected != tensor_method and expected != "unknown":
        draft.mismatch(where, f"config says {expected}, but the tensors are {tensor_method} "
                              f"({_example(draft, tensor_method)})")
        _distrust(draft)
    elif expected == "unknown" and draft.config_method:
        draft.warn(f"quant_method {draft.config_method!r} classified as {tensor_method} from its tensors")
    if len(shares) > 1:
        total = sum(shares.values()) or 1
        rest = ", ".join(f"{m} {100 * n / total:.1f}%" for m, n in shares.items() if m != tensor_method)
        draft.warn(f"mixed precision: {tensor_method} holds {100 * shares[tensor_method] / total:.1f}% of quantised "
                   f"weights by elements; also {rest}")
    elif draft.declared_methods and len(set(draft.declared_methods)) > 1:
        others_ = [m for m in draft.declared_methods if m != tensor_method]
        draft.warn(f"config declares other schemes ({', '.join(others_)}) that no tensor uses")
    return tensor_method


def _distrust(draft: Draft) -> None:
    """The config describes another method: keep only what is method-independent (excluded modules,
    KV cache, the raw method string) and let the tensors speak for the rest."""
    draft.expected_bits = draft.expected_group = None
    draft.expected_block = None
    draft.producer = draft.activation_dtype = draft.format = draft.weight_dtype = draft.scale_granularity = None
    draft.activation_scheme = None
    draft.zero_point = draft.act_order = None
    draft.expected_method = None


def _example(draft: Draft, method: str) -> str:
    q = next(q for q in draft.qlinears if q.method == method)
    t = draft.tensors[q.tensors[0]]
    return f"{t.name}: {t.dtype}{list(t.shape)}"


def _sane(draft: Draft) -> None:
    """Config numbers that cannot be real (0-bit, negative groups, 3-D blocks) are dropped, not reported."""
    if not isinstance(draft.expected_bits, (int, float)) or not 0 < draft.expected_bits <= 64:
        draft.expected_bits = None
    if draft.expected_group is not None and not (draft.expected_group > 0 or draft.expected_group == -1):
        draft.expected_group = None
    if draft.expected_block is not None and (len(draft.expected_block) != 2 or min(draft.expected_block) <= 0):
        draft.expected_block = None


def _quantization(ckpt: Checkpoint, table: TensorTable, view: ConfigView, draft: Draft, method: str) -> Quantization:
    _sane(draft)
    q = Quantization(method=method)
    q.tensor_types = dict(Counter(table.dtypes).most_common())  # ckpt.dtype_histogram(), from the column
    q.producer = draft.producer
    q.excluded = list(draft.excluded)
    q.format = draft.format
    q.config_method = draft.config_method
    q.kv_cache_dtype = draft.kv_cache_dtype or _kv_from_tensors(table)
    q.kv_scales = kv_scales(table, draft)
    check_declared(q.kv_scales, q.kv_cache_dtype, draft)
    if method == "none":
        q.weight_dtype = _plain_dtype(table, set())
        return q
    mine = draft.of_method(method)
    q.activation_dtype = draft.activation_dtype
    q.activation_scheme = draft.activation_scheme if draft.activation_dtype else None
    if not mine:  # reported as the config says, nothing to measure
        q.weight_bits = int(draft.expected_bits) if draft.expected_bits else None
        q.group_size = draft.expected_group
        q.block_size = draft.expected_block
        q.weight_dtype = draft.weight_dtype
        q.zero_point, q.act_order, q.scale_granularity = draft.zero_point, draft.act_order, draft.scale_granularity
        return q
    bits = _mode([x.bits for x in mine if x.bits is not None and 0 < x.bits <= 64])
    group = _mode([x.group_size for x in mine if x.group_size is not None and (x.group_size > 0 or x.group_size == -1)])
    if group is None and any(x.whole_row for x in mine):
        group = -1  # every layer has one scale per output row: per-channel
    block = _mode([x.block_size for x in mine if x.block_size and len(x.block_size) == 2 and min(x.block_size) > 0])
    gran = _mode([x.granularity for x in mine])
    where = draft.config_where or "config"
    if draft.expected_bits is not None and bits is not None and float(bits) != float(draft.expected_bits):
        draft.mismatch(where, f"config says {draft.expected_bits}-bit weights, but packed tensor shapes give "
                              f"{bits}-bit ({mine[0].name})")
    if draft.expected_group is not None and group is not None and draft.expected_group != group:
        draft.mismatch(where, f"config says group_size {draft.expected_group}, but tensor shapes give "
                              f"{group} ({mine[0].name})")
    if draft.expected_block and block and list(block) != list(draft.expected_block):
        draft.mismatch(where, f"config says block size {draft.expected_block}, but scale shapes give {list(block)} "
                              f"({mine[0].name})")
    if isinstance(bits, float) and bits.is_integer():
        bits = int(bits)
    q.weight_bits = bits if isinstance(bits, int) else None
    fmt = REGISTRY.get(method)
    if fmt is not None and fmt.bits_vary_per_layer:
        distinct = {x.bits for x in mine}
        q.weight_bits = bits if len(distinct) == 1 and isinstance(bits, int) else None
    q.group_size = group if gran not in ("per-tensor", "block") else None
    if gran == "per-channel" or (group == -1 and gran == "group"):
        q.group_size = -1
        gran = "per-channel"
    q.block_size = list(block) if block else (draft.expected_block if gran == "block" else None)
    q.scale_granularity = gran or draft.scale_granularity
    q.weight_dtype = draft.weight_dtype or _mode([x.weight_dtype for x in mine])
    q.scale_dtype = _mode([x.scale_dtype for x in mine])
    zp = [x.zero_point for x in mine if x.zero_point is not None]
    q.zero_point = draft.zero_point if draft.zero_point is not None else (any(zp) if zp else None)
    q.act_order = draft.act_order
    if q.activation_dtype is None and draft.expected_method is None:
        q.activation_dtype, q.activation_scheme = _activation_from_tensors(method, mine)
    if q.producer is None:
        producers = Counter(x.producer for x in mine if x.producer)
        q.producer = producers.most_common(1)[0][0] if producers else None
    nbytes = 0
    elements = 0
    for x in mine:
        if x.logical is None:
            continue
        sizes = [tensor_nbytes(ckpt.tensors[n]) for n in x.tensors if n in ckpt.tensors]
        if any(s is None for s in sizes):
            continue
        nbytes += sum(s or 0 for s in sizes)
        elements += x.logical
    q.bits_per_weight = bits_per_weight(nbytes, elements)
    return q


def _activation_from_tensors(method: str, mine: list[QLinear]) -> tuple[str | None, str | None]:
    """Without a config: what the format's layout proves about activations (``Format.activation_by_producer``,
    e.g. DeepSeek block FP8 quantises them per token-group of 128), else a stored activation scale means
    the format's static activation quantisation (``Format.activation_if_input_scale``)."""
    fmt = REGISTRY.get(method)
    if fmt is None:
        return None, None
    for x in mine:
        if x.producer is not None and x.producer in fmt.activation_by_producer:
            return fmt.activation_by_producer[x.producer]
    if fmt.activation_if_input_scale is not None and any(x.input_scale for x in mine):
        return fmt.activation_if_input_scale
    return None, None


def _kv_from_tensors(table: TensorTable) -> str | None:
    """FP8 KV-cache scales stored per layer (``k_scale``/``v_scale``; Quark ``k_proj.output_scale``)."""
    found = table.select(lasts=("k_scale", "v_scale", "kv_scale", "output_scale"))
    if any(n.endswith(KV_SCALE_SUFFIXES) for n in found):
        return "float8_e4m3"
    return None
