"""``--noise-floor``: the reference scored against itself in another dtype, shown beside the candidates in
text, JSON and HTML, and never part of the gate or the exit code."""

from __future__ import annotations

import json

import pytest

from support.eval_helpers import task_file, tiny_gguf, tiny_reference

pytestmark = pytest.mark.slow


def run_cli(args, capsys):
    from qcheck.cli import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_noise_floor_row_is_measured_but_never_gated(tmp_path, capsys):
    base = ["eval", "-r", str(tiny_reference()), "-t", str(task_file()), "--max-items", "4",
            "--cache-dir", str(tmp_path / "cache"), "--bootstrap", "100", "--noise-floor", "--simulate-engine", "weights"]
    html = tmp_path / "report.html"
    # the F32 GGUF of the reference is ~exact; bf16 compute of the same weights is not: a threshold between the
    # two passes the candidate and would fail the noise floor if it were gated
    code, out, err = run_cli([*base, "-c", f"f32={tiny_gguf('F32')}", "--max-kld", "1e-6", "--json",
                              "--report", str(html)], capsys)
    data = json.loads(out)
    assert code == 0 and data["exit_code"] == 0, err
    noise = data["noise_floor"]
    assert (noise["name"], noise["dtype"], noise["reference_dtype"], noise["backend"]) == (
        "noise floor (bfloat16)", "bfloat16", "float32", "transformers")
    candidate = data["candidates"][0]["metrics"]
    assert candidate["kld_mean"] < 1e-6 < noise["metrics"]["kld_mean"] < 0.1
    assert noise["metrics"]["tokens_scored"] == candidate["tokens_scored"] > 0  # the same tokens as the candidates
    assert noise["intervals"]["kld_mean"]["low"] <= noise["metrics"]["kld_mean"] <= noise["intervals"]["kld_mean"]["high"]
    assert "gate" not in noise and [c["name"] for c in data["candidates"]] == ["f32"]
    page = html.read_text(encoding="utf-8")
    assert '<th class="muted">noise floor (bfloat16)</th>' in page and "not gated" in page

    # text: the row sits in the candidates' table, marked, with the dtype said; the reference cache is reused
    code, out, _ = run_cli([*base, "-c", f"q4={tiny_gguf('Q4_0')}", "--max-kld", "1e9"], capsys)
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("noise floor (bfloat16)"))
    assert row.rstrip().endswith("not gated")
    assert "bfloat16, scored against the float32 reference" in out and "reused from cache" in out
    assert "1/1 candidate(s) passed; exit code 0" in out


def test_noise_floor_dtype_choices(tmp_path, capsys):
    base = ["eval", "-r", str(tiny_reference()), "-t", str(task_file()), "--max-items", "2", "--no-cache",
            "--bootstrap", "100", "-c", f"f32={tiny_gguf('F32')}", "--json"]
    code, _, err = run_cli([*base, "--reference-dtype", "bfloat16", "--noise-floor-dtype", "bfloat16"], capsys)
    assert code == 2
    assert err == ("qcheck: error: --noise-floor-dtype bfloat16 is the reference's own dtype: pick another (the "
                   "noise floor compares the reference with itself in a different precision)\n")
    # a bfloat16 reference gets a float16 noise floor by default; without the flag there is none
    code, out, err = run_cli([*base, "--reference-dtype", "bfloat16", "--noise-floor"], capsys)
    assert code == 0, err
    noise = json.loads(out)["noise_floor"]
    assert (noise["dtype"], noise["reference_dtype"]) == ("float16", "bfloat16") and noise["metrics"]["kld_mean"] > 0
    code, out, _ = run_cli(base, capsys)
    assert code == 0 and json.loads(out)["noise_floor"] is None
