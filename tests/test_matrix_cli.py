"""``qcheck matrix`` through the real CLI, on the test matrix: tables, JSON, markdown, --validate, --list."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qcheck.matrix.audit import audit
from qcheck.matrix.loader import load_matrix
from qcheck.matrix.probes import PROBES, probes_for
from qcheck.matrix.resolve import parse_engine_spec
from qcheck.matrix.schema import METHODS
from qcheck.matrix.table import build_matrix
from qcheck.model import Inspection, Quantization
from support.contract import validate

TEST_MATRIX = Path(__file__).parent / "data" / "matrices"


def run(*args: str, matrices: Path = TEST_MATRIX) -> subprocess.CompletedProcess:
    env = {**os.environ, "QCHECK_MATRICES": str(matrices)}
    return subprocess.run([sys.executable, "-m", "qcheck", "matrix", *args], capture_output=True, text=True,
                          env=env, timeout=180)


def test_probes_cover_every_canonical_method() -> None:
    assert {p.method for p in PROBES} == set(METHODS)
    assert len({p.label for p in PROBES}) == len(PROBES)


def test_text_table_for_a_method() -> None:
    proc = run("--method", "fp8", "--engine", "fastserve", "--engine", "tinycpp")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "fp8: W8A8 per-tensor"
    assert lines[1].split() == ["fastserve", "0.33.0", "tinycpp", "b10488"]
    rows = {}
    for line in lines[2:11]:
        name, *rest = line.split()
        rows[name] = rest[1:] if rest[0].startswith("sm") else rest
    assert rows["volta"] == ["no", "no"]
    assert rows["turing"] == ["fallback", "no"]
    assert rows["ada"] == ["native", "no"]
    assert rows["cdna3"] == ["?", "no"]
    assert rows["apple"] == ["no", "no"]
    block = lines.index("fp8: W8A8 block 128x128 (DeepSeek/Qwen FP8)")
    assert lines[block + 5].split()[:3] == ["ada", "sm89", "fallback"]
    assert "? = unknown (no sourced rule)" in proc.stdout.splitlines()[-2]


def test_requirements_are_starred() -> None:
    proc = run("--method", "gguf", "--engine", "fastserve", "--gpu", "h100", "--gpu", "a100")
    table = proc.stdout.split("\n\n")[0].splitlines()
    assert table[0] == "gguf: Q4_K_M (Q4_K + Q6_K + F32)"
    assert table[2].split() == ["h100", "sm90", "native*"]
    assert table[3].split() == ["a100", "sm80", "native*"]


def test_all_versions_and_json() -> None:
    proc = run("--method", "gguf", "--engine", "fastserve", "--gpu", "h100", "--all-versions", "--json")
    data = json.loads(proc.stdout)
    validate(data, "matrix")
    assert data["schema"] == "qcheck.matrix/1"
    first = data["tables"][0]
    assert first["title"] == "gguf: Q4_K_M (Q4_K + Q6_K + F32)"
    assert first["columns"] == ["h100"]
    cells = {r["engine_version"]: r["cells"]["h100"] for r in first["rows"]}
    assert list(cells) == ["0.9.0", "0.20.0", "0.24.0", "0.33.0"]
    assert cells["0.20.0"]["rule_id"] == "gguf-in-tree" and cells["0.20.0"]["requires"] == []
    assert cells["0.24.0"]["requires"] == ["pip install fastserve-gguf-plugin"]


def test_providers_get_a_hosted_column() -> None:
    proc = run("--method", "none", "--json")
    validate(json.loads(proc.stdout), "matrix")
    table = json.loads(proc.stdout)["tables"][0]
    assert table["columns"][-1] == "hosted"
    rows = {r["engine"]: r for r in table["rows"]}
    assert list(rows["cloudco"]["cells"]) == ["hosted"]
    assert rows["cloudco"]["cells"]["hosted"]["status"] == "native"
    assert "hosted" not in rows["fastserve"]["cells"]


def test_markdown_page(tmp_path: Path) -> None:
    out = tmp_path / "matrix.md"
    proc = run("--method", "fp8", "--format", "markdown", "-o", str(out))
    assert proc.returncode == 0 and proc.stdout == ""
    text = out.read_text()
    assert text.startswith("# Engine x GPU compatibility matrix")
    assert "## `fp8`" in text and "### fp8: W8A8 per-tensor" in text
    assert "| engine | volta | turing | ampere | ada | hopper | blackwell | cdna3 | apple | cpu-x86 | hosted |" in text
    assert "| fastserve 0.33.0 | no | fallback | fallback | native | native | native | ? | no | no |  |" in text
    assert "- `fp8_py`: example/fastserve: quantization/fp8.py @ 0.33.0" in text
    assert "| hopper | nvidia | sm90 | h100, h200 |" in text


def test_checkpoint_table_from_saved_inspection(tmp_path: Path) -> None:
    saved = tmp_path / "i.json"
    insp = Inspection(path="m.gguf", container="gguf",
                      quantization=Quantization(method="gguf", tensor_types={"Q4_K": 3, "NVFP4": 2, "F32": 1}))
    saved.write_text(json.dumps(insp.to_json()))
    proc = run(str(saved), "--engine", "tinycpp", "--engine", "tinycpp==b5000", "--gpu", "h100", "--gpu", "m3-max")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "m.gguf"
    assert lines[2].split() == ["h100", "sm90", "native", "no"]
    assert lines[3].split() == ["m3-max", "fallback", "no"]


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--method", "fp9"], "unknown method 'fp9'; did you mean: fp8"),
     (["--format", "sarif"], "'sarif' is not one of 'text', 'json', 'markdown'"),
     (["x.json", "--method", "fp8"], "give either PATH or --method, not both"),
     (["--gpu", "hoper"], "unknown GPU 'hoper'")],
)
def test_usage_errors(args: list[str], message: str) -> None:
    proc = run(*args)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def test_validate_and_list() -> None:
    # the test matrix's files predate `verified` (issue #35): --validate refuses them, naming the file and the check
    proc = run("--validate")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "[missing-verified]" in proc.stderr and "rule(s) do not state the releases they were read at" in proc.stderr
    assert "matrices/engines/cloudco.toml: [missing-verified] 2 rule(s)" in proc.stderr and proc.stdout == ""
    report = audit(load_matrix(TEST_MATRIX))
    assert "0 without a sourced rule" not in report.summary()  # the test matrix leaves cells unsourced on purpose
    proc = run("--list")
    assert "engine tinycpp" in proc.stdout and "backends: cuda, rocm, metal, vulkan, cpu" in proc.stdout
    assert "arch   hopper" in proc.stdout and "h100, h200" in proc.stdout


def test_validate_reports_version_coverage() -> None:
    """Rules read at one old version that cover every later one, and cells judged by rules read elsewhere."""
    lines = audit(load_matrix(TEST_MATRIX)).notes()  # what --validate printed before it refused such files
    assert "2 rules are open-ended while every source was read at an older version than the engine's newest:" in lines
    assert "  fastserve: rule 'gguf-plugin' (read at 0.24.0)" in lines
    assert "  fastserve: rule 'gguf-bad-types' (read at 0.23.0)" in lines
    assert "  fastserve 0.9.0: 97" in lines and "  tinycpp b5000: 496" in lines
    report = audit(load_matrix(TEST_MATRIX))
    assert report.borrowed[("fastserve", "0.33.0")] == 52  # rules read at 0.23.0/0.24.0 answering for 0.33.0
    assert report.unverified == {"cloudco": 2, "fastserve": 10, "tinycpp": 4}


def test_validate_reports_ambiguity(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "matrices"
    shutil.copytree(TEST_MATRIX, root)
    path = root / "engines" / "tinycpp.toml"
    path.write_text(path.read_text().replace("reasons = [\"{types} arrived after this build\"]\nsources = [\"backends\"]\n"
                                             "priority = 1", "reasons = [\"{types} arrived after this build\"]\n"
                                             "sources = [\"backends\"]"))
    proc = run("--validate", matrices=root)
    assert proc.returncode == 2
    assert "[ambiguous-rules]" in proc.stderr and "'gguf-metal-nvfp4'" in proc.stderr


def test_build_matrix_in_process() -> None:
    m = load_matrix(TEST_MATRIX)
    result = build_matrix(m, method="nvfp4", requests=[parse_engine_spec("fastserve", m)], gpus=["b200"])
    assert [t.title for t in result.tables] == [p.label for p in probes_for("nvfp4")]
    assert all(t.rows[0].cells["b200"].status == "unknown" for t in result.tables)
