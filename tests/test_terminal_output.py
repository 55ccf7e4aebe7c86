"""Text output on a terminal: fitted to COLUMNS (words never split, hanging indents), coloured on a pty
only (never piped, never with NO_COLOR), JSON untouched; `qcheck matrix` fits or summarises."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from qcheck.cli import cli
from qcheck.report.terminal import fit, rendering_for, wrap_line

ROOT = Path(__file__).resolve().parent.parent
NVFP4 = str(ROOT / "examples" / "tiny-llama-nvfp4")
CHECK = ["check", NVFP4, "--engine", "vllm", "--engine", "sglang", "--gpu", "h100", "--gpu", "rtx-5090"]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run(args: list[str], columns: int | None, monkeypatch) -> tuple[int, str]:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(columns))
    result = CliRunner().invoke(cli, args, catch_exceptions=False, prog_name="qcheck", standalone_mode=False)
    return result.return_value or 0, result.output


def words(text: str) -> list[str]:
    return text.split()


def long_tokens(line: str, columns: int) -> bool:
    """A line may pass the width only when it holds one token longer than the width (a URL, a path)."""
    return any(len(token) > columns - 13 for token in line.split())


@pytest.mark.parametrize("columns", [80, 200])
def test_check_fits_the_width_and_keeps_every_word(monkeypatch, columns):
    code, wide = run(CHECK, None, monkeypatch)
    code2, fitted = run(CHECK, columns, monkeypatch)
    assert code == code2 == 0
    assert words(fitted) == words(wide)  # wrapping only moves whitespace: no word is split or lost
    assert "\x1b[" not in fitted  # CliRunner is not a terminal: no colour
    for line in fitted.splitlines():
        assert len(line) <= columns or long_tokens(line, columns), line
    if columns == 80:
        assert max(len(line) for line in wide.splitlines()) > 150
        # the why: text continues under its value column (13), not at column 0
        why = fitted.splitlines().index(next(x for x in fitted.splitlines() if x.startswith("  why:")))
        assert fitted.splitlines()[why + 1].startswith(" " * 13 + "as Marlin W4A16")


def test_json_is_not_touched_by_the_terminal(monkeypatch):
    _, narrow = run([*CHECK, "--json"], 40, monkeypatch)
    _, plain = run([*CHECK, "--json"], None, monkeypatch)
    assert narrow == plain and json.loads(narrow)["schema"] == "qcheck.check/1"


def test_wrap_line_rules():
    assert wrap_line("  why:       aaa bbb ccc ddd", 26) == ["  why:       aaa bbb ccc", "             ddd"]
    # a table row (runs of spaces between cells) is never wrapped: its renderer fits it
    assert wrap_line("  q8   1.0   2.0   3.0   4.0", 12) == ["  q8   1.0   2.0   3.0   4.0"]
    # a continuation item under a label keeps the label's column
    assert fit("  try:       one two three\n             four five six seven", 26).splitlines() == [
        "  try:       one two three", "             four five six", "             seven"]
    assert fit("x" * 50, 20) == "x" * 50  # an unbreakable token stays whole
    assert fit("a b", None) == "a b"


@pytest.mark.parametrize("columns", [80, 200])
def test_matrix_method_fits(monkeypatch, columns):
    engines = [] if columns == 80 else ["-e", "vllm", "-e", "sglang", "-e", "mlx", "-e", "transformers"]
    code, out = run(["matrix", "--method", "awq", *engines], columns, monkeypatch)
    assert code == 0
    assert all(len(line) <= columns for line in out.splitlines()), max(out.splitlines(), key=len)
    if columns == 80:  # too narrow for the grid: one block per engine, statuses grouped
        assert re.search(r"^  vllm 0\.\d+\.\d+ +native: ", out, re.M)
        assert re.search(r"  no: all \d+ targets$", out, re.M)  # an engine with no path anywhere: one line
    else:
        assert re.search(r"^ +vllm 0\.\S+ +sglang 0\.\S+ +mlx ", out, re.M)  # the grid: engines across


def test_matrix_without_arguments_is_an_overview(monkeypatch):
    code, out = run(["matrix"], 80, monkeypatch)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) < 120 and all(len(line) <= 80 for line in lines)
    assert lines[0].startswith("qcheck matrix: ") and "--method METHOD" in lines[0]
    assert any(line.startswith("  W8A8 block 128x128 (DeepSeek/Qwen FP8): native on ") for line in lines)
    _, full = run(["matrix", "--json"], None, monkeypatch)
    assert len(json.loads(full)["tables"]) > 20  # the machine formats keep every table


@pytest.mark.parametrize("command", ["", "inspect", "check", "matrix", "eval", "gate", "hook"])
def test_help_fits_80_columns(monkeypatch, command):
    _, out = run([*([command] if command else []), "--help"], 80, monkeypatch)
    assert out.startswith("Usage: qcheck")
    assert all(len(line) <= 80 for line in out.splitlines()), max(out.splitlines(), key=len)


def test_eval_table_is_transposed_when_too_wide():
    from qcheck.report.text_eval import render

    metrics = {"kld_mean": 3.2e-6, "kld_p99": 5.1e-6, "top1_agreement": 0.987, "ppl_ratio": 1.0007,
               "delta_p_rms": 0.00012}
    data = {"reference": {"path": "ref", "dtype": "float32", "device": "cpu"},
            "tasks": {"items": 3, "by_kind": {"text": 3}, "files": ["t.jsonl"]},
            "cache": {"hit": True, "kind": "full-u16"}, "thresholds": {}, "exit_code": 0,
            "candidates": [{"name": "q8", "backend": "simulated:gguf", "metrics": metrics,
                            "intervals": {"kld_mean": {"low": 3.1e-6, "high": 3.3e-6}}, "gate": {"passed": True,
                                                                                               "failures": []}}]}
    wide = render(data)
    assert "q8         3.20e-06 [3.10e-06, 3.30e-06]" in wide
    with rendering_for(60):
        narrow = fit(render(data), 60)
    assert "q8:" in narrow.splitlines() and "  KLD mean [95% CI]  3.20e-06 [3.10e-06, 3.30e-06]" in narrow
    assert all(len(line) <= 60 for line in narrow.splitlines())


def _pty_run(args: list[str], **env: str) -> str:
    """Run qcheck with stdout on a pseudo-terminal and return what it wrote."""
    master, slave = pty.openpty()
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS", "TERM")}
    environ.update({"PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "COLUMNS": "100", **env})
    proc = subprocess.Popen([sys.executable, "-m", "qcheck", *args], stdout=slave, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL, env=environ, cwd=ROOT)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    return b"".join(chunks).decode()


def test_colour_on_a_tty_only():
    coloured = _pty_run(CHECK)
    assert "\x1b[1;32mNATIVE\x1b[0m" in coloured and "\x1b[1;33mFALLBACK\x1b[0m" in coloured
    plain = ANSI.sub("", coloured)
    from qcheck.matrix import load_matrix

    native = f"NATIVE       vllm {load_matrix().engines['vllm'].newest} x rtx-5090"
    assert native in plain
    assert all(len(line) <= 100 or long_tokens(line, 100) for line in plain.splitlines())
    assert "\x1b[" not in _pty_run(CHECK, NO_COLOR="1")
    piped = subprocess.run([sys.executable, "-m", "qcheck", *CHECK], capture_output=True, text=True, cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert "\x1b[" not in piped.stdout and native in piped.stdout


@pytest.mark.slow
def test_eval_text_shows_a_short_cache_key(monkeypatch, tmp_path):
    """A real ``qcheck eval`` with its reference cache under the home directory: the text report names the cache
    entry as ``~/...`` with the key's first 12 hex digits; the JSON keeps the whole path."""
    from support.eval_helpers import task_file, tiny_reference

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")
    cache = tmp_path / ".cache" / "qcheck"
    args = ["eval", "-r", str(tiny_reference()), "-t", str(task_file()), "-c", f"same={tiny_reference()}",
            "--cache-dir", str(cache), "--bootstrap", "100"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False, prog_name="qcheck", standalone_mode=False)
    (entry,) = [p for p in (cache / "eval").iterdir() if p.name.startswith("ref-")]
    key = entry.name
    assert re.fullmatch(r"ref-[0-9a-f]{32,}", key)
    (line,) = [x for x in result.output.splitlines() if x.startswith("reference log-probs:")]
    assert line == f"reference log-probs: computed and cached [full-u16] ~/.cache/qcheck/eval/{key[:16]}…"
    assert len(key) > 16 + 20
    assert str(tmp_path) not in result.output
    as_json = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False, prog_name="qcheck",
                                 standalone_mode=False)
    data = json.loads(as_json.output)
    assert data["cache"]["path"] == str(entry) and data["cache"]["hit"] is True
    # outside the home directory the path stays as it is, with the key cut the same way
    from qcheck.report.text_eval import short_cache_path

    assert short_cache_path("/srv/cache/eval/" + key) == f"/srv/cache/eval/{key[:16]}…"
    assert short_cache_path("/srv/cache/eval/ref-abc") == "/srv/cache/eval/ref-abc"


def test_matrix_words_are_coloured_in_both_layouts():
    from qcheck.report.terminal import colourise

    out = colourise("  mlx 0.32.1   no: cdna1\n               ?: pascal\n  ada sm89   native    fallback*  no", "matrix")
    assert "\x1b[31mno\x1b[0m: cdna1" in out and "\x1b[35m?\x1b[0m: pascal" in out
    assert "\x1b[32mnative\x1b[0m" in out and "\x1b[33mfallback*\x1b[0m" in out
    assert "\x1b[31mno\x1b[0m\n" not in out and out.endswith("\x1b[31mno\x1b[0m")
