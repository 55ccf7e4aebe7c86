"""The README's gate demo: the policy in examples/qcheck.toml passes on the bundled examples."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_example_policy_passes_with_one_fallback():
    run = subprocess.run([sys.executable, "-m", "qcheck", "gate", "--json"], cwd=EXAMPLES,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["schema"] == "qcheck.gate/1"
    statuses = {(m["name"], v["engine"], v["gpu"]): v["status"] for m in report["models"] for v in m["verdicts"]}
    assert statuses == {
        ("tiny-llama-Q4_0.gguf", "llama.cpp", "rtx-4090"): "native",
        ("tiny-llama-Q4_0.gguf", "llama.cpp", "cpu"): "native",
        ("tiny-llama-fp8-channel", "vllm", "h100"): "native",
        ("tiny-llama-nvfp4", "vllm", "h100"): "fallback",
    }
    assert all(v["memory"]["fits"] for m in report["models"] for v in m["verdicts"] if v["gpu"] != "cpu")


def test_example_policy_fails_when_native_is_required(tmp_path):
    # top-level keys must precede the first table: put the flag right after `models = [...]`
    lines = (EXAMPLES / "qcheck.toml").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("models"))
    lines.insert(at + 1, "require-native = true")
    policy = "\n".join(lines) + "\n"
    path = tmp_path / "strict.toml"
    path.write_text(policy.replace('"tiny-llama', f'"{EXAMPLES}/tiny-llama'))
    # the policy lives outside the examples' repository: its absolute model paths need --allow-outside
    run = subprocess.run([sys.executable, "-m", "qcheck", "gate", "--policy", str(path), "--allow-outside"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "nvfp4" in run.stdout and "FALLBACK" in run.stdout
