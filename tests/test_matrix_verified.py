"""A rule answers only at the releases it was read at (``verified``, matrices/SCHEMA.md §2.3'), gates decide, and
rules extracted from the released code (``matrices/generated/``) load beside the hand-written ones.

Each test writes a small matrix directory (the test GPUs plus one engine file) and asks it through the resolver or
the real CLI, so the mechanism is exercised exactly as the shipped data uses it.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from qcheck.cli import cli
from qcheck.matrix.audit import audit
from qcheck.matrix.loader import clear_cache, load_matrix
from qcheck.matrix.resolve import parse_engine_spec, resolve_one
from qcheck.matrix.schema import MatrixDataError
from qcheck.matrix.versions import parse_verified, parse_version
from qcheck.model import Inspection, Quantization

TEST_GPUS = Path(__file__).parent / "data" / "matrices" / "gpus.toml"

HEAD = """
[engine]
id = "demo"
name = "Demo"
kind = "engine"
versions = ["0.10.0", "0.20.0", "0.30.0"]
hardware = ["nvidia"]
hardware_sources = ["code_30"]
rules_verified = true

[sources]
code_10 = { ref = "example/demo: quant.py:10-12", version = "0.10.0" }
code_30 = { ref = "example/demo: quant.py:40-44", version = "0.30.0" }
"""

RULES = """
[[rule]]
id = "fp8-any"
verified = [">=0.10.0,<=0.30.0"]
methods = ["fp8"]
hardware = { vendor = "nvidia" }
status = "native"
kernel = "dense FP8"
sources = ["code_10", "code_30"]

[[rule]]
id = "fp8-block-new"
verified = ["0.30.0"]
methods = ["fp8"]
match = { scale_granularity = "block" }
hardware = { vendor = "nvidia" }
status = "fallback"
kernel = "Triton block FP8"
reasons = ["no CUTLASS block kernel"]
sources = ["code_30"]

[[rule]]
id = "none-old"
verified = "0.10.0"
methods = ["none"]
status = "unsupported"
reasons = ["refused at 0.10.0"]
sources = ["code_10"]

