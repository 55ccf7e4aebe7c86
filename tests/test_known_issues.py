"""The known-issues overlay (issue #24): tracker reports that change what a user gets, validated when loaded, shown
on the verdict (a warning and a "known-issue" risk, or the status they force), re-checked by
matrices/tools/verify_known_issues.py. Checkpoints are real header-only files; checks go through the pipeline on
both sides of every entry's version range."""

from __future__ import annotations

import importlib.util
import shutil
import sys
import textwrap
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from qcheck.errors import QcheckError
from qcheck.matrix.loader import clear_cache, load_matrix
from qcheck.matrix.schema import MatrixDataError
from qcheck.model import Verdict
from qcheck.pipeline import run
from qcheck.request import CheckRequest, Deploy, EngineKnobs, KVCacheTypes
from support import builders as b
from support.gguf_helpers import Q, write_gguf

SHIPPED = Path(__file__).resolve().parent.parent / "matrices"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("known")
    static = b.fp8_ct_static()
    del static.configs["config.json"]["quantization_config"]["kv_cache_scheme"]  # weights only: no KV question
    static.tensors = {k: v for k, v in static.tensors.items() if not k.endswith(("k_scale", "v_scale"))}
    gguf = write_gguf(root / "m-q8_0.gguf", [("blk.0.attn_q.weight", (256, 256), Q.Q8_0)])[0]
    return {"fp8": str(static.write(root / "fp8")), "block": str(b.fp8_block_deepseek().write(root / "block")),
            "gguf": str(gguf)}


def verdict(path: str, engine: str, gpu: str, kv: str | None = None, knobs: EngineKnobs | None = None) -> Verdict:
    deploy = Deploy(kv_cache=KVCacheTypes.parse(kv), knobs=knobs or EngineKnobs())
    return run(CheckRequest(path, (engine,), (gpu,), deploy)).verdicts[0]


def known(v: Verdict) -> list[str]:
    return [r.id for r in v.risks if r.kind == "known-issue"]


def test_flashinfer_fp8_linear_on_sm100_is_a_warning(files: dict[str, str]) -> None:
    v = verdict(files["fp8"], "vllm", "b200")
    assert v.status == "native" and known(v) == ["vllm-fp8-flashinfer-linear-sm100"]
    text = next(w for w in v.warnings if w.startswith("known-issues: "))
    assert "about 2x slower than the CUTLASS FP8 kernel" in text and "Workaround: --linear-backend cutlass." in text
    assert "https://github.com/vllm-project/vllm/issues/49723" in text
    assert known(verdict(files["fp8"], "vllm", "h100")) == []  # sm90: CUTLASS
    assert known(verdict(files["block"], "vllm", "b200")) == []  # block scales: another kernel list
    assert known(verdict(files["fp8"], "vllm==0.24.0", "b200")) == []  # before the range read (0.27.0)


def test_the_cutlass_fp8_selection_bug_decides_on_ampere_in_its_range(files: dict[str, str]) -> None:
    """0.29.0 and 0.30.0 pick the ungated CUTLASS FP8 kernel on sm80 and fail; 0.28.0 (Marlin first) and 0.31.0
    (the gate, PR #55884) run Marlin W8A16."""
    v = verdict(files["fp8"], "vllm==0.30.0", "a100")
    assert v.status == "unsupported" and known(v) == ["vllm-cutlass-fp8-selected-pre-ada"]
    assert v.reasons[0].startswith("known-issues: the CUTLASS FP8 linear kernel is selected on GPUs without FP8")
    assert verdict(files["fp8"], "vllm==0.29.0", "rtx-3090").status == "unsupported"
    for version in ("0.28.0", "0.31.0", "0.33.0"):
        other = verdict(files["fp8"], f"vllm=={version}", "a100")
        assert known(other) == [] and other.status == "fallback", version
    assert verdict(files["fp8"], "vllm==0.30.0", "l40s").status == "native"  # sm89: CUTLASS FP8 is real there
    assert known(verdict(files["block"], "vllm==0.30.0", "a100")) == []


def test_llama_cpp_kv_slow_paths(files: dict[str, str]) -> None:
    v = verdict(files["gguf"], "llama.cpp", "rtx-3090", "q8_0")
    assert known(v) == ["llamacpp-cuda-quantised-kv-prefill"] and v.status == "native"
    assert known(verdict(files["gguf"], "llama.cpp==b10361", "rtx-3090", "q4_0")) == [
        "llamacpp-cuda-quantised-kv-prefill"]
    assert known(verdict(files["gguf"], "llama.cpp", "rtx-3090")) == []  # an f16 cache: nothing to say
    assert known(verdict(files["gguf"], "llama.cpp:vulkan", "rtx-3090", "q8_0")) == []
    old = verdict(files["gguf"], "llama.cpp==b10068", "rtx-3090", "q4_1,q8_0", EngineKnobs(flash_attn=True))
    assert old.status == "fallback" and known(old) == ["llamacpp-cuda-fa-on-cpu-mixed"]
    assert any("about 34 t/s" in w for w in old.warnings)
    assert known(verdict(files["gguf"], "llama.cpp==b10068", "rtx-3090", "q4_1,q8_0")) == []  # -fa auto: refused
    # a pair without a vector kernel is not the prefill issue: at b10361 the op runs on the CPU, at b11312 the
    # whole cache is converted to f16 on every call (decode too); the KV rule says so
    at_b10361 = verdict(files["gguf"], "llama.cpp==b10361", "rtx-3090", "q4_1,q8_0", EngineKnobs(flash_attn=True))
    assert known(at_b10361) == ["llamacpp-cuda-fa-on-cpu-mixed"] and at_b10361.status == "fallback"
    at_b11312 = verdict(files["gguf"], "llama.cpp==b11312", "rtx-3090", "q4_1,q8_0", EngineKnobs(flash_attn=True))
    assert known(at_b11312) == [] and at_b11312.status == "fallback"


