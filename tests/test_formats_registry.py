"""The format registry (qcheck/formats/) is complete and consistent, every list of methods comes from it,
and a format registered at run time flows through classify -> inspect text -> matrix validation -> verdict
without any other module knowing it."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from qcheck.classify import classify, classify_weights
from qcheck.classify.base import Draft, Hints, QLinear
from qcheck.classify.configs import ConfigView
from qcheck.formats import MODULES, REGISTRY, Family, Format, Layout, Ref, Variant
from qcheck.matrix.loader import clear_cache, load_matrix
from qcheck.matrix.probes import PROBES
from qcheck.matrix.resolve import parse_engine_spec, resolve_one
from qcheck.matrix.schema import METHODS, MatrixDataError
from qcheck.model import TensorInfo
from qcheck.report.text_inspect import quant_phrase
from support import builders as b

ROOT = Path(__file__).resolve().parents[1]
TEST_MATRIX = Path(__file__).parent / "data" / "matrices"

#: the canonical methods of the JSON contract (``quantization.method``), in contract order
CONTRACT_METHODS = ("none", "gguf", "fp8", "nvfp4", "mxfp4", "mxfp6", "mxfp8", "awq", "gptq", "int8", "int4",
                    "bitsandbytes", "mlx", "exl2", "exl3", "hqq", "torchao", "aqlm", "unknown")


def _matrix_dir(tmp_path: Path, rules: str) -> Path:
    """A matrix directory with the test GPUs and one engine ``eng`` (version 1.0.0, NVIDIA) holding ``rules``."""
    root = tmp_path / "matrices"
    (root / "engines").mkdir(parents=True, exist_ok=True)
    (root / "gpus.toml").write_text((TEST_MATRIX / "gpus.toml").read_text())
    head = textwrap.dedent("""
        [engine]
        id = "eng"
        name = "Eng"
        kind = "engine"
        versions = ["1.0.0"]
        hardware = ["nvidia"]
        hardware_sources = ["s"]

        [sources]
        s = { ref = "example/eng: quant.py", version = "1.0.0" }
    """)
    (root / "engines" / "eng.toml").write_text(head + textwrap.dedent(rules))
    clear_cache()
    return root


def test_every_contract_method_has_exactly_one_format_in_contract_order() -> None:
    assert REGISTRY.methods() == CONTRACT_METHODS
    assert METHODS == CONTRACT_METHODS  # the matrix schema's list is the registry's
    assert [f.method for f in REGISTRY] == list(CONTRACT_METHODS)
    assert all(REGISTRY[m].matrix_method == m for m in CONTRACT_METHODS)


def test_labels_are_non_empty_and_distinct() -> None:
    labels = [f.label for f in REGISTRY]
    assert all(label.strip() == label and label for label in labels)
    assert len(set(labels)) == len(labels)


def test_every_format_has_variants_and_probes_are_built_from_them() -> None:
    assert all(f.variants for f in REGISTRY), [f.method for f in REGISTRY if not f.variants]
    assert [(p.method, p.name) for p in PROBES] == [(f.method, v.name) for f in REGISTRY for v in f.variants]
    # a variant's fields are Quantization / Inspection fields (the matrix matches on them)
    for probe in PROBES:
        built = probe.build()
        assert built.quantization.method == probe.method


def test_every_matrix_method_is_accepted_by_the_matrix_schema(tmp_path: Path) -> None:
    """One engine file with a rule per registered method loads; a method outside the registry is refused."""
    rules = "".join(f'\n[[rule]]\nid = "r-{f.method}"\nmethods = ["{f.matrix_method}"]\nstatus = "native"\n'
                    f'sources = ["s"]\n' for f in REGISTRY)
    root = _matrix_dir(tmp_path, rules)
    try:
        assert [r.id for r in load_matrix(root).engines["eng"].rules] == [f"r-{m}" for m in CONTRACT_METHODS]
        _matrix_dir(tmp_path, rules.replace('["aqlm"]', '["aqlm2"]'))
        clear_cache()
        with pytest.raises(MatrixDataError, match=r"\[unknown-method\] method 'aqlm2' is not canonical"):
            load_matrix(root).engine("eng")  # engine files are validated when the engine is first used
    finally:
        clear_cache()


def test_simulated_formats_name_dequantisers_that_exist() -> None:
    pytest.importorskip("torch")
    simulated = {f.method for f in REGISTRY if f.simulated}
    assert simulated == {"none", "gguf", "fp8", "nvfp4", "mxfp4", "mxfp8", "awq", "gptq", "int8", "int4", "mlx",
                         "unknown"}
    for fmt in REGISTRY:
        refs = [x.dequantiser for x in fmt.layouts if x.dequantiser is not None]
        if fmt.method not in ("none", "unknown"):  # none copies floats; unknown is attempted as floats
            assert bool(refs) == fmt.simulated, fmt.method
        for ref in refs:
            fn = ref.resolve()
            assert callable(fn) and ref.target.startswith("qcheck.eval."), ref.target
            assert list(inspect.signature(fn).parameters)[:2] in (["src", "q"], ["gguf_file", "checkpoint"]), ref


def test_layouts_shared_by_formats_share_their_dequantiser() -> None:
    seen: dict[str, Ref | None] = {}
    for fmt in REGISTRY:
        for layout in fmt.layouts:
            assert seen.setdefault(layout.id, layout.dequantiser) == layout.dequantiser, layout.id


def test_families_scanners_and_readers_resolve_and_quant_methods_are_unique() -> None:
    owners: dict[str, str] = {}
    for fam in REGISTRY.families():
        for qm in fam.quant_methods:
            assert qm == qm.lower() and owners.setdefault(qm, fam.id) == fam.id, qm
        for ref in (fam.reader, fam.scanner, fam.hints):
            if isinstance(ref, Ref):
                ref.resolve()
        if fam.reader is not None:
            fn = fam.reader.resolve() if isinstance(fam.reader, Ref) else fam.reader
            assert list(inspect.signature(fn).parameters) == ["view", "draft", "family", "tensor_method"], fam.id
    # the families config_family names without a quant_method exist
    for fam in ("modelopt", "mlx", "compressed-tensors", "exl3", "awq", "gptq"):
        assert REGISTRY.family(fam) is not None
    ranks = [f.scan_rank for f in REGISTRY.scanners()]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)


def _fixtures() -> dict[str, b.Fixture]:
    out = {}
    for name, fn in sorted(vars(b).items()):
        if callable(fn) and getattr(fn, "__module__", "") == b.__name__ and not name.startswith("_"):
            sig = inspect.signature(fn)
            if "Fixture" in str(sig.return_annotation) and all(p.default is not p.empty for p in sig.parameters.values()):
                out[name] = fn()
    return out


def test_every_layout_the_classifier_emits_is_registered_under_its_method() -> None:
    seen: set[tuple[str, str]] = set()
    for name, fx in _fixtures().items():
        insp, weights = classify_weights(fx.checkpoint(name))
        assert insp.to_json() == classify(fx.checkpoint(name)).to_json()
        for q in weights:
            assert REGISTRY.layout(q.layout, q.method) is not None, (name, q.method, q.layout)
            seen.add((q.method, q.layout))
    # the builders cover most methods; every method found carries a registered layout
    assert {m for m, _ in seen} >= {"fp8", "nvfp4", "mxfp4", "mxfp8", "awq", "gptq", "int8", "int4", "bitsandbytes",
                                    "mlx", "exl2", "exl3", "hqq", "torchao", "aqlm"}


def test_the_registry_and_the_check_path_import_no_numpy_torch_or_classifier() -> None:
    code = ("import sys, qcheck.formats, qcheck.matrix.schema, qcheck.report.text_inspect\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'transformers')\n"
            "             or m.startswith(('qcheck.eval', 'qcheck.classify')))\n"
            "print(','.join(bad))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT)}, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_no_import_cycle_between_the_classifier_package_and_its_modules() -> None:
    """No classify submodule imports the ``qcheck.classify`` package itself (``from qcheck.classify import x``),
    and format modules import only the registry's records: code is referenced by ``Ref``."""
    for path in (ROOT / "qcheck" / "classify").glob("*.py"):
        if path.name != "__init__.py":
            assert "qcheck.classify" not in _imports(path), path.name
    for path in (ROOT / "qcheck" / "formats").glob("*.py"):
        ours = {m for m in _imports(path) if m.startswith("qcheck")}
        assert ours <= {"qcheck.formats.record"}, (path.name, ours)
    assert {p.stem for p in (ROOT / "qcheck" / "formats").glob("*.py")} - {"__init__", "record"} == set(MODULES)


