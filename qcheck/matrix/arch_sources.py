"""Parsers for the engines' own model registries: source text in, architecture names out.

Used by ``matrices/tools/extract_architectures.py`` (which reads released packages to generate
``matrices/architectures/``) and by ``--engine NAME=installed`` (which reads the installed engine's files the
same way, without importing it). Pure functions over text: no engine is imported, nothing is executed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator


def _const_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


#: registry dicts that do not list loadable models: removed ones (with the last version) and out-of-tree plugins
_VLLM_NOT_LOADED = ("PREVIOUSLY_SUPPORTED", "OOT_SUPPORTED", "SUBPROCESS")


def _vllm_kind(dict_name: str) -> str | None:
    """The kind of model a registry dict lists (None: the dict lists no model vLLM loads)."""
    name = dict_name.upper()
    if any(n in name for n in _VLLM_NOT_LOADED):
        return None
    for needle, kind in (("MULTIMODAL", "multimodal"), ("EMBEDDING", "embedding"), ("LATE_INTERACTION", "embedding"),
                         ("CROSS_ENCODER", "classifier"), ("CLASSIFICATION", "classifier"),
                         ("SPECULATIVE", "speculative"), ("REWARD", "reward"), ("TRANSCRIPTION", "multimodal"),
                         ("TRANSFORMERS", "text"), ("TEXT_GENERATION", "text"), ("GENERATION", "text")):
        if needle in name:
            return kind
    return "text" if name == "_MODELS" else "other"


def parse_vllm_registry(text: str) -> dict[str, str]:
    """{HF architecture class: kind} from vLLM's registry.py (or the older models/__init__.py).

    Every module-level ``_..._MODELS = {...}`` dict with string keys counts, except ``_PREVIOUSLY_SUPPORTED_MODELS``
    (removed architectures) and ``_OOT_SUPPORTED_MODELS`` (served by out-of-tree plugins); ``**other`` merges
    are the other dicts' entries and are read from those dicts themselves.
    """
    out: dict[str, str] = {}
    for node in ast.parse(text).body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            if not (isinstance(target, ast.Name) and re.fullmatch(r"_[A-Z0-9_]*MODELS", target.id)):
                continue
            if not isinstance(value, ast.Dict):
                continue
            kind = _vllm_kind(target.id)
            if kind is None:
                continue
            for key in value.keys:
                name = _const_str(key) if key is not None else None
                if name:
                    out.setdefault(name, kind)
    return out


_TRANSFORMERS_KIND = (
    ("IMAGE_TEXT_TO_TEXT", "multimodal"), ("VISION_2_SEQ", "multimodal"), ("MULTIMODAL", "multimodal"),
    ("SEQ_TO_SEQ_CAUSAL_LM", "encoder-decoder"), ("CAUSAL_LM", "text"), ("SPEECH", "multimodal"),
    ("TEXT_ENCODING", "embedding"), ("SEQUENCE_CLASSIFICATION", "classifier"), ("MASKED_LM", "embedding"),
)


def _kind_mappings(text: str) -> Iterator[tuple[int, str, ast.AST]]:
    """(rank in ``_TRANSFORMERS_KIND``, kind, mapping value) of modeling_auto.py's ``MODEL_*_MAPPING_NAMES`` whose name
    says a kind (heads such as token classification or QA say nothing about loading a language model)."""
    for node in ast.parse(text).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        name = node.targets[0].id
        if not re.fullmatch(r"MODEL_[A-Z0-9_]*MAPPING_NAMES", name):
            continue
        found = next(((i, k) for i, (needle, k) in enumerate(_TRANSFORMERS_KIND) if needle in name), None)
        if found is not None:
            yield found[0], found[1], node.value


def parse_transformers_modeling(text: str) -> dict[str, str]:
    """{HF class: kind} from modeling_auto.py's ``MODEL_*_MAPPING_NAMES`` (values are class names or tuples)."""
    out: dict[str, str] = {}
    for _, kind, value in _kind_mappings(text):
        for _, cls in _pairs(value):
            for c in cls:
                out.setdefault(c, kind)
    return out


def parse_transformers_model_type_kinds(text: str) -> dict[str, str]:
    """{model_type: kind} from modeling_auto.py's ``MODEL_*_MAPPING_NAMES`` keys: of the mappings naming a model_type,
    the kind that comes first in ``_TRANSFORMERS_KIND`` (a model_type with a multimodal mapping is multimodal even if
    a causal-LM mapping names it too: ``nemo_speechlm`` is a speech model)."""
    best: dict[str, tuple[int, str]] = {}
    for rank, kind, value in _kind_mappings(text):
        for model_type, _ in _pairs(value):
            if model_type not in best or rank < best[model_type][0]:
                best[model_type] = (rank, kind)
    return {t: k for t, (_, k) in best.items()}


