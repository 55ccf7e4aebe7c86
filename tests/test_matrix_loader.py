"""Matrix data validation: every schema violation names file, rule, check and problem (exit 2)."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from qcheck.errors import QcheckError
from qcheck.matrix.loader import clear_cache, load_matrix
from qcheck.matrix.schema import MatrixDataError

TEST_MATRIX = Path(__file__).parent / "data" / "matrices"

HEAD = """
[engine]
id = "eng"
name = "Eng"
kind = "engine"
versions = ["1.0.0", "2.0.0"]
hardware = ["nvidia"]
hardware_sources = ["s"]

[sources]
s = { ref = "example/eng: src/quant.py", version = "2.0.0" }
"""

GOOD_RULE = """
[[rule]]
id = "ok"
methods = ["fp8"]
status = "native"
sources = ["s"]
"""


def _with_backends(second: str) -> str:
    """HEAD with a CUDA backend and a second one (a one-line TOML table)."""
    return HEAD.replace('hardware_sources = ["s"]\n', 'hardware_sources = ["s"]\nbackends = { cuda = { vendors = '
                        f'["nvidia"] }}, {second} }}\n')


def test_a_backend_can_be_the_default_for_some_of_its_vendors(mdir: Path) -> None:
    """Vulkan runs on NVIDIA and AMD GPUs but is the default only where nothing else is: one default per vendor,
    never the first in file order."""
    write_engine(mdir, _with_backends('vulkan = { vendors = ["nvidia", "amd"], default = ["amd"] }') + GOOD_RULE)
    engine = load_matrix(mdir).engines["eng"]
    assert [engine.default_backend(v).name for v in ("nvidia", "amd")] == ["cuda", "vulkan"]
    assert engine.default_backend("intel") is None


@pytest.fixture
def mdir(tmp_path: Path) -> Path:
    root = tmp_path / "matrices"
    (root / "engines").mkdir(parents=True)
    shutil.copy(TEST_MATRIX / "gpus.toml", root / "gpus.toml")
    clear_cache()
    yield root
    clear_cache()


def write_engine(root: Path, body: str, name: str = "eng") -> None:
    (root / "engines" / f"{name}.toml").write_text(textwrap.dedent(body), encoding="utf-8")


def error_of(root: Path, engine: str = "eng") -> MatrixDataError:
    """The error of a broken matrix: the same when the engine is used and when every file is validated
    (engine files are validated when first used, so both ways are asked)."""
    clear_cache()
    with pytest.raises(MatrixDataError) as used:
        load_matrix(root).engine(engine)
    clear_cache()
    with pytest.raises(MatrixDataError) as validated:
        load_matrix(root).validate()
    clear_cache()
    assert str(validated.value) == str(used.value)
    return used.value


def test_test_matrix_loads() -> None:
    clear_cache()
    m = load_matrix(TEST_MATRIX)
    assert set(m.engines) == {"fastserve", "tinycpp", "cloudco"}
    assert [r.id for r in m.engines["fastserve"].rules][:2] == ["plain-fp16", "plain-bf16-pre-ampere"]
    assert [r.id for r in m.engines["fastserve"].modifiers] == ["gguf-split"]
    assert m.engines["tinycpp"].scheme == "build"
    assert load_matrix(TEST_MATRIX) is m  # cached: loaded once per process


def test_good_engine_loads(mdir: Path) -> None:
    write_engine(mdir, HEAD + GOOD_RULE)
    m = load_matrix(mdir)
    assert m.engines["eng"].rules[0].status == "native"


@pytest.mark.parametrize(
    ("body", "check", "fragment"),
    [
        (HEAD + GOOD_RULE.replace('status = "native"', 'status = "native"\nhardwre = { vendor = "nvidia" }'),
         "unknown-key", "hardwre: unknown key; did you mean 'hardware'?"),
        (HEAD + GOOD_RULE.replace('status = "native"', 'status = "works"'), "bad-status", "'works'"),
        (HEAD + GOOD_RULE.replace('["fp8"]', '["fp8", "fp3"]'), "unknown-method", "'fp3'"),
        (HEAD + GOOD_RULE.replace('sources = ["s"]', 'sources = ["nope"]'), "undefined-source", "'nope'"),
        (HEAD + GOOD_RULE.replace('sources = ["s"]\n', ""), "missing-source", "at least one source"),
        (HEAD + GOOD_RULE.replace('status = "native"', 'status = "unknown"'), "missing-reason", "'unknown'"),
        (HEAD + GOOD_RULE.replace('status = "native"', 'status = "fallback"\nreasons = ["slow"]'),
         "missing-kernel", "substitute path"),
        (HEAD + GOOD_RULE.replace('methods', 'versions = ">=1.0,<<2"\nmethods'), "bad-version-spec", ">=1.0,<<2"),
        (HEAD + GOOD_RULE + GOOD_RULE, "duplicate-rule-id", "'ok'"),
        (HEAD + GOOD_RULE.replace('status', 'hardware = { vendor = "nvida" }\nstatus'), "unknown-vendor", "'nvida'"),
        (HEAD + GOOD_RULE.replace('status', 'hardware = { arch = ["hopper", "hoper"] }\nstatus'), "unknown-arch",
         "'hoper'"),
        (HEAD + GOOD_RULE.replace('status', 'hardware = { gpu = "h1000" }\nstatus'), "unknown-gpu", "'h1000'"),
        (HEAD + GOOD_RULE.replace('status', 'hardware = { cc = "about 9" }\nstatus'), "bad-version-spec", "about 9"),
        (HEAD + GOOD_RULE.replace('status', 'hardware = { has = ["fp7"] }\nstatus'), "unknown-format", "'fp7'"),
        (HEAD + GOOD_RULE.replace('status', 'hardware = { colour = "green" }\nstatus'), "unknown-hardware-key",
         "'colour'"),
        (HEAD + GOOD_RULE.replace('status', 'match = { weight_bitz = 4 }\nstatus'), "unknown-match-key", "'weight_bitz'"),
        (HEAD + GOOD_RULE.replace('status', 'match = { weight_bits = "four" }\nstatus'), "bad-match-value", "four"),
        (HEAD + GOOD_RULE.replace('status', 'match = { moe = "yes" }\nstatus'), "bad-match-value", "true or false"),
        (HEAD + GOOD_RULE.replace('status', 'match = { gguf_types_any_in = [] }\nstatus'), "bad-match-value",
         "non-empty list"),
        (HEAD + GOOD_RULE.replace('status', 'backend = "cuda"\nstatus'), "unknown-backend", "'cuda'"),
        (HEAD + GOOD_RULE.replace('status', 'warnings = [{ text = "wide heads" }]\nstatus'), "missing-key", "match"),
        (HEAD + GOOD_RULE.replace('status', 'warnings = [{ text = "x", match = { head_size = 8 } }]\nstatus'),
         "unknown-match-key", "'head_size'"),
        (HEAD + GOOD_RULE.replace('status', 'warnings = [5]\nstatus'), "bad-type", "{ text, match } tables"),
        (HEAD + GOOD_RULE.replace('status = "native"', 'status = "native"\nkernel = "k for {typess}"'),
         "bad-placeholder", "{typess}"),
        (HEAD.replace('versions = ["1.0.0", "2.0.0"]', 'versions = ["2.0.0", "1.0.0"]') + GOOD_RULE,
         "versions-order", "oldest first"),
        (HEAD.replace('versions = ["1.0.0", "2.0.0"]', 'versions = ["1.0.0", "two"]') + GOOD_RULE,
         "bad-version", "'two'"),
        (HEAD.replace('id = "eng"', 'id = "other"') + GOOD_RULE, "file-name-mismatch", "'eng'"),
        (HEAD.replace('kind = "engine"', 'kind = "cloud"') + GOOD_RULE, "bad-type", "'cloud'"),
        (HEAD.replace('hardware_sources = ["s"]\n', "") + GOOD_RULE, "missing-source", "hardware_sources"),
        (HEAD + '\n[[modifier]]\nid = "m"\nsources = ["s"]\n', "missing-key", "must add"),
        (HEAD + GOOD_RULE + '\n[[modifier]]\nid = "ok"\nreasons = ["x"]\nsources = ["s"]\n', "duplicate-rule-id",
         "'ok'"),
        (HEAD + GOOD_RULE + '\n[[suggestion]]\nid = "sg"\ntext = "t"\nsources = ["s"]\nwhen = ["sometimes"]\n',
         "bad-status", "'sometimes'"),
        (HEAD + GOOD_RULE + "\n[extra]\nx = 1\n", "unknown-key", "'extra'"),
        (HEAD + '[[rule]\nid = \n', "toml-syntax", "line"),
        (_with_backends("vulkan = { vendors = [\"nvidia\", \"amd\"] }") + GOOD_RULE, "ambiguous-backend",
         "both cuda and vulkan would be the default backend on nvidia"),
        (_with_backends("vulkan = { vendors = [\"nvidia\", \"amd\"], default = [\"intel\"] }") + GOOD_RULE,
         "bad-value", "'intel' is not one of this backend's vendors"),
        (_with_backends("vulkan = { vendors = [\"amd\"], default = \"yes\" }") + GOOD_RULE, "bad-type",
         "list of the vendors"),
    ],
)
def test_violation_names_file_rule_and_check(mdir: Path, body: str, check: str, fragment: str) -> None:
    write_engine(mdir, body)
    err = error_of(mdir)
    assert isinstance(err, QcheckError) and err.exit_code == 2
    assert err.check == check, str(err)
    message = str(err)
    assert "matrices/engines/eng.toml" in message
    assert f"[{check}]" in message
    assert fragment in message
    if check in ("unknown-key", "bad-status", "unknown-method", "missing-reason", "missing-kernel") and \
            "extra" not in body and "sometimes" not in body:
        assert "rule 'ok' (#" in message


def test_rule_error_names_the_rule_by_id_and_position(mdir: Path) -> None:
    body = HEAD + GOOD_RULE + GOOD_RULE.replace('id = "ok"', 'id = "second"').replace('"native"', '"great"')
    write_engine(mdir, body)
    err = error_of(mdir)
    assert err.rule == "rule 'second' (#2)"
    assert str(err).startswith("matrix data error: matrices/engines/eng.toml: rule 'second' (#2): [bad-status]")


def test_provider_rules_cannot_name_hardware(mdir: Path) -> None:
    body = """
    [engine]
    id = "eng"
    name = "Eng"
    kind = "provider"
    versions = ["2026.1"]

    [sources]
    s = { ref = "https://example.org", version = "2026.1" }

    [[rule]]
    id = "r"
    status = "native"
    hardware = { vendor = "nvidia" }
    sources = ["s"]
    """
    write_engine(mdir, body)
    assert error_of(mdir).check == "hardware-on-provider"


def test_engine_alias_collision_across_files(mdir: Path) -> None:
    write_engine(mdir, HEAD.replace('name = "Eng"', 'name = "Eng"\naliases = ["shared"]') + GOOD_RULE)
    write_engine(mdir, HEAD.replace('id = "eng"', 'id = "two"').replace('name = "Eng"', 'name = "Two"\naliases = ["Shared"]')
                 + GOOD_RULE, name="two")
    err = error_of(mdir, "shared")  # an alias: every file's names are read, and the clash is found
    assert err.check == "duplicate-name" and "'Shared'" in str(err)


@pytest.mark.parametrize(
    ("edit", "check", "fragment"),
    [
        (lambda s: s.replace('id = "h200"', 'id = "h100"'), "duplicate-id", "'h100'"),
        (lambda s: s.replace('names = ["H200"]', 'names = ["H 100"]'), "duplicate-name", "'H 100'"),
        (lambda s: s.replace('arch = "ada"', 'arch = "lovelace"', 1), "unknown-arch", "'lovelace'"),
        (lambda s: s.replace('id = "l4"\nnames = ["L4"]\narch = "ada"\ncompute_capability = "8.9"',
                             'id = "l4"\nnames = ["L4"]\narch = "ada"\ncompute_capability = "9.0"'), "cc-mismatch",
         "9.0"),
        (lambda s: s.replace('vendor = "apple"', 'vendor = "apples"'), "unknown-vendor", "'apples'"),
        (lambda s: s.replace('native_formats = ["fp32", "fp16"]', 'native_formats = ["fp32", "fp17"]', 1),
         "unknown-format", "'fp17'"),
        (lambda s: s.replace('compute_capability = "7.0"\nnative', 'native', 1), "missing-key", "compute_capability"),
        (lambda s: s + '\n[[arch]]\nid = "x"\nvendor = "cpu"\nnative_formats = ["fp32"]\nsource = "t"\nspeed = 3\n',
         "unknown-key", "speed: unknown key"),
        (lambda s: s.replace('id = "h200"', 'id = "h200"\nvariant_of = "h999"'), "bad-variant", "'h999'"),
        (lambda s: s.replace('id = "h200"', 'id = "h200"\nvariant_of = "h100"'), "bad-variant",
         "default_because"),  # a product with variants says why its default is judged
        (lambda s: s.replace('id = "h100"', 'id = "h100"\ndefault_because = "x"'), "bad-variant",
         "only such a product does"),
        (lambda s: s.replace('id = "l4"', 'id = "l4"\nvariant_of = "h100"').replace(
            'id = "h100"', 'id = "h100"\ndefault_because = "x"'), "bad-variant", "architecture (hopper)"),
    ],
)
def test_gpu_file_violations(mdir: Path, edit, check: str, fragment: str) -> None:
    gpus = mdir / "gpus.toml"
    gpus.write_text(edit(gpus.read_text()), encoding="utf-8")
    write_engine(mdir, HEAD + GOOD_RULE)
    err = error_of(mdir)
    assert err.check == check, str(err)
    assert "matrices/gpus.toml" in str(err) and fragment in str(err)


def test_missing_gpus_file(mdir: Path) -> None:
    (mdir / "gpus.toml").unlink()
    assert "gpus.toml is missing" in str(error_of(mdir))


def test_environment_variable_selects_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_cache()
    monkeypatch.setenv("QCHECK_MATRICES", str(TEST_MATRIX))
    try:
        assert set(load_matrix().engines) == {"fastserve", "tinycpp", "cloudco"}
    finally:
        clear_cache()


KV = """
[kv_cache]
flag = "--cache-type-k/--cache-type-v"
accepts = ["f16", "q8_0", "q4_0"]
separate = true
default = "f16"
sources = ["s"]
"""

KV_RULE = """
[[kv_rule]]
id = "pair"
pairs = ["q8_0-q4_0"]
status = "fallback"
kernel = "f16 conversion of {k}-{v}"
reasons = ["converting {k} and {v}"]
sources = ["s"]
"""

SCALE_RULE = """
[[kv_scale_rule]]
id = "scales"
dtypes = ["q8_0"]
missing = "kv"
message = "{covered} of {layers} layers ({example}): scale 1.0 for {k}"
sources = ["s"]
"""


def test_a_kv_rule_about_a_pair_loads_with_its_conditions(mdir: Path) -> None:
    write_engine(mdir, HEAD + GOOD_RULE + KV + KV_RULE + KV_RULE.replace('"pair"', '"knob"').replace(
        'pairs = ["q8_0-q4_0"]', 'k_dtypes = ["q8_0"]\nv_dtypes = ["q4_0", "q8_0"]\nmixed = true\n'
        'knobs = { flash_attn = false, n_ubatch = "null" }'))
    engine = load_matrix(mdir).engines["eng"]
    assert engine.kv_cache is not None and engine.kv_cache.separate and engine.kv_cache.default == "f16"
    pair, knob = engine.kv_rules
    assert pair.pair.holds("q8_0", "q4_0") and not pair.pair.holds("q4_0", "q8_0")
    assert knob.pair.holds("q8_0", "q4_0") and not knob.pair.holds("q8_0", "q8_0")  # mixed = true
    assert knob.knobs == (("flash_attn", False), ("n_ubatch", None))
    # specificity: pairs constrain both sides (2); k, v, mixed and each knob one
    assert (pair.rule.specificity, knob.rule.specificity) == (2, 5)


@pytest.mark.parametrize(
    ("body", "check", "fragment"),
    [
        (KV + KV_RULE.replace('pairs = ["q8_0-q4_0"]\n', ""), "missing-key", "needs one of dtypes"),
        (KV + KV_RULE.replace('"q8_0-q4_0"', '"q8_0+q4_0"'), "bad-match-value", "is not K-V"),
        (KV + KV_RULE.replace('"q8_0-q4_0"', '"q8_0-fp8"'), "bad-match-value", "is not K-V"),
        (KV + KV_RULE.replace('pairs = ["q8_0-q4_0"]', 'k_dtypes = ["q5_1"]'), "bad-match-value", "['q5_1']"),
        (KV + KV_RULE.replace('pairs = ["q8_0-q4_0"]', 'dtypes = ["q8_0"]\nknobs = { flash = true }'),
         "unknown-match-key", "'flash' is not an engine knob"),
        (KV + KV_RULE.replace('pairs = ["q8_0-q4_0"]', 'dtypes = ["q8_0"]\nknobs = { flash_attn = "on" }'),
         "bad-match-value", "knobs.flash_attn"),
        (KV + KV_RULE.replace('pairs = ["q8_0-q4_0"]', 'dtypes = ["q8_0"]\nmixed = "yes"'), "bad-type", "mixed"),
        (KV + KV_RULE.replace('kernel = "f16 conversion of {k}-{v}"', 'kernel = "{kk}"'), "bad-placeholder",
         "{kk}"),
        (KV.replace('default = "f16"\n', ""), "missing-key", "needs the default type"),
        (KV.replace('default = "f16"', 'default = "q5_1"'), "bad-match-value", "default 'q5_1'"),
        (KV.replace('separate = true\n', "").replace('default = "f16"\n', "") + KV_RULE, "bad-match-value",
         "need [kv_cache] separate = true"),
        (KV + SCALE_RULE.replace('missing = "kv"', 'missing = "k"'), "bad-match-value", "missing 'k'"),
        (KV + SCALE_RULE.replace('["q8_0"]', '["fp8"]'), "bad-match-value", "['fp8']"),
        (KV + SCALE_RULE.replace('message = "{covered} of {layers} layers ({example}): scale 1.0 for {k}"\n', ""),
         "missing-key", "message"),
        (KV + SCALE_RULE.replace("{example}", "{examples}"), "bad-placeholder", "{examples}"),
        (SCALE_RULE, "missing-key", "needs the engine's [kv_cache]"),
    ],
)
def test_kv_violations_name_the_check(mdir: Path, body: str, check: str, fragment: str) -> None:
    write_engine(mdir, HEAD + GOOD_RULE + body)
    err = error_of(mdir)
    assert err.check == check, str(err)
    assert fragment in str(err)


def test_a_kv_placeholder_is_refused_in_a_weight_rule(mdir: Path) -> None:
    write_engine(mdir, HEAD + GOOD_RULE.replace('status = "native"', 'status = "native"\nkernel = "{k}"'))
    assert error_of(mdir).check == "bad-placeholder"


def test_a_kv_scale_rule_loads(mdir: Path) -> None:
    write_engine(mdir, HEAD + GOOD_RULE + KV + SCALE_RULE)
    (rule,) = load_matrix(mdir).engines["eng"].kv_scale_rules
    assert (rule.dtypes, rule.missing, rule.rule.reasons[0][:20]) == (frozenset({"q8_0"}), "kv", "{covered} of {layers")