# ------------------------------------------------------------------------------------------ a new format

def _scan_ternary(tensors: dict[str, TensorInfo], claimed: set[str], hints: Hints) -> list[QLinear]:
    """A made-up ternary layout: I8 ``tq_weight`` (one code per weight) + one F16 ``tq_scale`` per row."""
    out = []
    for name, t in tensors.items():
        if name in claimed or not name.endswith(".tq_weight") or len(t.shape) != 2:
            continue
        prefix = name[: -len(".tq_weight")]
        scale = tensors.get(f"{prefix}.tq_scale")
        if scale is None:
            continue
        out.append(QLinear(name=prefix, method="ternary", layout="ternary-rows", tensors=[name, scale.name],
                           logical=t.numel, bits=2, granularity="per-channel", group_size=-1,
                           weight_dtype="ternary", producer="tq"))
    return out


def _read_ternary(view: ConfigView, draft: Draft, family: str, tensor_method: str | None) -> None:
    draft.expected_method = "ternary"
    draft.config_method = view.quant_method
    draft.expected_bits = (view.quant or {}).get("bits")


TERNARY = Format(
    method="ternary",
    label="Ternary",
    layouts=(Layout("ternary-rows"),),
    families=(Family("ternary", ("ternary",), reader=_read_ternary, scanner=_scan_ternary, scan_rank=5),),
    variants=(Variant("2-bit rows", {"weight_bits": 2, "weight_dtype": "ternary"}),),
)