def parse_transformers_config(*texts: str) -> set[str]:
    """The ``model_type`` values of ``CONFIG_MAPPING_NAMES``, from configuration_auto.py and (transformers >= 5.8,
    where the generated mapping moved) auto_mappings.py: every module-level assignment, including
    ``OrderedDict(**{...}, **CONFIG_MAPPING_NAMES)``, and every ``CONFIG_MAPPING_NAMES.update({...})``."""
    out: set[str] = set()
    for text in texts:
        for node in ast.parse(text).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == "CONFIG_MAPPING_NAMES"):
                out.update(k for k, _ in _pairs(node.value))
                if isinstance(node.value, ast.Call):
                    for kw in node.value.keywords:
                        if kw.arg is None:
                            out.update(k for k, _ in _pairs(kw.value))
            elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                  and isinstance(node.value.func, ast.Attribute) and node.value.func.attr == "update"
                  and isinstance(node.value.func.value, ast.Name) and node.value.func.value.id == "CONFIG_MAPPING_NAMES"
                  and node.value.args):
                out.update(k for k, _ in _pairs(node.value.args[0]))
    return out


def _pairs(value: ast.AST) -> Iterable[tuple[str, list[str]]]:
    """(key, [class names]) pairs from ``OrderedDict([(k, v), ...])`` or ``{k: v}``."""
    items: list[tuple[ast.AST, ast.AST]] = []
    if isinstance(value, ast.Call) and value.args and isinstance(value.args[0], (ast.List, ast.Tuple)):
        for elt in value.args[0].elts:
            if isinstance(elt, ast.Tuple) and len(elt.elts) == 2:
                items.append((elt.elts[0], elt.elts[1]))
    elif isinstance(value, ast.Dict):
        items = [(k, v) for k, v in zip(value.keys, value.values, strict=True) if k is not None]
    for k, v in items:
        key = _const_str(k)
        if key is None:
            continue
        names = [s for s in ([_const_str(v)] if not isinstance(v, ast.Tuple) else [_const_str(e) for e in v.elts])
                 if s]
        yield key, names


def parse_transformers_gguf(text: str) -> set[str]:
    """The GGUF ``general.architecture`` values transformers' GGUF loader maps (``GGUF_CONFIG_MAPPING`` keys)."""
    for node in ast.parse(text).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "GGUF_CONFIG_MAPPING" and isinstance(node.value, ast.Dict)):
            return {s for s in (_const_str(k) for k in node.value.keys if k is not None) if s}
    return set()


_ENTRY = re.compile(r"^EntryClass\s*=\s*(\[[^\]]*\]|[A-Za-z_][A-Za-z0-9_]*)", re.M)


def parse_sglang_entry(text: str) -> list[str]:
    """The class names a ``sglang/srt/models/*.py`` module registers through ``EntryClass``."""
    m = _ENTRY.search(text)
    if not m:
        return []
    return re.findall(r"[A-Za-z_][A-Za-z0-9_]*", m.group(1))


def parse_mlx_remapping(text: str) -> dict[str, str]:
    """mlx-lm's ``MODEL_REMAPPING`` (a model_type served by another module), from utils.py or models/__init__."""
    for node in ast.parse(text).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "MODEL_REMAPPING" and isinstance(node.value, ast.Dict)):
            pairs = zip(node.value.keys, node.value.values, strict=True)
            return {k: v for k, v in ((_const_str(a), _const_str(b)) for a, b in pairs if a is not None) if k and v}
    return {}


_ARCH_STRING = re.compile(r'arch_string\s*(?:==|=)\s*"([A-Za-z0-9_]+)"')


def parse_arch_strings(text: str) -> set[str]:
    """ExLlama's HF classes: ``arch_string == "X"`` branches (v2 architecture.py) or ``arch_string = "X"``
    config classes (v3 architecture/*.py)."""
    return set(_ARCH_STRING.findall(text))


_LLM_ARCH = re.compile(r'\{\s*LLM_ARCH_[A-Z0-9_]+\s*,\s*"([^"]+)"\s*\}')
_REGISTER = re.compile(r"@(?:ModelBase|Model|TextModel|MmprojModel)\.register\(([^)]*)\)")


def parse_llama_arch(text: str) -> set[str]:
    """The ``general.architecture`` names of llama.cpp's ``LLM_ARCH_NAMES`` table (``{ LLM_ARCH_X, "x" }``)."""
    block = text
    start = text.find("LLM_ARCH_NAMES")
    if start >= 0:
        end = text.find("};", start)
        block = text[start:end if end > 0 else None]
    return {n for n in _LLM_ARCH.findall(block) if n != "(unknown)"}


