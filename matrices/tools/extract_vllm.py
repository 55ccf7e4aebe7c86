#!/usr/bin/env python3
"""What vLLM's released code shows about quantisation, per release: matrices/generated/vllm.facts.toml and the gate
rules derived from it, matrices/generated/vllm.toml (matrices/SCHEMA.md §2.3'').

    python matrices/tools/releases.py vllm 0.9.0 ... 0.34.0      # fetch the wheels (Python sources kept under /tmp)
    python matrices/tools/extract_vllm.py                        # rewrite both files from the fetched releases
    python matrices/tools/extract_vllm.py --check                # offline: the files are what their facts give
    python matrices/tools/extract_vllm.py --check --releases DIR # and what the fetched releases give, byte for byte

Facts read with ``ast`` from every release (never imported, never executed):

* ``registry``: ``QuantizationMethods`` (the methods ``_verify_quantization`` accepts: "Unknown quantization
  method") and ``DEPRECATED_QUANTIZATION_METHODS``; ``method_config``: the config class of each method;
* ``min_capability``: ``get_min_capability()`` of every quantization config, compressed-tensors / Quark scheme and
  linear kernel (``vllm/config``'s "Minimum capability" check refuses a GPU below its config's);
* ``platform_quantization``: ``supported_quantization`` of the ROCm, XPU, CPU and TPU platforms;
* ``decisions``: the branches that pick a scheme, backend or kernel, as decision lists (``cond; cond -> result``):
  compressed-tensors ``_get_scheme_from_parts`` (incl. the capability checks that pick another scheme), the MoE
  method, the Marlin capability gates, the CUDA attention backend priorities and the CPU platform's dtypes;
* ``kernels``: every ``_POSSIBLE_*`` kernel priority list per platform, and per kernel its ``is_supported`` and
  ``can_implement`` decision lists (the bounds a kernel states) and the supported-type constants they test;
* ``attention_backend``: each attention backend's ``supported_kv_cache_dtypes`` and ``supports_*`` /
  ``get_supported_*`` methods (what ``validate_configuration`` checks); ``kv_cache_dtypes``: ``CacheDType``;
* ``capability_checks``: every ``has_device_capability(N)``-style call in the quantisation code, per file.

The gates derived (``derive``) are the refusals the code makes before any kernel is chosen: a method that is not
registered, a GPU below the configuration's (or the selected compressed-tensors scheme's) minimum capability, and a
method missing from a platform's ``supported_quantization``. Everything else stays a hand-written rule with its
``verified`` range; ``qcheck matrix --validate`` fails where one of those runs what a gate refuses.
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
    names_in,
    short,
    strings,
    unparse,
)
from gates import Profile
from gates import derive as derive_gates

#: the releases read: every listed vLLM version of matrices/engines/vllm.toml and the minors users pin between them
VERSIONS = ("0.9.0", "0.9.2", "0.10.0", "0.10.1.1", "0.10.2", "0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.13.0", "0.14.0",
            "0.14.1", "0.15.1", "0.16.0", "0.17.1", "0.18.1", "0.19.1", "0.20.2", "0.21.0", "0.22.1", "0.23.0",
            "0.24.0", "0.25.1", "0.26.0", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0",
            "0.34.0")

QUANT = "vllm/model_executor/layers/quantization"
#: where vLLM keeps quantisation configs, schemes and kernels (0.2x moved the kernels to model_executor/kernels)
CODE_DIRS = (QUANT, "vllm/model_executor/kernels", "vllm/model_executor/layers/fused_moe")
ATTENTION_DIRS = ("vllm/v1/attention/backends", "vllm/attention/backends")
PLATFORMS = {"rocm": "RocmPlatform", "xpu": "XPUPlatform", "cpu": "CpuPlatform", "tpu": "TpuPlatform"}

#: decision lists: key -> (files in the order releases used them, "function" or "Class.method")
DECISIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "ct_scheme": ((f"{QUANT}/compressed_tensors/compressed_tensors.py",),
                  "CompressedTensorsConfig._get_scheme_from_parts"),
    "ct_moe_method": ((f"{QUANT}/compressed_tensors/compressed_tensors_moe/compressed_tensors_moe.py",
                       f"{QUANT}/compressed_tensors/compressed_tensors_moe.py"), "CompressedTensorsMoEMethod.get_moe_method"),
    "marlin_quant_types": ((f"{QUANT}/utils/marlin_utils.py",), "query_marlin_supported_quant_types"),
    "marlin_fp4": ((f"{QUANT}/utils/marlin_utils_fp4.py",), "is_fp4_marlin_supported"),
    "marlin_fp8": ((f"{QUANT}/utils/marlin_utils_fp8.py",), "is_fp8_marlin_supported"),
    "awq_marlin_compatible": ((f"{QUANT}/awq_marlin.py",), "AWQMarlinConfig.is_awq_marlin_compatible"),
    "gptq_marlin_compatible": ((f"{QUANT}/gptq_marlin.py",), "GPTQMarlinConfig.is_gptq_marlin_compatible"),
    "ipex_override": ((f"{QUANT}/ipex_quant.py",), "IPEXConfig.override_quantization_method"),
    "cuda_attention_priorities": (("vllm/platforms/cuda.py",), "_get_backend_priorities"),
    "cuda_attention_backend": (("vllm/platforms/cuda.py",), "CudaPlatformBase.get_attn_backend_cls"),
    "rocm_attention_backend": (("vllm/platforms/rocm.py",), "RocmPlatform.get_attn_backend_cls"),
    "xpu_attention_backend": (("vllm/platforms/xpu.py",), "XPUPlatform.get_attn_backend_cls"),
    "cpu_dtypes": (("vllm/platforms/cpu.py",), "CpuPlatform.supported_dtypes"),
    "mxfp4_backend": ((f"{QUANT}/mxfp4.py",), "get_mxfp4_backend"),
    "mxfp4_moe_priorities": (("vllm/model_executor/layers/fused_moe/oracle/mxfp4.py",),
                             "_get_priority_backends_for_gpt_oss"),
}

_CAPABILITY_CALLS = ("has_device_capability", "is_device_capability", "is_device_capability_family",
                     "_check_scheme_supported", "is_blackwell_class")


# --------------------------------------------------------------------------------------------------------------
# extraction


def extract(tree: Tree) -> Facts:
    facts = Facts()
    _registry(tree, facts)
    bases = _min_capabilities(tree, facts)
    _platforms(tree, facts)
    for key, (paths, qualname) in DECISIONS.items():
        _decision(tree, facts, key, paths, qualname)
    _kernel_lists(tree, facts)
    _inherited(facts, bases)
    _attention_backends(tree, facts)
    _kv_dtypes(tree, facts)
    _capability_checks(tree, facts)
    return facts


def _registry(tree: Tree, facts: Facts) -> None:
    path = f"{QUANT}/__init__.py"
    module = tree.module(path)
    if module is None:
        return
    facts.add("registry", "QUANTIZATION_METHODS", strings(assigned(module, "QuantizationMethods")), path)
    facts.add("registry", "DEPRECATED_QUANTIZATION_METHODS",
              strings(assigned(module, "DEPRECATED_QUANTIZATION_METHODS")), path)
    fn = function(module, "get_quantization_config")
    table = next((n.value for n in ast.walk(fn) if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                  and n.target.id == "method_to_config"), None) if fn else None
    if isinstance(table, ast.Dict):
        for k, v in zip(table.keys, table.values, strict=True):
            if isinstance(k, ast.Constant) and isinstance(k.value, str):
                facts.add("method_config", k.value, unparse(v), path)


def _min_capabilities(tree: Tree, facts: Facts) -> dict[str, tuple[list[str], str]]:
    """``get_min_capability()`` of every class that states one (a literal, or another class's); returns every class's
    bases (for ``_inherited``)."""
    found: dict[str, tuple[int | str, str]] = {}
    bases: dict[str, tuple[list[str], str]] = {}
    for directory in CODE_DIRS:
        for path in tree.files(directory):
            module = tree.module(path)
            assert module is not None
            for cls in classes(module):
                bases.setdefault(cls.name, ([unparse(b).split(".")[-1] for b in cls.bases], path))
                value = method_int(cls, "get_min_capability")
                if value is not None:
                    found.setdefault(cls.name, (value, path))
    for name, (value, path) in found.items():
        seen = {name}
        while isinstance(value, str) and value in found and value not in seen:
            seen.add(value)
            value = found[value][0]
        facts.add("min_capability", name, value, path)
    return bases


def _inherited(facts: Facts, bases: dict[str, tuple[list[str], str]]) -> None:
    """The configs, schemes and kernels the other facts name that inherit their minimum capability (GPT-OSS's
    ``GptOssMxfp4Config(Mxfp4Config)``): the nearest base's, recorded with the subclass's file."""
    named = {str(v) for (kind, _), (v, _) in facts.values.items() if kind == "method_config"}
    named |= {line.rpartition(" -> ")[2] for (kind, key), (v, _) in facts.values.items()
              if kind == "decisions" and key == "ct_scheme" for line in v}
    named |= {n for (kind, _), (v, _) in facts.values.items() if kind == "kernels" for n in v}
    for name in sorted(named):
        if ("min_capability", name) in facts.values or name not in bases:
            continue
        todo, seen = list(bases[name][0]), {name}
        while todo:
            base = todo.pop(0)
            if base in seen:
                continue
            seen.add(base)
            if ("min_capability", base) in facts.values:
                facts.add("min_capability", name, facts.values[("min_capability", base)][0], bases[name][1])
                break
            todo += bases.get(base, ([], ""))[0]


def _platforms(tree: Tree, facts: Facts) -> None:
    """``supported_quantization`` of each platform class, with the entries its class body adds conditionally."""
    for stem, name in PLATFORMS.items():
        path = f"vllm/platforms/{stem}.py"
        module = tree.module(path)
        cls = next((c for c in classes(module) if c.name == name), None) if module else None
        if cls is None:
            continue
        listed = strings(assigned(cls, "supported_quantization"))
        if listed is None:
            continue
        extra = [f"{unparse(stmt.test)} ? +{', '.join(strings(inner.value) or [unparse(inner.value)])}"
                 for stmt in cls.body if isinstance(stmt, ast.If)
                 for inner in stmt.body if isinstance(inner, ast.AugAssign)
                 and isinstance(inner.target, ast.Name) and inner.target.id == "supported_quantization"]
        facts.add("platform_quantization", stem, listed + extra, path)


def _find(module: ast.Module, qualname: str) -> ast.FunctionDef | None:
    if "." not in qualname:
        return next((n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == qualname), None)
    owner, name = qualname.split(".")
    cls = next((c for c in classes(module) if c.name == owner), None)
    return function(cls, name) if cls is not None else None


def _decision(tree: Tree, facts: Facts, key: str, paths: Sequence[str], qualname: str) -> None:
    path = tree.first(*paths)
    module = tree.module(path) if path else None
    fn = _find(module, qualname) if module else None
    if fn is not None and path is not None:
        facts.add("decisions", key, decisions(_inline_flags(fn.body)), path)


def _inline_flags(body: list[ast.stmt]) -> list[ast.stmt]:
    """``ok = self._check_scheme_supported(...); if ok and ...: ...``: a test shows the call a flag it reads was
    assigned from (a decision list would otherwise say only ``ok``). Applied through nested bodies, in order."""
    flags: dict[str, ast.expr] = {}

    class Inline(ast.NodeTransformer):
        def visit_Assign(self, node: ast.Assign) -> ast.AST:
            if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call):
                flags[node.targets[0].id] = node.value
            return self.generic_visit(node)

        def visit_If(self, node: ast.If) -> ast.AST:
            node.test = Substitute().visit(node.test)
            return self.generic_visit(node)

    class Substitute(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            return flags.get(node.id, node) if isinstance(node.ctx, ast.Load) else node

    import copy

    return [Inline().visit(copy.deepcopy(stmt)) for stmt in body]


def _kernel_lists(tree: Tree, facts: Facts) -> None:
    """Every ``_POSSIBLE_*`` priority list (per platform), and each listed kernel's stated bounds."""
    kernels: set[str] = set()
    index: dict[str, tuple[str, ast.ClassDef, ast.Module]] = {}
    for directory in CODE_DIRS:
        for path in tree.files(directory):
            module = tree.module(path)
            assert module is not None
            for cls in classes(module):
                index.setdefault(cls.name, (path, cls, module))
            if not path.endswith("__init__.py"):
                continue
            for stmt in module.body:
                target = stmt.targets[0] if isinstance(stmt, ast.Assign) else getattr(stmt, "target", None)
                value = getattr(stmt, "value", None)
                if not isinstance(target, ast.Name) or not target.id.startswith("_POSSIBLE") or value is None:
                    continue
                for platform, listed in _platform_lists(value):
                    names = [short(e) for e in listed]
                    kernels.update(names)
                    facts.add("kernels", f"{Path(path).parent.name}/{target.id}[{platform}]", names, path)
    for name in sorted(kernels):
        if name not in index:
            continue
        path, cls, module = index[name]
        for method in ("is_supported", "can_implement"):
            fn = function(cls, method)
            if fn is not None:
                facts.add("kernel_bounds", f"{name}.{method}", decisions(fn.body), path)
                _constants(module, fn, path, facts)


def _platform_lists(value: ast.expr) -> list[tuple[str, list[ast.expr]]]:
    if isinstance(value, ast.List):
        return [("any", list(value.elts))]
    if isinstance(value, ast.Dict):
        return [(unparse(k).removeprefix("PlatformEnum."), list(v.elts)) for k, v in zip(value.keys, value.values,
                                                                                        strict=True)
                if k is not None and isinstance(v, ast.List)]
    return []


def _constants(module: ast.Module, fn: ast.FunctionDef, path: str, facts: Facts) -> None:
    """The module-level constants a kernel's bounds test (``_XPUWNA16_SUPPORTED_QUANT_TYPES = [...]``)."""
    for name in sorted(n for n in names_in(fn) if n.isupper() or n.lstrip("_").isupper()):
        value = assigned(module, name)
        if value is not None:
            facts.add("constant", f"{Path(path).stem}.{name}", unparse(value), path)


def _attention_backends(tree: Tree, facts: Facts) -> None:
    """Each attention backend's stated kv-cache dtypes, capabilities, head sizes and sink support."""
    for directory in ATTENTION_DIRS:
        for path in tree.files(directory):
            module = tree.module(path)
            assert module is not None
            for cls in classes(module):
                if not cls.name.endswith("Backend"):
                    continue
                dtypes = assigned(cls, "supported_kv_cache_dtypes")
                if dtypes is not None:
                    facts.add("attention_backend", f"{cls.name}.supported_kv_cache_dtypes", unparse(dtypes), path)
                for fn in cls.body:
                    if isinstance(fn, ast.FunctionDef) and fn.name.startswith(("supports_", "get_supported_")):
                        facts.add("attention_backend", f"{cls.name}.{fn.name}", decisions(fn.body), path)


def _kv_dtypes(tree: Tree, facts: Facts) -> None:
    path = tree.first("vllm/config/cache.py", "vllm/config.py")
    module = tree.module(path) if path else None
    if module is not None and path is not None:
        facts.add("kv_cache_dtypes", "CacheDType", strings(assigned(module, "CacheDType")), path)


def _capability_checks(tree: Tree, facts: Facts) -> None:
    """Per file, every capability test in it, with the function it sits in: where a release moves a bound."""
    for directory in CODE_DIRS:
        for path in tree.files(directory):
            module = tree.module(path)
            assert module is not None
            found: set[str] = set()
            for fn in (n for n in ast.walk(module) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
                    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
                    if name in _CAPABILITY_CALLS and call.args:
                        found.add(f"{fn.name}: {name}({', '.join(unparse(a) for a in call.args)})")
            facts.add("capability_checks", path.removeprefix("vllm/model_executor/"), sorted(found), path)


# --------------------------------------------------------------------------------------------------------------
# the gates derived from the facts (matrices/tools/gates.py): what vLLM's method names stand for

# gates derived from the facts

#: vLLM's quantization method names -> the checkpoints qcheck classifies as that method (for the registry and
#: platform gates); plugins (gguf, bitsandbytes) are not here: a method they register is not refused by the core
CHECKPOINTS: dict[str, dict[str, Any]] = {
    "fp8": {"methods": ["fp8"], "match": {"config_method": "fp8"}},
    "mxfp4": {"methods": ["mxfp4"], "match": {"config_method": "mxfp4"}},
    "compressed-tensors": {"match": {"config_method": "compressed-tensors"}},
    "quark": {"match": {"config_method": "quark"}},
    "torchao": {"methods": ["torchao"], "match": {"config_method": "torchao"}},
    "hqq": {"methods": ["hqq"], "match": {"config_method": "hqq"}},
    "aqlm": {"methods": ["aqlm"], "match": {"config_method": "aqlm"}},
    "modelopt": {"match": {"producer": "modelopt", "config_method": "FP8"}},
    "modelopt_fp4": {"match": {"producer": "modelopt", "config_method": "NVFP4"}},
    "modelopt_mxfp8": {"match": {"producer": "modelopt", "config_method": "MXFP8"}},
}

#: the methods whose configuration's minimum capability refuses every checkpoint of the kind below it (no override
#: escapes to another configuration there): vLLM method name -> the registered names its checkpoints resolve to, the
#: override first (GPT-OSS ``mxfp4`` becomes ``gpt_oss_mxfp4`` where that exists); the class is the release's own
#: ``method_config``. AWQ/GPTQ are not here: their Marlin overrides depend on the GPU and stay hand-written.
CONFIG_GATES: dict[str, tuple[str, ...]] = {
    "fp8": ("fp8",), "mxfp4": ("gpt_oss_mxfp4", "mxfp4"), "compressed-tensors": ("compressed-tensors",), "hqq": ("hqq",),
    "quark": ("quark",), "torchao": ("torchao",), "modelopt": ("modelopt",), "modelopt_fp4": ("modelopt_fp4",),
    "modelopt_mxfp8": ("modelopt_mxfp8",),
}

#: compressed-tensors schemes: the conditions of ``_get_scheme_from_parts`` that select a checkpoint kind (one of
#: ``any`` appears, none of ``none``) -> the checkpoints of that kind
CT_SCHEMES: dict[str, dict[str, Any]] = {
    "w4a16-nvfp4": {"any": ["_is_nvfp4_format(weight_quant) and input_quant is None", "input_quant is None",
                            "_is_fp4a16_nvfp4("], "all": [], "none": ["not (input_quant is None)"],
                    "methods": ["nvfp4"], "match": {"producer": "compressed-tensors", "activation_dtype": "null"}},
    "w4a4-nvfp4": {"any": ["_is_nvfp4_format(weight_quant)", "_is_fp4a4_nvfp4("], "all": [],
                   "none": ["input_quant is None", "not self._is_nvfp4_format(input_quant)",
                            "not (self._is_nvfp4_format(input_quant))"],
                   "methods": ["nvfp4"], "match": {"producer": "compressed-tensors", "activation_dtype": "fp4_e2m1"}},
    "w8a8-fp8": {"any": ["_is_fp8_w8a8(weight_quant, input_quant)"], "all": [], "none": [],
                 "methods": ["fp8"], "match": {"producer": "compressed-tensors", "activation_dtype": "float8_e4m3"}},
    "w8a16-fp8": {"any": ["_is_fp8_w8a16(weight_quant, input_quant)"], "all": [], "none": [],
                  "methods": ["fp8"], "match": {"producer": "compressed-tensors", "activation_dtype": "null"}},
    "wna16": {"any": ["_is_wNa16_group_channel(weight_quant, input_quant)"], "all": [], "none": ["marlin_24"],
              "methods": ["int4"], "match": {"producer": "compressed-tensors", "activation_dtype": "null",
                                             "format": "pack-quantized"}},
    "w8a8-int8": {"any": ["_is_dynamic_token_w8a8(weight_quant, input_quant)",
                          "_is_static_tensor_w8a8(weight_quant, input_quant)"], "all": [], "none": [],
                  "methods": ["int8"], "match": {"producer": "compressed-tensors", "activation_dtype": "int8"}},
}

PROFILE = Profile(
    label="vllm wheels", checkpoints=CHECKPOINTS, config_gates=CONFIG_GATES, ct_schemes=CT_SCHEMES,
    platforms={"rocm": ({"vendor": "amd"}, "{name} quantization is currently not supported in rocm."),
               "xpu": ({"vendor": "intel", "arch": ["xe-hpg", "battlemage", "xe-hpc"]},
                       "{name} quantization is currently not supported in xpu."),
               "cpu": ({"vendor": "cpu"}, "{name} quantization is currently not supported in cpu.")})


def derive(releases: Sequence[Release]) -> tuple[dict[str, dict[str, str]], list[dict[str, Any]]]:
    return derive_gates(PROFILE, releases)


EXTRACTOR = Extractor(
    engine="vllm", package="vllm", versions=VERSIONS, extract=extract, derive=derive,
    note="vLLM wheels from PyPI (pip download --no-deps vllm==X), Python sources read with ast; see "
         "matrices/tools/extract_vllm.py for what each kind of fact is")

if __name__ == "__main__":
    sys.exit(main(EXTRACTOR))
