"""`--gpu` without `--engine` explores (what works first, exit 0 when any engine runs it, no "<- fails");
counts are grammatical; CPU memory is RAM; sources are shortened at words; `qcheck PATH` alone inspects."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from qcheck.cli import cli
from qcheck.report.text_check import _short_source

ROOT = Path(__file__).resolve().parent.parent
Q4 = str(ROOT / "examples" / "tiny-llama-Q4_0.gguf")
ORDER = {"NATIVE": 0, "FALLBACK": 1, "UNKNOWN": 2, "UNSUPPORTED": 3}


class Run:
    """What ``qcheck ARGS`` printed and returned (``main`` turns the return value into the exit code)."""

    def __init__(self, args: list[str], **runner: bool):
        result = CliRunner(**runner).invoke(cli, args, catch_exceptions=False, prog_name="qcheck",
                                            standalone_mode=False)
        self.exit_code = result.return_value
        self.output = result.output
        self.stdout = result.stdout
        try:
            self.stderr = result.stderr
        except ValueError:  # click < 8.2 mixes stderr into output unless mix_stderr=False
            self.stderr = ""


def run(*args: str) -> Run:
    return Run(list(args))


def test_explore_lists_what_works_first_and_exits_0(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    result = run("check", Q4, "--gpu", "cpu")
    assert result.exit_code == 0
    statuses = [line.split()[0] for line in result.output.splitlines() if line.split()[:1]
                and line.split()[0] in ORDER]
    assert len(statuses) >= 5 and statuses[0] == "NATIVE" and "UNSUPPORTED" in statuses
    assert [ORDER[s] for s in statuses] == sorted(ORDER[s] for s in statuses)
    assert "<- fails" not in result.output
    last = result.output.splitlines()[-1]
    assert last.startswith(f"explored {len(statuses)} combinations: ") and "runs on llama.cpp b11312 [cpu]" in last
    data = json.loads(run("check", Q4, "--gpu", "cpu", "--json").output)
    assert data["explore"] is True and data["exit_code"] == 0
    assert data["verdicts"][0]["status"] == "native"


def test_a_named_engine_still_gates_and_counts_are_grammatical():
    one = run("check", Q4, "--engine", "llama.cpp", "--gpu", "cpu")
    assert one.exit_code == 0 and one.output.splitlines()[-1] == "1 combination: 1 native; it runs (exit 0)"
    two = run("check", Q4, "--engine", "vllm", "--engine", "llama.cpp", "--gpu", "cpu")
    assert two.exit_code == 1
    assert two.output.splitlines()[-1] == "2 combinations: 1 unsupported, 1 native; 1 of 2 fails (exit 1)"
    assert "<- fails" in two.output
    assert json.loads(run("check", Q4, "-e", "vllm", "--gpu", "cpu", "--json").output)["explore"] is False


def test_memory_on_a_cpu_is_ram():
    result = run("check", Q4, "--engine", "llama.cpp", "--gpu", "cpu", "--gpu", "rtx-4090", "--context", "4096")
    lines = [line.strip() for line in result.output.splitlines() if line.strip().startswith("memory:")]
    assert len(lines) == 2
    gpu = next(line for line in lines if "on one GPU" in line)
    # an RTX 4090 as the driver reports it (23.65 GiB) less the CUDA context and --fit's 1 GiB margin
    assert gpu.startswith("memory:    needs 0.0 GiB on one GPU (") and "fits in 22.1 GiB usable" in gpu
    ram = next(line for line in lines if line is not gpu)
    assert ram.startswith("memory:    needs 0.0 GiB in RAM (weights ") and "GPU" not in ram


def test_path_alone_is_the_inspection_with_a_pointer():
    result = Run([Q4], mix_stderr=False) if _mix_stderr_supported() else Run([Q4])
    assert result.exit_code == 0
    assert result.stdout == run("inspect", Q4).output
    assert "no --engine or --gpu given" in result.stderr and "--gpu G" in result.stderr


def _mix_stderr_supported() -> bool:
    import inspect

    return "mix_stderr" in inspect.signature(CliRunner).parameters


def test_sources_are_shortened_at_a_word():
    ref = "org/repo: path/file.py (kernel priority lists: FP8, block FP8, NVFP4 and more words here to cut off)"
    short = _short_source(ref * 2, "1.0")
    assert short.endswith(" ... @ 1.0") and (ref * 2).startswith(short.removesuffix(" ... @ 1.0"))
    assert short.removesuffix(" ... @ 1.0").split()[-1] in ref.split()  # the last word is whole
    url = "https://docs.example.org/" + "x" * 120
    assert _short_source(url, None) == url  # a URL is never cut
