#!/usr/bin/env python3
"""What SGLang's released code shows about quantisation, per release: matrices/generated/sglang.facts.toml and the
gate rules derived from it, matrices/generated/sglang.toml (matrices/SCHEMA.md §2.3'').

    python matrices/tools/releases.py sglang 0.5.23
    python matrices/tools/extract_sglang.py [--check [--releases DIR]] [--changes KIND ...]

Facts read with ``ast`` from each release's wheel (never imported):

* ``registry``: ``BASE_QUANTIZATION_METHODS`` (and the methods registered only on some platforms: ``cond ? +name``),
  ``CPU_QUANTIZATION_METHODS``; ``method_config``: each method's configuration class;
* ``min_capability``: ``get_min_capability()`` of every quantisation configuration and compressed-tensors scheme (a
  number, or the decision list of one that depends on the platform, as ``Fp8Config``'s does for MXFP8);
* ``platform_quantization rocm``: ``_verify_quantization``'s ROCm allow-list ('X quantization is currently not
  supported in ROCm.');
* ``decisions``: compressed-tensors ``_get_scheme_from_parts``, the default attention backend, the legacy-GPU dtype
  downgrade, the MXFP8-to-block-FP8 conversion and MXFP8 dense backends, the MLX runtime's requirements;
* ``constant``: the MLX runtime's version floors and the ``SGLANG_USE_MLX`` default; ``kv_cache_dtypes``: the
  ``--kv-cache-dtype`` choices.

The gates derived are the ones of matrices/tools/gates.py (SGLang's checks descend from vLLM's).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from codefacts import (
    Extractor,
    Facts,
    Release,
    Tree,
    assigned,
    classes,
    decisions,
    function,
    main,
    method_int,
    strings,
    unparse,
)
from extract_vllm import CT_SCHEMES, _find, _inline_flags
from gates import Profile
from gates import derive as derive_gates

VERSIONS = ("0.5.23",)

SRT = "sglang/srt"
QUANT = f"{SRT}/layers/quantization"

#: decision lists: key -> (file, "function" or "Class.method")
DECISIONS: dict[str, tuple[str, str]] = {
    "ct_scheme": (f"{QUANT}/compressed_tensors/compressed_tensors.py", "CompressedTensorsConfig._get_scheme_from_parts"),
    "fp8_min_capability": (f"{QUANT}/fp8.py", "Fp8Config.get_min_capability"),
    "mxfp8_block_convert": (f"{SRT}/utils/common.py", "mxfp8_block_convert_required"),
    "mxfp8_dense_backend": (f"{QUANT}/fp8_utils.py", "resolve_mxfp8_dense_gemm_backend"),
    "fp8_marlin_auto": (f"{QUANT}/fp8_utils.py", "can_auto_enable_marlin_fp8"),
    "default_attention_backend": (f"{SRT}/arg_groups/model_override_base.py", "get_default_attn_backend"),
    "legacy_gpu_dtype": (f"{SRT}/model_executor/model_runner_components/load_model_utils.py",
                         "maybe_downgrade_dtype_for_legacy_gpu"),
    "mlx_runtime": (f"{SRT}/hardware_backend/mlx/runtime.py", "_validate_runtime"),
    "mlx_enabled": (f"{SRT}/hardware_backend/mlx/runtime.py", "use_mlx"),
}

#: module-level constants: key -> (file, name)
CONSTANTS: dict[str, tuple[str, str]] = {
    "mlx_runtime._MIN_MLX_VERSION": (f"{SRT}/hardware_backend/mlx/runtime.py", "_MIN_MLX_VERSION"),
    "mlx_runtime._SUPPORTED_TORCH_SERIES": (f"{SRT}/hardware_backend/mlx/runtime.py", "_SUPPORTED_TORCH_SERIES"),
}


def extract(tree: Tree) -> Facts:
    facts = Facts()
    _registry(tree, facts)
    _min_capabilities(tree, facts)
    _rocm(tree, facts)
    for key, (path, qualname) in DECISIONS.items():
        module = tree.module(path)
        fn = _find(module, qualname) if module else None
        if fn is not None:
            facts.add("decisions", key, decisions(_inline_flags(fn.body)), path)
    for key, (path, name) in CONSTANTS.items():
        module = tree.module(path)
        value = assigned(module, name) if module else None
        if value is not None:
            facts.add("constant", key, unparse(value), path)
    _environ(tree, facts)
    _kv_dtypes(tree, facts)
    return facts


def _registry(tree: Tree, facts: Facts) -> None:
    path = f"{QUANT}/__init__.py"
    module = tree.module(path)
    if module is None:
        return
    base = assigned(module, "BASE_QUANTIZATION_METHODS")
    if isinstance(base, ast.Dict):
        names = [k.value for k in base.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
        for stmt in module.body:  # ``if is_cpu(): BASE_QUANTIZATION_METHODS.update({...})``
            if isinstance(stmt, ast.If):
                for call in (n for n in ast.walk(stmt) if isinstance(n, ast.Call)):
                    if unparse(call.func) == "BASE_QUANTIZATION_METHODS.update" and call.args \
                            and isinstance(call.args[0], ast.Dict):
                        added = [k.value for k in call.args[0].keys if isinstance(k, ast.Constant)]
                        names.append(f"{unparse(stmt.test)} ? +{', '.join(map(str, added))}")
                        _configs(call.args[0], path, facts, prefix=f"{unparse(stmt.test)}: ")
        facts.add("registry", "BASE_QUANTIZATION_METHODS", names, path)
        _configs(base, path, facts)
    cpu = assigned(module, "CPU_QUANTIZATION_METHODS")
    if isinstance(cpu, ast.Dict):
        facts.add("registry", "CPU_QUANTIZATION_METHODS",
                  [k.value for k in cpu.keys if isinstance(k, ast.Constant)], path)


def _configs(table: ast.Dict, path: str, facts: Facts, prefix: str = "") -> None:
    for k, v in zip(table.keys, table.values, strict=True):
        if isinstance(k, ast.Constant) and isinstance(k.value, str):
            key = k.value if not prefix else f"{k.value} [{prefix.rstrip(': ')}]"
            facts.add("method_config", key, unparse(v), path)


def _min_capabilities(tree: Tree, facts: Facts) -> None:
    for path in tree.files(QUANT):
        module = tree.module(path)
        assert module is not None
        for cls in classes(module):
            value = method_int(cls, "get_min_capability")
            if isinstance(value, int):
                facts.add("min_capability", cls.name, value, path)
            elif value is None and (fn := function(cls, "get_min_capability")) is not None:
                listed = decisions(fn.body)
                if listed and not any("NotImplementedError" in line for line in listed):
                    facts.add("min_capability", cls.name, listed, path)


def _rocm(tree: Tree, facts: Facts) -> None:
    path = f"{SRT}/configs/model_config.py"
    module = tree.module(path)
    fn = _find(module, "ModelConfig._verify_quantization") if module else None
    if fn is None:
        return
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "rocm_supported_quantization"
                                                for t in node.targets):
            facts.add("platform_quantization", "rocm", strings(node.value), path)


def _environ(tree: Tree, facts: Facts) -> None:
    path = f"{SRT}/environ.py"
    module = tree.module(path)
    if module is None:
        return
    for cls in classes(module):
        value = assigned(cls, "SGLANG_USE_MLX")
        if value is not None:
            facts.add("constant", "environ.SGLANG_USE_MLX", unparse(value), path)


def _kv_dtypes(tree: Tree, facts: Facts) -> None:
    path = f"{SRT}/arg_groups/fields/model.py"
    module = tree.module(path)
    if module is None:
        return
    for node in ast.walk(module):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.target.id == "kv_cache_dtype":
            for kw in (k for n in ast.walk(node.annotation) if isinstance(n, ast.Call) for k in n.keywords):
                if kw.arg == "choices":
                    facts.add("kv_cache_dtypes", "--kv-cache-dtype", strings(kw.value), path)


#: SGLang's method names -> the checkpoints qcheck classifies as that method
CHECKPOINTS: dict[str, dict[str, Any]] = {
    "fp8": {"methods": ["fp8"], "match": {"config_method": "fp8"}},
    "mxfp4": {"methods": ["mxfp4"], "match": {"config_method": "mxfp4"}},
    "compressed-tensors": {"match": {"config_method": "compressed-tensors"}},
    "quark": {"match": {"config_method": "quark"}},
    "modelopt_fp8": {"match": {"producer": "modelopt", "config_method": "FP8"}},
    "modelopt_fp4": {"match": {"producer": "modelopt", "config_method": "NVFP4"}},
    "mxfp8": {"match": {"producer": "modelopt", "config_method": "MXFP8"}},
}
#: SGLang's Fp8Config minimum depends on the platform (a decision list, not a number): no config gate for fp8/mxfp8
CONFIG_GATES: dict[str, tuple[str, ...]] = {
    "compressed-tensors": ("compressed-tensors",), "quark": ("quark",), "modelopt_fp8": ("modelopt_fp8",),
    "modelopt_fp4": ("modelopt_fp4",),
}

PROFILE = Profile(
    label="sglang wheel", checkpoints=CHECKPOINTS, config_gates=CONFIG_GATES, ct_schemes=CT_SCHEMES,
    platforms={"rocm": ({"vendor": "amd"}, "{name} quantization is currently not supported in ROCm.")},
    registry=("registry", "BASE_QUANTIZATION_METHODS"))


def derive(releases: Sequence[Release]) -> tuple[dict[str, dict[str, str]], list[dict[str, Any]]]:
    return derive_gates(PROFILE, releases)


EXTRACTOR = Extractor(
    engine="sglang", package="sglang", versions=VERSIONS, extract=extract, derive=derive,
    note="SGLang wheels from PyPI (pip download --no-deps sglang==X), Python sources read with ast; see "
         "matrices/tools/extract_sglang.py for what each kind of fact is")

if __name__ == "__main__":
    sys.exit(main(EXTRACTOR))
