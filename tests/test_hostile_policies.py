"""Hostile policies (issue #32): policies that could make ``qcheck gate`` pass without judging what they ask for.
Through the real CLI, in a temporary git repository.

- item 6: ``require-native``, ``require-kv-scales`` and ``[quality]`` must hold for ``deployments`` as for
  ``models``. Fixed by issue #30 (the policy -> request -> outcome path: ``Policy.asked``); these tests were strict
  xfails until that fix reached main.
- item 11: a gate that judged nothing (every model a skipped Git LFS pointer) fails unless the policy says
  ``allow-nothing-judged = true``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from support.gate_helpers import LFS_POINTER, qcheck

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

K8S = """apiVersion: apps/v1
kind: Deployment
metadata: {name: vllm-fp8}
spec:
  template:
    spec:
      nodeSelector: {nvidia.com/gpu.product: GPU}
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.33.0
          args: ["/models/fp8", "--max-model-len", "1024"KV]
          resources: {limits: {nvidia.com/gpu: 1}}
"""


def _repo(tmp_path: Path, gpu: str, kv: bool = False) -> Path:
    """A repository with an FP8 checkpoint (no KV-cache scales) served by vLLM on ``gpu``."""
    root = tmp_path / "repo"
    (root / "models").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    shutil.copytree(EXAMPLES / "tiny-llama-fp8-block", root / "models" / "fp8")
    (root / "deploy").mkdir()
    manifest = K8S.replace("GPU", gpu).replace("KV", ', "--kv-cache-dtype", "fp8"' if kv else "")
    (root / "deploy" / "vllm.yaml").write_text(manifest, encoding="utf-8")
    return root


def _gate(root: Path, top: str, tables: str = "") -> tuple[subprocess.CompletedProcess[str], dict]:
    """The gate over the deployment, with ``top`` (top-level keys) and ``tables`` in the policy."""
    (root / "qcheck.toml").write_text(
        f'{top}\ndeployments = [{{ file = "deploy/vllm.yaml", models = {{ "/models/fp8" = "models/fp8" }} }}]\n{tables}',
        encoding="utf-8")
    res = qcheck("gate", "--json", cwd=root, matrix=False)
    return res, (json.loads(res.stdout) if res.stdout.strip().startswith("{") else {})


# ------------------------------------------------------------------------------------------ item 6
def test_control_a_fallback_deployment_passes_without_require_native(tmp_path: Path) -> None:
    """The deployment the tests below judge: FP8 on an A100 is a Marlin fallback (it runs), so the gate passes."""
    res, data = _gate(_repo(tmp_path, "NVIDIA-A100-SXM4-80GB"), "")
    assert res.returncode == 0, res.stdout + res.stderr
    assert data["models"][0]["verdicts"][0]["status"] == "fallback"


def test_require_native_holds_for_deployments(tmp_path: Path) -> None:
    res, data = _gate(_repo(tmp_path, "NVIDIA-A100-SXM4-80GB"), "require-native = true")
    assert data["models"][0]["verdicts"][0]["status"] == "fallback"
    assert res.returncode == 1, "require-native = true, and the deployment only runs through a fallback"


def test_require_kv_scales_holds_for_deployments(tmp_path: Path) -> None:
    """``--kv-cache-dtype fp8`` on a checkpoint without KV-cache scales: vLLM uses scales of 1.0; the policy
    requires real ones."""
    res, data = _gate(_repo(tmp_path, "NVIDIA-H100-80GB-HBM3", kv=True), "require-kv-scales = true")
    verdict = data["models"][0]["verdicts"][0]
    assert verdict["status"] == "native" and "k_scale" in json.dumps(verdict)
    assert res.returncode == 1, "require-kv-scales = true, and the checkpoint ships no KV-cache scales"


def test_quality_is_validated_when_only_deployments_are_given(tmp_path: Path) -> None:
    root = _repo(tmp_path, "NVIDIA-H100-80GB-HBM3")
    res, _ = _gate(root, "", '[quality]\nbogus-key = 1\nreference = "nowhere"\n')
    assert res.returncode == 2 and "quality" in res.stderr and "bogus-key" in res.stderr, res.stderr


# ------------------------------------------------------------------------------------------ item 11
POINTERS = """models = ["models/*.gguf"]
lfs-pointers = "skip"
EXTRA
[[targets]]
engine = "llama.cpp"
gpu = ["h100"]
"""


def _pointers(tmp_path: Path, extra: str) -> subprocess.CompletedProcess[str]:
    root = tmp_path / "lfs"
    (root / "models").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    for name in ("a.gguf", "b.gguf"):
        (root / "models" / name).write_text(LFS_POINTER, encoding="utf-8")
    (root / "qcheck.toml").write_text(POINTERS.replace("EXTRA", extra), encoding="utf-8")
    return qcheck("gate", cwd=root, matrix=False)


def test_a_gate_that_judged_nothing_fails(tmp_path: Path) -> None:
    res = _pointers(tmp_path, "")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "0 combination(s)" in res.stdout and "2 skipped; nothing judged: gate FAILED (exit 1)" in res.stdout


def test_judging_nothing_passes_only_when_the_policy_says_so(tmp_path: Path) -> None:
    res = _pointers(tmp_path, "allow-nothing-judged = true")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "nothing judged: gate passed (exit 0)" in res.stdout
    res = _pointers(tmp_path / "typo", 'allow-nothing-judged = "yes"')
    assert res.returncode == 2 and "allow-nothing-judged" in res.stderr
