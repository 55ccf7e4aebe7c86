"""Choose which files of a repo make the checkpoint: one GGUF quant (all its shards), or the safetensors set.

A GGUF repo usually holds one file per quant (``Qwen3-8B-Q4_K_M.gguf``), sometimes split
(``Q4_K_M/Qwen3-8B-Q4_K_M-00001-of-00002.gguf``, the llama.cpp ``gguf-split`` naming) and often a vision
projector (``mmproj-*.gguf``) that is not a model on its own. A quant selector matches a name part
case-insensitively and whole (``Q4_K`` does not match ``Q4_K_M``), as llama.cpp's ``-hf repo:quant`` does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from qcheck.errors import AmbiguousTargetError, InputError

SHARD_RE = re.compile(r"^(?P<prefix>.*?)-(?P<shard>\d{5})-of-(?P<total>\d{5})\.gguf$", re.IGNORECASE)
# llama.cpp quant labels (tools/quantize/quantize.cpp) plus the common vendor prefixes (unsloth "UD-").
_QUANT_RE = re.compile(
    r"(?i)(?:^|[-._/])((?:UD-)?(?:I?Q[1-8](?:_[0-9A-Z]+)*|BF16|F16|F32|FP16|FP32|MXFP4(?:_MOE)?|TQ[12]_0))(?=$|[-./])")


@dataclass(frozen=True)
class GgufChoice:
    """One GGUF model in a repo: its label (quant name or file stem), its files in shard order, total bytes."""

    label: str
    names: tuple[str, ...]
    size: int | None

    @property
    def first(self) -> str:
        return self.names[0]


def is_projector(name: str) -> bool:
    """Multimodal projectors and similar companions that are not a language model on their own."""
    base = name.rsplit("/", 1)[-1].lower()
    return base.startswith("mmproj") or "-mmproj" in base or base.startswith(("imatrix", "ggml-vocab"))


def quant_label(name: str) -> str | None:
    """The quant name in a GGUF file name (``Q4_K_M``, ``UD-Q4_K_XL``, ``BF16``), upper-cased, or None."""
    base = name.rsplit("/", 1)[-1]
    m = SHARD_RE.match(base)
    stem = m["prefix"] if m else base[:-5] if base.lower().endswith(".gguf") else base
    found = _QUANT_RE.findall(stem)
    return found[-1].upper() if found else None


def gguf_choices(files: dict[str, int | None]) -> list[GgufChoice]:
    """Group a repo's .gguf files into models (split shards together), projectors left out, sorted by name."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for name in files:
        if not name.lower().endswith(".gguf") or is_projector(name):
            continue
        folder, _, base = name.rpartition("/")
        m = SHARD_RE.match(base)
        key = f"{folder}/{m['prefix']}" if m else name
        groups.setdefault(key, []).append((int(m["shard"]) if m else 0, name))
    choices = []
    for key, members in groups.items():
        names = tuple(n for _, n in sorted(members))
        sizes = [files.get(n) for n in names]
        total = None if any(s is None for s in sizes) else sum(s or 0 for s in sizes)
        label = quant_label(names[0]) or key.rsplit("/", 1)[-1].removesuffix(".gguf")
        choices.append(GgufChoice(label=label, names=names, size=total))
    return sorted(choices, key=lambda c: c.names[0])


def _matches(selector: str, name: str) -> bool:
    sel = re.escape(selector.lower())
    return re.search(rf"(?:^|[-._/]){sel}(?=$|[-./])", name.lower()) is not None


def select_gguf(choices: list[GgufChoice], selector: str, where: str) -> list[GgufChoice]:
    """The GGUF models a quant selector names: an exact label match first, else whole-part name matches."""
    exact = [c for c in choices if c.label.lower() == selector.lower()]
    if exact:
        return exact
    return [c for c in choices if any(_matches(selector, n) for n in c.names)]


def describe_choices(choices: list[GgufChoice]) -> str:
    def gb(size: int | None) -> str:
        if size is None:
            return ""
        return f" ({size / 1e9:.1f} GB)" if size >= 1e9 else f" ({size / 1e6:.0f} MB)"

    return ", ".join(f"{c.label}{gb(c.size)}" for c in choices)


#: at most this many sub-folder variants of one repo are read
MAX_VARIANT_FOLDERS = 64
#: at most this many safetensors shards per sub-folder variant
MAX_VARIANT_SHARDS = 256