[[rule]]
id = "none-new"
verified = "0.30.0"
methods = ["none"]
status = "native"
kernel = "dense"
sources = ["code_30"]
"""


def write_matrix(root: Path, engine_text: str, generated: str | None = None, facts: str | None = None) -> Path:
    (root / "engines").mkdir(parents=True, exist_ok=True)
    shutil.copy(TEST_GPUS, root / "gpus.toml")
    (root / "engines" / "demo.toml").write_text(textwrap.dedent(engine_text))
    if generated is not None:
        (root / "generated").mkdir(exist_ok=True)
        (root / "generated" / "demo.toml").write_text(textwrap.dedent(generated))
    if facts is not None:
        (root / "generated" / "demo.facts.toml").write_text(textwrap.dedent(facts))
    clear_cache()
    return root


def st(method: str, **quant: object) -> Inspection:
    return Inspection(path="model", container="safetensors", dtype="bfloat16",
                      quantization=Quantization(method=method, **quant))  # type: ignore[arg-type]


def ask(root: Path, inspection: Inspection, engine: str, gpu: str = "h100"):
    m = load_matrix(root)
    return resolve_one(m, inspection, parse_engine_spec(engine, m), m.gpus.lookup(gpu))


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    yield write_matrix(tmp_path / "m", HEAD + RULES)
    clear_cache()


def test_a_rule_answers_only_where_it_was_read(demo: Path) -> None:
    assert (ask(demo, st("none"), "demo==0.30.0").status, ask(demo, st("none"), "demo==0.10.0").status) == \
        ("native", "unsupported")
    v = ask(demo, st("none"), "demo==0.20.0")
    assert (v.status, v.rule_id) == ("unknown", "not-read")
    assert "Demo 0.20.0 was not read for this" in v.reasons[0]
    # both rules hold (same conditions, neither read at 0.20.0): the reason names each with where it was read
    assert "'none-old' (unsupported) was read at 0.10.0" in v.reasons[0]
    assert "'none-new' (native) was read at 0.30.0" in v.reasons[0]
    assert {s.version for s in v.sources} == {"0.10.0", "0.30.0"}


def test_a_closed_range_covers_the_releases_between_its_ends(demo: Path) -> None:
    v = ask(demo, st("fp8", scale_granularity="per-tensor"), "demo==0.20.0")
    assert (v.status, v.rule_id) == ("native", "fp8-any")


def test_a_less_specific_rule_never_answers_for_an_unread_more_specific_one(demo: Path) -> None:
    """Block FP8 was read at 0.30.0 only: at 0.20.0 the general FP8 rule (read there) must not answer for it."""
    assert ask(demo, st("fp8", scale_granularity="block"), "demo==0.30.0").rule_id == "fp8-block-new"
    v = ask(demo, st("fp8", scale_granularity="block"), "demo==0.20.0")
    assert (v.status, v.rule_id) == ("unknown", "not-read")
    assert "'fp8-block-new' (fallback) was read at 0.30.0" in v.reasons[0]


def test_newer_and_pre_release_versions_are_judged_at_the_release(demo: Path) -> None:
    newer = ask(demo, st("none"), "demo==0.31.0")
    assert (newer.status, newer.rule_id) == ("native", "none-new")
    assert any("0.31.0 is newer, unverified" in w for w in newer.warnings)
    assert ask(demo, st("none"), "demo==0.30.0rc1").rule_id == "none-new"


def test_through_the_cli_the_json_names_the_range_read(demo: Path, tmp_path: Path, monkeypatch) -> None:
    from support import builders as b

    model = b.bf16_llama().write(tmp_path / "model")
    monkeypatch.setenv("QCHECK_MATRICES", str(demo))
    result = CliRunner().invoke(cli, ["check", str(model), "--engine", "demo==0.20.0", "--gpu", "h100", "--json"],
                                standalone_mode=False, catch_exceptions=False)
    verdict = json.loads(result.stdout)["verdicts"][0]
    assert result.return_value == 1
    assert (verdict["status"], verdict["rule_id"]) == ("unknown", "not-read")
    assert "read at 0.10.0" in " ".join(verdict["reasons"])


@pytest.mark.parametrize(("text", "check", "fragment"), [
    ('[[rule]]\nid = "x"\nmethods = ["gguf"]\nstatus = "native"\nsources = ["code_30"]\n', "missing-verified",
     "every rule must state the releases"),
    ('[[rule]]\nid = "x"\nverified = ">=0.10.0"\nmethods = ["gguf"]\nstatus = "native"\nsources = ["code_30"]\n',
     "bad-verified", "open-ended"),
    ('[[rule]]\nid = "x"\nversions = ">=0.20.0"\nverified = ["0.10.0", "0.30.0"]\nmethods = ["gguf"]\n'
     'status = "native"\nsources = ["code_30"]\n', "bad-verified", "outside the rule's versions"),
    ('[[rule]]\nid = "x"\nverified = []\nmethods = ["gguf"]\nstatus = "native"\nsources = ["code_30"]\n',
     "bad-verified", "non-empty list"),
    ('[[rule]]\nid = "x"\nverified = "0.30.0"\ngate = true\nmethods = ["gguf"]\nstatus = "native"\n'
     'sources = ["code_30"]\n', "bad-type", "only an 'unsupported' rule is a gate"),
])
def test_validation_refuses_rules_without_an_honest_range(tmp_path: Path, text: str, check: str,
                                                          fragment: str) -> None:
    root = write_matrix(tmp_path / "m", HEAD + text)
    with pytest.raises(MatrixDataError) as err:
        load_matrix(root).engines["demo"]
    assert err.value.check == check and fragment in err.value.problem, str(err.value)
    assert "rule 'x'" in str(err.value)


def test_a_file_not_yet_migrated_answers_as_before_and_is_counted(tmp_path: Path) -> None:
    legacy = HEAD.replace("rules_verified = true\n", "") + \
        '[[rule]]\nid = "gguf-any"\nmethods = ["gguf"]\nstatus = "native"\nkernel = "k"\nsources = ["code_30"]\n'
    root = write_matrix(tmp_path / "m", legacy + RULES)
    gguf = Inspection(path="m.gguf", container="gguf", quantization=Quantization(method="gguf"))
    assert ask(root, gguf, "demo==0.10.0").rule_id == "gguf-any"
    assert audit(load_matrix(root)).unverified == {"demo": 1}


def test_verified_values() -> None:
    v = parse_verified([">=0.14.0,<=0.28.0", "0.33.0"])
    assert v.label == "0.14.0-0.28.0, 0.33.0"
    assert [v.covers(parse_version(x)) for x in ("0.13.0", "0.14.0", "0.20.0", "0.28.0", "0.30.0", "0.33.0")] == \
        [False, True, True, True, False, True]
    assert parse_verified("==0.5.23").covers(parse_version("0.5.23"))
    build = parse_verified([">=b6301,<=b8895", "b11312"], "build")
    assert build.covers(parse_version("b7000", "build")) and not build.covers(parse_version("b9000", "build"))
    for bad in ("<0.28.0", ">=0.1", "", ["0.1", 3], "not a version"):
        with pytest.raises(ValueError):
            parse_verified(bad)


GATE = """
[[rule]]
id = "fp8-refused-old-gpus"
verified = ["0.10.0", "0.20.0"]
gate = true
methods = ["fp8"]
hardware = { vendor = "nvidia", cc = "<8.9" }
status = "unsupported"
reasons = ["Minimum capability: 89"]
sources = ["code_10"]
"""


def test_a_gate_read_at_the_version_decides_over_unread_rules(tmp_path: Path) -> None:
    rules = RULES.replace('id = "fp8-any"\nverified = [">=0.10.0,<=0.30.0"]', 'id = "fp8-any"\nverified = ["0.30.0"]')
    root = write_matrix(tmp_path / "m", HEAD + rules + GATE)
    v = ask(root, st("fp8", scale_granularity="block"), "demo==0.20.0", gpu="a100")
    assert (v.status, v.rule_id) == ("unsupported", "fp8-refused-old-gpus")
    # where the gate was not read, the rules read there answer
    assert ask(root, st("fp8", scale_granularity="block"), "demo==0.30.0", gpu="a100").rule_id == "fp8-block-new"
    audit(load_matrix(root))  # no hand rule read at 0.10.0/0.20.0 runs what the gate refuses


def test_validate_fails_where_a_rule_read_at_a_version_runs_what_a_gate_refuses(tmp_path: Path) -> None:
    # the wider fp8-any (every NVIDIA GPU) is refined by the gate, not contradicted by it
    root = write_matrix(tmp_path / "m", HEAD + RULES + GATE)
    assert ask(root, st("fp8"), "demo==0.20.0", gpu="a100").rule_id == "fp8-refused-old-gpus"
    audit(load_matrix(root))
    # a rule about exactly the GPUs the gate refuses, read where the gate was, says the opposite
    ampere = ('\n[[rule]]\nid = "fp8-ampere"\nverified = "0.20.0"\nmethods = ["fp8"]\n'
              'hardware = { vendor = "nvidia", cc = ">=8.0,<8.9" }\nstatus = "native"\nkernel = "k"\n'
              'sources = ["code_30"]\n')
    root = write_matrix(tmp_path / "m2", HEAD + RULES + GATE + ampere)
    with pytest.raises(MatrixDataError) as err:
        audit(load_matrix(root))
    assert err.value.check == "contradicts-generated"
    assert "rule 'fp8-ampere'" in str(err.value) and "Minimum capability: 89" in err.value.problem


GENERATED = """
[generated]
engine = "demo"
generated_by = "python matrices/tools/extract_demo.py"
releases = ["0.10.0", "0.20.0", "0.30.0"]
facts = "generated/demo.facts.toml"