def _ternary_fixture(bits: int = 2) -> b.Fixture:
    cfg = b.llama_config()
    cfg["quantization_config"] = {"quant_method": "ternary", "bits": bits}

    def linear(p: str, o: int, i: int) -> b.Spec:
        return {f"{p}.tq_weight": ("I8", (o, i)), f"{p}.tq_scale": ("F16", (o, 1))}

    return b.Fixture(b.model_tensors(b.DEFAULT, linear), {"config.json": cfg})


def test_a_format_registered_at_run_time_flows_through_classify_text_and_the_matrix(tmp_path: Path) -> None:
    fx = _ternary_fixture()
    before = classify(fx.checkpoint())
    assert before.quantization.method == "unknown"  # nobody knows it yet
    with REGISTRY.temporarily(TERNARY):
        insp = classify(fx.checkpoint())
        q = insp.quantization
        assert (q.method, q.weight_bits, q.group_size, q.producer, q.config_method) == ("ternary", 2, -1, "tq", "ternary")
        assert not insp.findings and "no quantization config" not in " ".join(insp.warnings)
        assert quant_phrase(q).startswith("Ternary W2A16 (ternary, per-channel)")
        mismatch = classify(_ternary_fixture(bits=4).checkpoint())
        assert mismatch.findings[0].message.startswith("config says 4-bit weights, but packed tensor shapes give 2")
        # the matrix accepts rules naming it, and judges it by them
        root = _matrix_dir(tmp_path, """
            [[rule]]
            id = "ternary-rows"
            methods = ["ternary"]
            match = { weight_bits = 2 }
            status = "native"
            kernel = "TernaryLinear"
            sources = ["s"]
        """)
        try:
            matrix = load_matrix(root)
            verdict = resolve_one(matrix, insp, parse_engine_spec("eng", matrix), matrix.gpus.lookup("hopper"))
            # the weight format is judged by the new rule; this ad-hoc matrix has no architecture data
            assert (verdict.dimensions[0].status, verdict.kernel) == ("native", "TernaryLinear")
        finally:
            clear_cache()
    assert "ternary" not in REGISTRY and REGISTRY.family("ternary") is None
    assert classify(fx.checkpoint()).quantization.method == "unknown"
    clear_cache()
    with pytest.raises(MatrixDataError, match="method 'ternary' is not canonical"):
        load_matrix(root).validate()
    clear_cache()


def test_registering_a_clashing_format_or_quant_method_is_refused() -> None:
    with pytest.raises(ValueError, match="format 'fp8' is already registered"):
        REGISTRY.register(Format("fp8", "FP8 again"))
    with pytest.raises(ValueError, match="quant_method 'gptq' already read by 'gptq'"):
        REGISTRY.register(Format("x", "X", families=(Family("x", ("gptq",)),)))
    assert "x" not in REGISTRY