def variant_folders(files: dict[str, int | None]) -> dict[str, list[str]]:
    """Sub-folders that each hold a safetensors model (a ``config.json`` and ``*.safetensors`` directly in them:
    ``fp8/``, ``awq/``, ``gptq-int4/`` ...), mapped to the files to read (the shards, and the index if any), when
    the repo has no weights at its top level; at most ``MAX_VARIANT_FOLDERS``, each at most
    ``MAX_VARIANT_SHARDS`` shards: a folder with more is an ``InputError`` (reading only some of its shards would
    understate the model's size), and its index is always kept."""
    if any("/" not in n and n.lower().endswith((".safetensors", ".gguf")) for n in files):
        return {}
    by_folder: dict[str, list[str]] = {}
    configs = {n.rsplit("/", 1)[0] for n in files if "/" in n and n.rsplit("/", 1)[1] == "config.json"}
    for name in sorted(files):
        if "/" not in name:
            continue
        folder, base = name.rsplit("/", 1)
        if folder not in configs or folder.startswith(".") or "/." in folder:
            continue
        if base.lower().endswith(".safetensors") or base == "model.safetensors.index.json":
            if folder not in by_folder and len(by_folder) >= MAX_VARIANT_FOLDERS:
                continue
            members = by_folder.setdefault(folder, [])
            members.append(name)
            if len(members) > MAX_VARIANT_SHARDS + 1:  # the shards and the index
                raise InputError(f"sub-folder {folder}/ holds more than {MAX_VARIANT_SHARDS} safetensors shards, over "
                                 "the limit for one variant of a repo of variants; name one of its files to read it "
                                 "on its own")
    return {f: m for f, m in by_folder.items() if any(n.lower().endswith(".safetensors") for n in m)}


def pick(files: dict[str, int | None], selector: str | None, repo: str, *, all_models: bool = False
         ) -> list[list[str] | None]:
    """The checkpoints to read: each a list of file names, or None for "the safetensors model directory".

    With no selector: the safetensors model if there is one, else the only GGUF model; several GGUF models are an
    AmbiguousTargetError listing them unless ``all_models`` (every one is returned). A selector names a file or a
    quant.
    """
    choices = gguf_choices(files)
    if selector:
        if selector in files:
            if selector.lower().endswith(".gguf"):
                for c in choices:
                    if selector in c.names:
                        return [list(c.names)]
            return [[selector]]
        if selector.lower().endswith((".gguf", ".safetensors", ".json", ".bin", ".pt", ".pth")):
            similar = [n for n in files if n.rsplit("/", 1)[-1].lower() == selector.rsplit("/", 1)[-1].lower()]
            hint = f"; did you mean {similar[0]}?" if similar else ""
            from qcheck.hub.errors import NotFoundError

            raise NotFoundError(f"file {selector!r} not found in {repo}{hint}")
        found = select_gguf(choices, selector, repo)
        if not found:
            from qcheck.hub.errors import NotFoundError

            listing = f"; its GGUF files: {describe_choices(choices)}" if choices else "; it has no GGUF files"
            raise NotFoundError(f"no GGUF quant {selector!r} in {repo}{listing}")
        if len(found) > 1 and not all_models:
            raise AmbiguousTargetError(
                f"{repo}:{selector} matches {len(found)} GGUF models: {describe_choices(found)}; name one file "
                f"({repo}:{found[0].first})")
        return [list(c.names) for c in found]
    top_safetensors = [n for n in files if "/" not in n and n.lower().endswith(".safetensors")]
    if top_safetensors:
        return [None]
    if len(choices) == 1:
        return [list(choices[0].names)]
    if choices:
        if all_models:
            return [list(c.names) for c in choices]
        raise AmbiguousTargetError(
            f"{repo} holds {len(choices)} GGUF models: {describe_choices(choices)}; pick one with "
            f"{repo}:{choices[0].label} (or a file name), or pass --all to inspect or check every one")
    if any("/" not in n and n.lower().endswith((".bin", ".pt", ".pth", ".ckpt")) for n in files):
        return [None]  # pickles: the readers detect them and refuse to load them
    nested = [n for n in files if n.lower().endswith(".safetensors")]
    variants = variant_folders(files)
    if variants and all_models:
        return [names for names in variants.values()]
    if nested:
        folders = sorted({n.rsplit("/", 1)[0] for n in nested})
        if len(variants) >= 2:
            raise AmbiguousTargetError(
                f"{repo} holds {len(variants)} safetensors models in sub-folders ({', '.join(list(variants)[:5])}); "
                f"pick one with {repo}:{next(iter(variants.values()))[0]}, or pass --all (or --gpu G for the "
                "which-quant-fits table)")
        raise AmbiguousTargetError(f"{repo} has safetensors files only in sub-folders ({', '.join(folders[:5])}); "
                                   f"name one file, e.g. {repo}:{nested[0]}")
    from qcheck.hub.errors import NotFoundError

    raise NotFoundError(f"{repo} has no GGUF, safetensors or PyTorch checkpoint files")
