"""The newest releases the matrix names (issue #24): vLLM 0.34.0, transformers 5.25.0, mlx-lm 0.32.2.

vLLM 0.34.0 and transformers 5.25.0 were re-read against the release before (the claims of
matrices/tools/claims.toml hold at both through `also_at`); where the code changed, a rule has a version
boundary, checked here through the real pipeline on both sides."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from qcheck.model import Verdict
from qcheck.pipeline import run
from qcheck.request import CheckRequest
from support import builders as b

TOOLS = Path(__file__).resolve().parent.parent / "matrices" / "tools"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("newest")
    return {"gpt-oss": str(b.gpt_oss_fixture().write(root / "gpt-oss")),
            "fp8-block": str(b.fp8_block_deepseek().write(root / "fp8-block"))}


def verdict(path: str, engine: str, gpu: str) -> Verdict:
    return run(CheckRequest(path, (engine,), (gpu,))).verdicts[0]


def test_transformers_mxfp4_on_cpu_needs_use_kernels_until_5_25(files: dict[str, str]) -> None:
    old = verdict(files["gpt-oss"], "transformers==5.24.0", "cpu")
    assert old.status == "native" and old.rule_id == "mxfp4-cpu-use-kernels"
    assert "from_pretrained(..., use_kernels=True)" in old.requires
    assert any("MXFP4 inference on CPU requires use_kernels=True" in w for w in old.warnings)
    new = verdict(files["gpt-oss"], "transformers==5.25.0", "cpu")
    assert new.status == "native" and new.rule_id == "mxfp4-cpu"
    assert not any("use_kernels" in r for r in [*new.requires, *new.warnings])
    # the newest data is the default
    assert verdict(files["gpt-oss"], "transformers", "cpu").rule_id == "mxfp4-cpu"
    # XPU was not touched by the change
    for version in ("5.24.0", "5.25.0"):
        assert verdict(files["gpt-oss"], f"transformers=={version}", "arc-a770").rule_id == "mxfp4-xpu"


@pytest.mark.parametrize("gpu", ["rtx-5090", "h100", "a100", "b200"])
def test_vllm_0_34_answers_as_0_33_where_the_code_did_not_change(files: dict[str, str], gpu: str) -> None:
    for name in ("gpt-oss", "fp8-block"):
        old, new = verdict(files[name], "vllm==0.33.0", gpu), verdict(files[name], "vllm==0.34.0", gpu)
        assert (new.status, new.rule_id, new.kernel) == (old.status, old.rule_id, old.kernel), (name, gpu)
        assert new.warnings == old.warnings and not any("unverified" in w for w in new.warnings)


def test_vllm_gpt_oss_on_sm120_stays_marlin_at_0_34(files: dict[str, str]) -> None:
    """On an RTX 5090 (sm120) vLLM 0.34 still runs GPT-OSS's MXFP4 MoE through Marlin's weight-only kernel: a
    fallback that names that kernel and why, whatever the rule is called."""
    v = verdict(files["gpt-oss"], "vllm==0.34.0", "rtx-5090")
    assert (v.status, v.compute_capability, v.engine_version) == ("fallback", "12.0", "0.34.0")
    assert v.kernel is not None and v.kernel.startswith("Marlin MXFP4 W4A16"), v.kernel
    assert any("Marlin" in r and "sm120" in r for r in v.reasons), v.reasons
    # the datacentre Blackwell (sm100) at the same release is not on that path
    b200 = verdict(files["gpt-oss"], "vllm==0.34.0", "b200")
    assert b200.compute_capability == "10.0" and not (b200.kernel or "").startswith("Marlin")


def _load_verify_claims() -> ModuleType:
    spec = importlib.util.spec_from_file_location("verify_claims_newest", TOOLS / "verify_claims.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_claims_also_at_expand_to_one_claim_per_release(tmp_path: Path) -> None:
    vc = _load_verify_claims()
    path = tmp_path / "claims.toml"
    path.write_text('[[claim]]\nengine = "e"\npackage = "e"\nversion = "1.0"\nalso_at = ["1.1", "2.0"]\n'
                    'dist = "wheel"\npath = "x"\npattern = "y"\npresent = true\n')
    assert [c["version"] for c in vc.load_claims(path)] == ["1.0", "1.1", "2.0"]
    shipped = vc.load_claims()
    for package, version in (("vllm", "0.34.0"), ("transformers", "5.25.0"), ("mlx-lm", "0.32.2")):
        assert any(c["package"] == package and c["version"] == version for c in shipped), (package, version)
