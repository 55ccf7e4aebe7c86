"""Issue 33 item 8, "an eval with only GGUF files": an F32/F16/BF16 GGUF is a valid reference, a quantised one is
refused with the options, through the real CLI.

The GGUFs are real exports of a real tiny transformers Llama (tests/support/gguf_export.py); the same run with the
safetensors reference is the yardstick: an F32 GGUF holds the very same weights, so every metric must agree.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from support.eval_helpers import task_file, tiny_gguf, tiny_reference
from support.gate_helpers import qcheck

pytestmark = pytest.mark.slow


def eval_json(reference: str, candidate: str, cache: Path, *extra: str) -> tuple[int, dict, str]:
    proc = qcheck("eval", "--reference", reference, "--candidate", f"q8={candidate}", "--tasks", str(task_file()),
                  "--cache-dir", str(cache), "--bootstrap", "200", "--simulate-engine", "weights", "--json", *extra)
    return proc.returncode, (json.loads(proc.stdout) if proc.stdout.strip() else {}), proc.stderr


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    """The safetensors reference's run, with its HTML report (the yardstick of the GGUF references below)."""
    root = tmp_path_factory.mktemp("st")
    code, data, err = eval_json(str(tiny_reference()), str(tiny_gguf("Q8_0")), root,
                                "--report", str(root / "report.html"))
    assert code == 0, err
    return data, (root / "report.html").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def yardstick(run: tuple[dict, str]) -> dict:
    data, _ = run
    return data["candidates"][0]["metrics"]


def test_the_html_report_shows_settings_in_words_and_the_loss_by_position(run) -> None:
    """Issue 33 item 10: the "settings" row showed Python dicts; the loss by position the README promises was absent
    when every token fell in the first bucket."""
    _, page = run
    settings = page.split("<td>settings</td>")[1].split("</tr>")[0]
    assert "{" not in settings and "&#x27;k&#x27;" not in settings
    assert "kv cache default" in settings and "kv cache by candidate -" in settings
    assert "<th>loss by position</th>" in page and "<td>0-512</td>" in page


def test_an_f32_gguf_reference_gives_the_safetensors_references_numbers(yardstick, tmp_path) -> None:
    gguf = tiny_gguf("F32")
    code, data, err = eval_json(str(gguf), str(tiny_gguf("Q8_0")), tmp_path / "cache")
    assert code == 0, err
    assert data["reference"]["path"] == str(gguf)
    made = Path(data["reference"]["converted_to"])
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in made.iterdir()}
    assert any(n.startswith(f"reference: {gguf.name}, an unquantised GGUF (F32)") for n in data["notes"])
    metrics = data["candidates"][0]["metrics"]
    for key in ("kld_mean", "ppl_ratio", "top1_agreement"):
        assert metrics[key] == pytest.approx(yardstick[key], rel=1e-4, abs=1e-7), key
    again_code, again, _ = eval_json(str(gguf), str(tiny_gguf("Q8_0")), tmp_path / "cache")
    assert again_code == 0 and again["cache"]["hit"] is True  # the directory and the reference rows are reused
    assert again["reference"]["converted_to"] == str(made)


def test_an_f16_gguf_reference_runs_and_stays_close(yardstick, tmp_path) -> None:
    code, data, err = eval_json(str(tiny_gguf("F16")), str(tiny_gguf("Q8_0")), tmp_path / "cache")
    assert code == 0, err
    from safetensors import safe_open

    with safe_open(str(Path(data["reference"]["converted_to"]) / "model.safetensors"), "pt") as f:
        dtypes = {str(f.get_slice(k).get_dtype()) for k in f.keys()}  # noqa: SIM118 (safe_open is no dict)
    assert dtypes == {"F16", "F32"}  # each tensor as the GGUF holds it: matrices F16, norms F32
    metrics = data["candidates"][0]["metrics"]
    # the reference is the model rounded to F16: the Q8_0 candidate's loss against it stays that of the original
    assert metrics["kld_mean"] == pytest.approx(yardstick["kld_mean"], rel=0.2)


@pytest.mark.parametrize("kind", ["Q4_0", "Q8_0"])
def test_a_quantised_gguf_reference_is_refused_with_the_options(tmp_path, kind: str) -> None:
    code, data, err = eval_json(str(tiny_gguf(kind)), str(tiny_gguf("Q8_0")), tmp_path)
    assert code == 2 and data == {} and err.count("\n") == 1
    assert f"a quantised GGUF ({kind}" in err and "cannot be the reference" in err
    for option in ("a transformers checkpoint saved as safetensors", "an F32/F16/BF16 GGUF",
                   "--reference URL with --reference-files DIR"):
        assert option in err


def test_a_directory_without_safetensors_names_the_options_too(tmp_path) -> None:
    folder = tmp_path / "ref"
    folder.mkdir()
    (folder / "config.json").write_text((tiny_reference() / "config.json").read_text())
    code, _, err = eval_json(str(folder), str(tiny_gguf("Q8_0")), tmp_path / "cache")
    assert code == 2 and "no model.safetensors" in err and "an F32/F16/BF16 GGUF" in err


def test_eval_help_and_docs_say_what_a_reference_can_be() -> None:
    help_text = qcheck("eval", "--help").stdout
    assert "FILE.gguf    an F32, F16 or BF16 GGUF" in help_text and "it is the candidate" in help_text
    docs = (Path(__file__).resolve().parents[1] / "docs" / "eval.md").read_text(encoding="utf-8")
    assert "## An unquantised GGUF as the reference" in docs


def test_a_gguf_reference_qcheck_refuses_never_reaches_transformers(tmp_path) -> None:
    """Issue 34's rule for native loaders holds for the reference too (qcheck.eval.native.vet before transformers'
    GGUF loader): an F32 GGUF whose general.name is not UTF-8 is one error line, and nothing is converted."""
    data = bytearray(tiny_gguf("F32").read_bytes())
    key = data.index(b"general.name")
    data[key + len(b"general.name") + 4 + 8] = 0xFF  # first byte of the value (after its type and length)
    bad = tmp_path / "bad-f32.gguf"
    bad.write_bytes(bytes(data))
    code, out, err = eval_json(str(bad), str(tiny_gguf("Q8_0")), tmp_path / "cache")
    assert code == 2 and out == {} and err.count("\n") == 1 and "Traceback" not in err
    assert "general.name" in err and "not valid UTF-8" in err
    assert not (tmp_path / "cache" / "eval" / "gguf-reference").exists()
