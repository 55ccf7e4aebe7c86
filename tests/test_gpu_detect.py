"""--gpu auto: fake nvidia-smi / rocm-smi executables on PATH print the real tools' output formats."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from qcheck import gpu_detect
from qcheck.errors import UsageError
from qcheck.matrix import load_matrix

NVIDIA_TWO = "NVIDIA GeForce RTX 4090, 24564, 23012\nNVIDIA GeForce RTX 4090, 24564, 24210\n"
NVIDIA_H100 = "NVIDIA H100 80GB HBM3, 81559, 80802\n"
# rocm-smi --showproductname --showmeminfo vram --json (ROCm 6.x field names)
ROCM_MI300X = json.dumps({"card0": {
    "Card Series": "AMD Instinct MI300X OAM", "Card Model": "0x74a1",
    "Card Vendor": "Advanced Micro Devices, Inc. [AMD/ATI]", "Card SKU": "M3000100", "GFX Version": "gfx942",
    "VRAM Total Memory (B)": "205822885888", "VRAM Total Used Memory (B)": "287293440"}})


def _tool(bindir: Path, name: str, stdout: str = "", code: int = 0, sleep: float = 0) -> None:
    script = bindir / name
    payload = bindir / f"{name}.out"
    payload.write_text(stdout)
    script.write_text(f"#!/bin/sh\n{'exec /bin/sleep ' + str(sleep) if sleep else ''}\n/bin/cat '{payload}'\nexit {code}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def bindir(tmp_path, monkeypatch):
    d = tmp_path / "bin"
    d.mkdir()
    monkeypatch.setenv("PATH", str(d))
    monkeypatch.delenv("QCHECK_NO_GPU_DETECT", raising=False)
    return d


def test_nvidia_smi_names_map_to_catalogue_ids_with_free_memory(bindir):
    _tool(bindir, "nvidia-smi", NVIDIA_TWO)
    ids, memory, notes = gpu_detect.auto_gpus(load_matrix().gpus)
    assert ids == ["rtx-4090"]  # two identical cards: judged once
    assert memory == {"rtx-4090": round(23012 / 1024, 2)}  # the first card's free memory
    assert len(notes) == 2 and "23.6 GiB free of 24.0 GiB" in notes[1]


def test_datacenter_names_drop_vendor_and_memory_words(bindir):
    _tool(bindir, "nvidia-smi", NVIDIA_H100)
    ids, memory, _ = gpu_detect.auto_gpus(load_matrix().gpus)
    assert ids == ["h100:80gb"] and memory["h100"] == round(80802 / 1024, 2)  # the size the device reported


def test_rocm_smi_json_when_nvidia_smi_is_absent(bindir):
    _tool(bindir, "rocm-smi", ROCM_MI300X)
    ids, memory, notes = gpu_detect.auto_gpus(load_matrix().gpus)
    assert ids == ["mi300x"]
    assert memory["mi300x"] == round((205822885888 - 287293440) / 2**30, 2)
    assert "rocm-smi" in notes[0]


def test_failing_or_garbled_tools_mean_no_gpu_and_a_clear_usage_error(bindir):
    _tool(bindir, "nvidia-smi", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
          code=9)
    _tool(bindir, "rocm-smi", "not json")
    with pytest.raises(UsageError, match=r"no GPU found \(tried nvidia-smi, rocm-smi"):
        gpu_detect.auto_gpus(load_matrix().gpus)


def test_a_hanging_tool_is_abandoned_after_the_timeout(bindir, monkeypatch):
    monkeypatch.setattr(gpu_detect, "TIMEOUT", 0.2)
    _tool(bindir, "nvidia-smi", NVIDIA_H100, sleep=30)
    assert gpu_detect.detect()[0] == []


def test_an_unknown_device_names_itself(bindir):
    _tool(bindir, "nvidia-smi", "NVIDIA Quantum Blaster 9000, 1000, 900\n")
    with pytest.raises(UsageError, match=r"Quantum Blaster 9000.*does not know it"):
        gpu_detect.auto_gpus(load_matrix().gpus)


def test_parsers_bound_what_they_take():
    lines = "".join(f"NVIDIA H100, 81559, {i}\n" for i in range(500))
    assert len(gpu_detect.parse_nvidia_smi(lines)) == gpu_detect.MAX_DEVICES
    assert gpu_detect.parse_nvidia_smi("garbage\n,,\n") == []
    assert gpu_detect.parse_rocm_smi("[1, 2]") == [] and gpu_detect.parse_rocm_smi('{"card0": 5}') == []
    dev = gpu_detect.parse_nvidia_smi("NVIDIA H100, [N/A], [N/A]\n")[0]
    assert dev.total_mib is None and dev.free_mib is None


@pytest.fixture
def example_gguf() -> str:
    return str(Path(__file__).resolve().parents[1] / "examples" / "tiny-llama-Q8_0.gguf")


def _cli(env_path: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PATH=env_path)
    env.pop("QCHECK_NO_GPU_DETECT", None)
    return subprocess.run([sys.executable, "-m", "qcheck", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_cli_gpu_auto_judges_the_detected_gpu_against_its_free_memory(bindir, example_gguf):
    _tool(bindir, "nvidia-smi", NVIDIA_TWO)
    proc = _cli(str(bindir), "check", example_gguf, "--engine", "llama.cpp", "--gpu", "auto", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    (verdict,) = data["verdicts"]
    assert verdict["gpu"] == "rtx-4090"
    assert verdict["memory"]["gpu_memory_bytes"] == int(round(23012 / 1024, 2) * 2**30)
    assert any("--gpu auto: NVIDIA GeForce RTX 4090 (nvidia-smi) -> rtx-4090" in w for w in data["warnings"])


def test_cli_gpu_auto_without_any_tool_exits_2_with_one_line(bindir, example_gguf):
    proc = _cli(str(bindir), "check", example_gguf, "--engine", "llama.cpp", "--gpu", "auto")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("qcheck: error: --gpu auto: no GPU found") and proc.stderr.count("\n") == 1