[sources]
gen_registry = { ref = "demo wheels: quant/__init__.py (METHODS)", version = "0.10.0-0.30.0" }

[[rule]]
id = "gen-gguf-not-registered"
verified = ["0.10.0", "0.20.0"]
gate = true
methods = ["gguf"]
status = "unsupported"
reasons = ["Unknown quantization method: gguf"]
sources = ["gen_registry"]
"""

FACTS = """
[facts]
engine = "demo"
generated_by = "python matrices/tools/extract_demo.py"
releases = ["0.10.0", "0.20.0", "0.30.0"]

[facts.read]
"0.10.0" = { file = "demo-0.10.0.whl", sha256 = "ZERO", sources_sha256 = "ZERO" }
"0.20.0" = { file = "demo-0.20.0.whl", sha256 = "ZERO", sources_sha256 = "ZERO" }
"0.30.0" = { file = "demo-0.30.0.whl", sha256 = "ZERO", sources_sha256 = "ZERO" }

[[fact]]
kind = "registry"
key = "gguf"
file = "demo/quant/__init__.py"
history = [{ value = false, from = "0.10.0", to = "0.20.0" }, { value = true, from = "0.30.0", to = "0.30.0" }]
""".replace("ZERO", "0" * 64)


def test_generated_rules_load_beside_the_hand_written_ones(tmp_path: Path) -> None:
    root = write_matrix(tmp_path / "m", HEAD + RULES, GENERATED, FACTS)
    m = load_matrix(root)
    gguf = Inspection(path="m.gguf", container="gguf", quantization=Quantization(method="gguf"))
    v = ask(root, gguf, "demo==0.10.0")
    assert (v.status, v.rule_id, v.reasons) == ("unsupported", "gen-gguf-not-registered",
                                                ["Unknown quantization method: gguf"])
    assert m.engines["demo"].generated_releases == ("0.10.0", "0.20.0", "0.30.0")
    assert [r.id for r in m.engines["demo"].rules if r.generated] == ["gen-gguf-not-registered"]
    m.validate()


@pytest.mark.parametrize(("change", "check"), [
    (lambda g, f: (g.replace('id = "gen-gguf-not-registered"', 'id = "none-new"'), f), "duplicate-rule-id"),
    (lambda g, f: (g.replace('verified = ["0.10.0", "0.20.0"]\n', ""), f), "missing-verified"),
    (lambda g, f: (g.replace('engine = "demo"', 'engine = "other"'), f), "file-name-mismatch"),
    (lambda g, f: (g, f.replace("0" * 64, "xyz", 1)), "bad-value"),
    (lambda g, f: (g, f.replace('from = "0.30.0"', 'from = "0.20.0"')), "versions-order"),
    (lambda g, f: (g, f.replace('to = "0.20.0"', 'to = "0.25.0"')), "bad-version"),
])
def test_generated_files_are_validated(tmp_path: Path, change, check: str) -> None:
    generated, facts = change(GENERATED, FACTS)
    root = write_matrix(tmp_path / "m", HEAD + RULES, generated, facts)
    with pytest.raises(MatrixDataError) as err:
        load_matrix(root).validate()
    assert err.value.check == check, str(err.value)


def test_the_migration_gives_each_rule_the_versions_its_sources_name(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "migrate_verified", Path(__file__).parent.parent / "matrices" / "tools" / "migrate_verified.py")
    assert spec and spec.loader
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    legacy = HEAD.replace("rules_verified = true\n", "") + textwrap.dedent("""
        [[rule]]
        id = "a"
        methods = ["gguf"]
        status = "native"
        sources = ["code_10", "code_30"]

        [[rule]]
        id = "b"
        versions = "<0.20.0"
        methods = ["fp8"]
        status = "native"
        sources = ["code_10", "code_30"]

        [[rule]]
        id = "c"
        versions = ">=0.20.0,<0.30.0"
        methods = ["none"]
        status = "unknown"
        reasons = ["gap"]
        sources = ["code_30"]
        """)
    migrated, left = tool.migrate(legacy)
    assert 'id = "a"\nverified = ["0.10.0", "0.30.0"]\n' in migrated
    assert 'id = "b"\nverified = ["0.10.0"]\n' in migrated
    assert left == ["rule 'c': no source names a version inside its range"]
    assert migrated.count("rules_verified = true") == 1
    root = write_matrix(tmp_path / "m", migrated.replace('reasons = ["gap"]', 'reasons = ["gap"]\nverified = '
                                                                              '">=0.20.0,<0.30.0"'))
    assert load_matrix(root).engines["demo"].rules_verified


KV = """
[kv_cache]
flag = "--kv-cache-dtype"
accepts = ["auto", "fp8"]
sources = ["code_30"]

[[kv_rule]]
id = "kv-fp8-new"
verified = "0.30.0"
dtypes = ["fp8"]
hardware = { vendor = "nvidia" }
status = "native"
kernel = "FP8 attention"
sources = ["code_30"]
"""


def test_kv_rules_answer_only_where_read(tmp_path: Path) -> None:
    from qcheck.matrix.resolve import resolve_with_types
    from qcheck.request import Deploy, KVCacheTypes

    root = write_matrix(tmp_path / "m", HEAD + RULES + KV)
    m = load_matrix(root)
    deploy = Deploy(kv_cache=KVCacheTypes("fp8", "fp8"))
    for version, status, rule_id in (("0.30.0", "native", "kv-fp8-new"), ("0.20.0", "unknown", "not-read")):
        verdict, _ = resolve_with_types(m, st("none"), parse_engine_spec(f"demo=={version}", m), m.gpus.lookup("h100"),
                                        deploy)
        kv = next(d for d in verdict.dimensions if d.dimension == "kv-cache")
        assert (kv.status, kv.rule_id) == (status, rule_id), kv
    assert "'kv-fp8-new' (native) was read at 0.30.0" in kv.reasons[0]
