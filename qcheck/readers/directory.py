"""Model directories (and Hub repos, through the same FileSet): side files, index, every shard header.

A Hugging Face model directory is ``config.json`` + quantisation side files + one or more
``*.safetensors`` shards, with ``model.safetensors.index.json`` mapping tensors to shards when sharded.
Engines trust the index; a hostile or broken one (a missing shard, a tensor its shard lacks, a path
that climbs out of the directory) is refused here with the shard and tensor named. Directories that
hold GGUF files instead are handed to the GGUF reader; pickle-only directories get a static scan.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from qcheck.errors import InputError
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.model import Checkpoint, SourceFile, TensorInfo, join_tensors, tensor_columns
from qcheck.readers.jsonfile import loads_document, quoted
from qcheck.readers.lfs import is_lfs_pointer, raise_for_pointer
from qcheck.source import FileSet

#: JSON side files read when present (parsed into ``Checkpoint.configs[name]``)
SIDE_FILES = ("config.json", "hf_quant_config.json", "quantize_config.json", "quant_config.json",
              "quantization_config.json", "adapter_config.json")
INDEX_SUFFIX = ".safetensors.index.json"
#: PEFT's adapter weights file (with adapter_config.json); beside a full model it is left out of the shards
ADAPTER_WEIGHTS = "adapter_model.safetensors"
CANONICAL_INDEX = "model.safetensors.index.json"
#: the warning for safetensors weights without config.json (the architecture is then judged unknown)
NO_CONFIG = ("no config.json beside the safetensors weights: the architecture, context length and layer shapes are "
             "unknown, and engines that load safetensors read config.json first (vLLM 0.34.0 refuses a directory with "
             "neither config.json nor Mistral's params.json: 'Could not detect config format', "
             "vllm/transformers_utils/config.py get_config)")
#: llama.cpp's split naming: ``<prefix>-00001-of-00003.gguf`` (LLAMA_SPLIT_PATH format "%s-%05d-of-%05d.gguf")
GGUF_SPLIT = re.compile(r"^(?P<prefix>.*)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


def load_model_dir(fileset: FileSet, limits: Limits = DEFAULT_LIMITS, *, path: str | None = None) -> Checkpoint:
    """Read a whole model directory (or repo): safetensors shards, else one GGUF (set), else pickles."""
    from qcheck.readers.pickle import PICKLE_EXTENSIONS

    display = path or fileset.root
    entries = fileset.list()
    sizes = {e.name: e.size for e in entries}
    top = sorted(name for name in sizes if "/" not in name)
    safetensors = [n for n in top if n.endswith(".safetensors")]
    indexes = [n for n in top if n.endswith(INDEX_SUFFIX)]
    ggufs = [n for n in top if n.lower().endswith(".gguf")]
    pickles = [n for n in top if n.lower().endswith(PICKLE_EXTENSIONS)]

    adapter_weights = [n for n in safetensors if n == ADAPTER_WEIGHTS]
    if adapter_weights and (len(safetensors) > 1 or indexes):
        # a full model with a PEFT adapter beside it: the model is what is checked
        safetensors = [n for n in safetensors if n != ADAPTER_WEIGHTS]
        skipped_adapter = True
    else:
        skipped_adapter = False
    if safetensors or indexes:
        refuse_pickle_decoy(top, display)
        index = _pick_index(indexes)
        checkpoint = load_safetensors_files(fileset, safetensors, limits, path=display, index_name=index,
                                            sizes=sizes)
        if index and len(indexes) > 1:
            checkpoint.warnings.append(f"several safetensors indexes; used {index}, ignored "
                                       f"{', '.join(n for n in indexes if n != index)}")
        if skipped_adapter:
            checkpoint.warnings.append(f"{ADAPTER_WEIGHTS} (a PEFT adapter) beside the model was not read; "
                                       "check the adapter on its own directory")
        if ggufs:
            checkpoint.warnings.append(f"GGUF files beside the safetensors were not read: {_names(ggufs)}")
        if pickles:
            checkpoint.warnings.append(f"pickle files present (never loaded; the safetensors were read): "
                                       f"{_names(pickles)}")
        return checkpoint
    if ggufs:
        return load_gguf_choice(fileset, ggufs, limits, path=display)
    if pickles:
        return load_pickles(fileset, pickles, limits, path=display, sizes=sizes)
    everything = fileset.all_files() if hasattr(fileset, "all_files") else entries
    nested = sorted(e.name for e in everything if "/" in e.name and e.name.lower().endswith((".safetensors", ".gguf")))
    hint = f"; files in subfolders: {_names(nested)} (pass one of them)" if nested else ""
    raise InputError("no checkpoint here: no *.safetensors, *.gguf or pickle weight files" + hint, path=display)


#: the weights transformers ``from_pretrained`` takes from a directory, in its order (modeling_utils
#: ``_get_resolved_checkpoint_files``): safetensors only under these two names, else the pickle names
HF_SAFE_NAMES = ("model.safetensors", "model.safetensors.index.json")
HF_PICKLE_NAMES = ("pytorch_model.bin", "pytorch_model.bin.index.json")


def refuse_pickle_decoy(top: list[str], display: str) -> None:
    """Refuse safetensors that are a decoy beside a pickle an engine would load instead.

    vLLM, SGLang and ExLlama take any ``*.safetensors`` over pickles, but transformers (and what is built
    on it: TensorRT-LLM's and llama.cpp's converters, PEFT) takes safetensors only when they are named
    ``model.safetensors`` or ``model.safetensors.index.json``; otherwise it ``torch.load``s
    ``pytorch_model.bin``. Judging the safetensors would call fine a directory whose
    ``from_pretrained`` runs the pickle, so such a directory is refused like the pickle itself."""
    from qcheck.errors import UnsafeFileError

    names = set(top)
    if names.intersection(HF_SAFE_NAMES):
        return
    pickle_names = [n for n in HF_PICKLE_NAMES if n in names]
    if pickle_names:
        raise UnsafeFileError(
            f"{pickle_names[0]} beside safetensors not named model.safetensors: transformers.from_pretrained (and "
            f"the converters built on it) would torch.load the pickle, not the safetensors; pickles are never "
            f"judged: delete the pickle or save the model as model.safetensors", path=display)


def load_safetensors_files(
    fileset: FileSet,
    shards: list[str],
    limits: Limits = DEFAULT_LIMITS,
    *,
    path: str,
    index_name: str | None = None,
    sizes: dict[str, int | None] | None = None,
) -> Checkpoint:
    """Read side files, the index (if any) and every shard header; check the index against the shards."""
    sizes = dict(sizes or {})
    prefix = _prefix(index_name or (shards[0] if shards else ""))
    checkpoint = Checkpoint(path=path, container="safetensors", revision=fileset.revision)
    read_side_files(fileset, checkpoint, limits, prefix=prefix, sizes=sizes)
    if "config.json" not in checkpoint.configs and "adapter_config.json" not in checkpoint.configs:
        checkpoint.warnings.append(NO_CONFIG)
    weight_map: dict[str, str] | None = None
    if index_name is not None:
        index, size = _read_json(fileset, index_name, limits, sizes)
        checkpoint.configs[_basename(index_name)] = index
        checkpoint.files.append(SourceFile(name=index_name, size_bytes=size, kind="index"))
        weight_map = _weight_map(index, index_name, prefix, fileset, limits)
        listed = sorted(set(weight_map.values()))
        unlisted = [s for s in shards if s not in listed]
        if unlisted:
            checkpoint.warnings.append(f"{len(unlisted)} safetensors file(s) not in {index_name} were not read: "
                                       f"{_names(unlisted)}")
        shards = listed
    if not shards:
        raise InputError("no safetensors shards to read", path=path)
    if len(shards) > limits.max_shards:
        raise InputError(f"{len(shards)} shards, over the limit of {limits.max_shards} (limit max_shards)", path=path)

    owner: dict[str, str] = {}
    per_shard: dict[str, set[str]] = {}
    parts: list[Mapping[str, TensorInfo]] = []
    count = 0
    for shard in shards:
        header = _read_shard(fileset, shard, limits)
        checkpoint.files.append(SourceFile(name=shard, size_bytes=header.file_size, kind="safetensors"))
        for key, value in header.metadata.items():
            checkpoint.metadata.setdefault(key, value)
        checkpoint.warnings.extend(f"{shard}: {w}" for w in header.warnings)
        per_shard[shard] = set(header.tensors)
        if not owner.keys().isdisjoint(header.tensors):  # C-speed; the loop below only names the first one
            name = next(n for n in header.tensors if n in owner)
            raise InputError(f"tensor {quoted(name)} is in both {owner[name]} and {shard} (engines would load "
                             "one or the other)", path=path)
        owner.update(dict.fromkeys(header.tensors, shard))
        parts.append(header.tensors)
        count += len(header.tensors)  # the shards' names are disjoint (checked above)
        if count > limits.max_tensors:
            raise InputError(f"more than {limits.max_tensors} tensors in the model (limit max_tensors)", path=path)
    checkpoint.tensors = join_tensors(parts)  # shard by shard, in order: the columns kept when every shard has them

    if weight_map is not None:
        _check_index(checkpoint, weight_map, per_shard, index_name or "", path)
    return checkpoint


def read_side_files(fileset: FileSet, checkpoint: Checkpoint, limits: Limits, *, prefix: str = "",
                    sizes: dict[str, int | None] | None = None) -> None:
    """Parse the known JSON side files present under ``prefix`` into ``checkpoint.configs``."""
    sizes = sizes if sizes is not None else {}
    for base in SIDE_FILES:
        name = prefix + base
        present = name in sizes if sizes else False
        if not present and not fileset.exists(name):
            continue
        value, size = _read_json(fileset, name, limits, sizes)
        checkpoint.configs[base] = value
        checkpoint.files.append(SourceFile(name=name, size_bytes=size, kind="config"))


class SeveralModelsError(InputError):
    """A directory holds several GGUF models and the target did not say which (``check --gpu`` then tables them)."""


def load_gguf_choice(fileset: FileSet, ggufs: list[str], limits: Limits, *, path: str) -> Checkpoint:
    """One GGUF file or one split set: load it. Several: refuse and list them."""
    groups = gguf_groups(ggufs)
    if len(groups) != 1:
        listing = "; ".join(", ".join(members) if len(members) <= 3 else f"{members[0]} (+{len(members) - 1} "
                            "split parts)" for members in groups.values())
        raise SeveralModelsError(f"{len(groups)} GGUF checkpoints here: {listing}; pass one file (or --all to "
                                 "inspect or check every one)", path=path)
    (members,) = groups.values()
    source = fileset.open(members[0])
    if is_lfs_pointer(source.read_at(0, 64)):
        raise_for_pointer(source)
    from qcheck.readers.gguf import load_gguf

    checkpoint = load_gguf(fileset, members[0], limits)
    checkpoint.path = path
    return checkpoint


def gguf_groups(names: list[str]) -> dict[str, list[str]]:
    """GGUF file names grouped into checkpoints: split parts of one set together, first part first."""
    groups: dict[str, list[str]] = {}
    for name in sorted(names):
        match = GGUF_SPLIT.match(name)
        key = f"{match['prefix']}-of-{match['count']}" if match else name
        groups.setdefault(key, []).append(name)
    return groups


def load_pickles(fileset: FileSet, names: list[str], limits: Limits, *, path: str,
                 sizes: dict[str, int | None] | None = None) -> Checkpoint:
    """Scan pickle weight files statically (never unpickled) and read the side files beside them."""
    from qcheck.readers.pickle import looks_like_pickle, pickle_checkpoint, scan_pickle

    sizes = sizes or {}
    scans = []
    skipped = []
    for name in names:
        source = fileset.open(name)
        head = source.read_at(0, 64)
        if is_lfs_pointer(head):
            raise_for_pointer(source)
        is_pickle = head.startswith((b"PK\x03\x04", b"PK\x05\x06")) or looks_like_pickle(head)
        if not is_pickle and head[:1] != b"\x80":  # protocol 0/1 has no magic: it must parse to STOP
            is_pickle = looks_like_pickle(source.read_at(0, 1 << 20))
        if not is_pickle:
            skipped.append(name)
            continue
        scans.append((name, source.size, scan_pickle(source, limits)))
    if not scans:
        raise InputError(f"no checkpoint here: {_names(skipped)} are not pickles, safetensors or GGUF", path=path)
    side = Checkpoint(path=path, container="pickle")
    read_side_files(fileset, side, limits, prefix=_prefix(names[0]), sizes=sizes)
    checkpoint = pickle_checkpoint(path, scans, configs=side.configs, extra_files=side.files)
    checkpoint.revision = fileset.revision
    if skipped:
        checkpoint.warnings.append(f"not pickles, skipped: {_names(skipped)}")
    return checkpoint


# --- helpers ------------------------------------------------------------------------------------------


def _pick_index(indexes: list[str]) -> str | None:
    if not indexes:
        return None
    return CANONICAL_INDEX if CANONICAL_INDEX in indexes else indexes[0]


def _read_shard(fileset: FileSet, shard: str, limits: Limits):
    from qcheck.readers.safetensors import read_safetensors_header

    source = fileset.open(shard)
    try:
        return read_safetensors_header(source, limits, file=shard)
    finally:
        source.close()


def _read_json(fileset: FileSet, name: str, limits: Limits, sizes: dict[str, int | None]) -> tuple[dict[str, Any], int]:
    data = fileset.read_small(name, limits.max_json_bytes)
    display = _display(fileset, name)
    if len(data) > limits.max_json_bytes:
        raise InputError(f"over the {limits.max_json_bytes}-byte limit for side files (limit max_json_bytes)",
                         path=display)
    return loads_document(data, name=name, limits=limits, path=display), len(data)


def _weight_map(index: dict[str, Any], index_name: str, prefix: str, fileset: FileSet,
                limits: Limits) -> dict[str, str]:
    display = _display(fileset, index_name)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise InputError("index has no weight_map object (tensor name -> shard file)", path=display)
    if len(weight_map) > limits.max_tensors:
        raise InputError(f"weight_map lists {len(weight_map)} tensors, over the limit of {limits.max_tensors}",
                         path=display)
    resolved: dict[str, str] = {}
    checked: dict[str, str] = {}
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str):
            raise InputError(f"weight_map entry for {quoted(tensor)} is not a file name", path=display)
        if shard not in checked:
            if not _safe_relative(shard):
                raise InputError(f"weight_map path {quoted(shard)} (tensor {quoted(tensor)}) escapes the model directory",
                                 path=display)
            full = prefix + shard
            if len(checked) >= limits.max_shards:
                raise InputError(f"weight_map names more than {limits.max_shards} shards", path=display)
            if not fileset.exists(full):
                raise InputError(f"weight_map names shard {quoted(shard)} (tensor {quoted(tensor)}) but the file is missing",
                                 path=display)
            checked[shard] = full
        resolved[tensor] = checked[shard]
    return resolved


def _safe_relative(name: str) -> bool:
    if not name or name.startswith(("/", "\\", "~")) or "\\" in name or ":" in name or "\x00" in name:
        return False
    parts = name.split("/")
    return all(part not in ("", ".", "..") for part in parts)


def _check_index(checkpoint: Checkpoint, weight_map: dict[str, str], per_shard: dict[str, set[str]],
                 index_name: str, path: str) -> None:
    for tensor, shard in weight_map.items():
        if tensor not in per_shard.get(shard, ()):
            actual = checkpoint.tensors.get(tensor)
            elsewhere = f" (it is in {actual.file})" if actual else ""
            raise InputError(f"{index_name} maps tensor {quoted(tensor)} to {shard}, which does not contain it{elsewhere}",
                             path=path)
    unlisted = [name for name in checkpoint.tensors if name not in weight_map]
    if unlisted:
        checkpoint.warnings.append(f"{len(unlisted)} tensor(s) in the shards are not in {index_name} "
                                   f"(engines that follow the index skip them; first: {quoted(unlisted[0])})")
    index = checkpoint.configs.get(_basename(index_name), {})
    meta = index.get("metadata") if isinstance(index, dict) else None
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if total is None:
        return
    from qcheck.typed import as_int

    total = None if isinstance(total, str) else as_int(total, minimum=0)  # JSON numbers only
    if total is None:
        checkpoint.warnings.append(f"{index_name}: metadata.total_size is not a byte count")
        return
    columns = tensor_columns(checkpoint.tensors)
    sizes = list(columns.nbytes) if columns is not None else [t.nbytes for t in checkpoint.tensors.values()]
    if any(s is None for s in sizes):
        return
    actual_total = sum(s for s in sizes if s is not None)
    if int(total) != actual_total:
        checkpoint.warnings.append(f"{index_name}: metadata.total_size is {int(total)} bytes but the shards "
                                   f"hold {actual_total} bytes of tensors")


def _prefix(name: str) -> str:
    return name.rsplit("/", 1)[0] + "/" if "/" in name else ""


def _basename(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _display(fileset: FileSet, name: str) -> str:
    root = str(getattr(fileset, "root", "") or "")
    return f"{root.rstrip('/')}/{name}" if root else name


def _names(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


__all__ = ["SIDE_FILES", "gguf_groups", "load_gguf_choice", "load_model_dir",
           "load_pickles", "load_safetensors_files", "read_side_files"]