def test_the_shipped_issues_load_and_name_real_engines() -> None:
    m = load_matrix()
    ids = {i.rule.id for e in m.engines.values() for i in e.known_issues}
    assert {"vllm-fp8-flashinfer-linear-sm100", "vllm-cutlass-fp8-selected-pre-ada",
            "llamacpp-cuda-quantised-kv-prefill", "llamacpp-cuda-fa-on-cpu-mixed"} <= ids
    for engine in m.engines.values():
        for issue in engine.known_issues:
            assert issue.links and all(link.startswith("https://github.com/") for link in issue.links)
            assert issue.verified == "code" and issue.evidence


GOOD = """
[[issue]]
id = "x"
engine = "fastserve"
effect = "warning"
title = "t"
message = "m"
links = ["https://github.com/o/r/issues/1"]
verified = "code"
evidence = "o/r: f.py:1"
verified_at = "1.0.0"
tracker_state = "open"
"""


@pytest.fixture
def mdir(tmp_path: Path) -> Path:
    root = tmp_path / "matrices"
    shutil.copytree(Path(__file__).parent / "data" / "matrices", root)
    clear_cache()
    yield root
    clear_cache()


@pytest.mark.parametrize(("body", "check", "fragment"), [
    (GOOD.replace('effect = "warning"', 'effect = "slow"'), "bad-match-value", "effect 'slow'"),
    (GOOD.replace('"fastserve"', '"nope"'), "undefined-source", "engine 'nope'"),
    (GOOD.replace("https://github.com/o/r/issues/1", "issue 1"), "missing-source", "https://"),
    (GOOD.replace('verified = "code"', 'verified = "rumour"'), "bad-match-value", "verified 'rumour'"),
    (GOOD.replace('verified_at = "1.0.0"', 'verified_at = "one"'), "bad-version", "verified_at"),
    (GOOD + "colour = 1\n", "unknown-key", "colour"),
    (GOOD + GOOD, "duplicate-rule-id", "'x'"),
    (GOOD + 'match = { weight_bitz = 4 }\n', "unknown-match-key", "weight_bitz"),
    (GOOD + '[[issue.claims]]\npackage = "p"\n', "missing-key", "each claim needs"),
    (GOOD.replace('title = "t"\n', ""), "missing-key", "title"),
])
def test_a_bad_entry_is_refused_when_loaded(mdir: Path, body: str, check: str, fragment: str) -> None:
    (mdir / "known_issues.toml").write_text(textwrap.dedent(body), encoding="utf-8")
    with pytest.raises(MatrixDataError) as info:
        load_matrix(mdir).validate()  # engine files (and their issues) are read when first used, or all here
    assert isinstance(info.value, QcheckError) and info.value.check == check, str(info.value)
    assert "known_issues.toml" in str(info.value) and fragment in str(info.value)


def load_tool(name: str) -> ModuleType:
    tools = SHIPPED / "tools"
    sys.path.insert(0, str(tools))
    spec = importlib.util.spec_from_file_location(f"qcheck_tool_{name}", tools / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_verifier_checks_each_claim_and_refreshes_at_another_release(tmp_path: Path) -> None:
    tool = load_tool("verify_known_issues")
    issues = tmp_path / "known_issues.toml"
    issues.write_text(GOOD + textwrap.dedent('''
        [[issue.claims]]
        package = "eng"
        version = "1.0.0"
        dist = "wheel"
        path = "eng/kernels.py"
        pattern = 'ORDER = \\[(\\w+),'
        expect = "FastKernel"
        '''), encoding="utf-8")
    wheels = {"1.0.0": "ORDER = [FastKernel, Slow]\n", "2.0.0": "ORDER = [Slow, FastKernel]\n"}

    def fetch(package: str, version: str, dist: str, into: Path) -> Path:
        path = into / f"{package}-{version}.whl"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("eng/kernels.py", wheels[version])
        return path

    assert tool.main(["--issues", str(issues)], fetch) == 0
    assert tool.main(["--issues", str(issues), "--at", "eng=2.0.0"], fetch) == 1  # the order changed: re-read
    assert tool.load_issue_claims(issues, at={"eng": "2.0.0"})[0]["version"] == "2.0.0"
    assert tool.main(["--issues", str(issues), "--issue", "missing"], fetch) == 1