def parse_convert_hf(text: str) -> set[str]:
    """The HF architecture classes ``convert_hf_to_gguf.py`` registers a converter for."""
    out: set[str] = set()
    for args in _REGISTER.findall(text):
        out.update(re.findall(r'"([A-Za-z0-9_]+)"', args))
    return out


_GGUF_RENAME = re.compile(r'if\s+model_type\s*(?:==|in)\s*(\([^)]*\)|"[^"]+")\s*:\s*\n(?:\s*#[^\n]*\n)*'
                          r'\s*model_type\s*=\s*(?:"([^"]+)"|model_type\.replace\(\s*"_"\s*,\s*""\s*\))')


def parse_gguf_renames(text: str) -> dict[str, str]:
    """{HF model_type: GGUF architecture} where vLLM's GGUF weight mapping (model_loader/gguf_loader.py, or
    vllm-gguf-plugin's weights_adapter/default.py) renames a model_type before looking up gguf-py's tensor-name map
    (``if model_type == "cohere": model_type = "command-r"``; ``.replace("_", "")`` for qwen2_moe/qwen3_moe).
    Every other model_type must be a GGUF architecture name as it is."""
    out: dict[str, str] = {}
    for sources, target in _GGUF_RENAME.findall(text):
        for name in re.findall(r'"([^"]+)"', sources):
            out[name] = target or name.replace("_", "")
    return out


def parse_causal_lm_types(text: str) -> dict[str, str]:
    """{model_type: HF class} of transformers' ``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` (modeling_auto.py): how vLLM
    names the architecture of a GGUF ("Can't get gguf config for X" for a type not in it)."""
    for node in ast.parse(text).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"):
            return {k: v[0] for k, v in _pairs(node.value) if v}
    return {}


_TRTLLM_REGISTER = re.compile(r'@register_auto_model\(\s*"([A-Za-z0-9_]+)"')


def parse_trtllm_models(text: str) -> set[str]:
    """The HF classes TensorRT-LLM's PyTorch backend loads: ``@register_auto_model("X")`` decorators of
    ``tensorrt_llm/_torch/models/modeling_*.py`` and the keys of ``MODEL_ARCH_TO_MODULE`` (``_arch_index.py``,
    the lazy-loading index of the same decorators in newer releases)."""
    out = set(_TRTLLM_REGISTER.findall(text))
    if "MODEL_ARCH_TO_MODULE" in text:
        for node in ast.parse(text).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == "MODEL_ARCH_TO_MODULE" and isinstance(node.value, ast.Dict)):
                out.update(k for k in (_const_str(x) for x in node.value.keys if x is not None) if k)
    return out


def parse_trtllm_model_map(text: str) -> set[str]:
    """The HF classes of TensorRT-LLM's TensorRT-engine backend: the string keys of ``MODEL_MAP`` in
    ``tensorrt_llm/models/__init__.py`` (checkpoints converted, then built with trtllm-build)."""
    for node in ast.parse(text).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "MODEL_MAP" and isinstance(node.value, ast.Dict)):
            return {k for k in (_const_str(x) for x in node.value.keys if x is not None) if k}
    return set()


_GO_REGISTER = re.compile(r'model\.Register\(\s*"([^"]+)"')


def parse_ollama_engine(text: str) -> set[str]:
    """The GGUF architectures Ollama's own Go engine implements: ``model.Register("gemma3", New)`` in
    model/models/*/ (a registration suffixed ``_embed`` is the embedding variant of the same architecture)."""
    return {n for n in _GO_REGISTER.findall(text) if not n.endswith("_embed")}


_GO_ARCH_SWITCH = re.compile(r"switch\s+[\w.]*Architectures\[0\]\s*\{(.*?)\n\s*default:", re.S)
_GO_CASE = re.compile(r"^\s*case\s+([^:\n]+):", re.M)


def parse_ollama_convert(text: str) -> set[str]:
    """The HF classes Ollama's safetensors importer converts: the ``case "X", "Y":`` labels of each
    ``switch ...Architectures[0] {`` in convert/convert.go (convert/safetensors.go before 0.3.3); the converter
    refuses any other class with 'unsupported architecture'."""
    out: set[str] = set()
    for block in _GO_ARCH_SWITCH.findall(text):
        for labels in _GO_CASE.findall(block):
            out.update(re.findall(r'"([A-Za-z0-9_]+)"', labels))
    return out


#: mlx_lm/models/*.py modules that are shared helpers, not a model_type
MLX_NOT_MODELS = frozenset({"__init__", "base", "cache", "rope_utils", "switch_layers", "ssm", "pipeline",
                            "activations", "bitlinear_layers", "gated_delta", "mla", "mamba_utils", "layers"})
