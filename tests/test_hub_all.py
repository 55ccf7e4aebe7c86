"""``--all`` on ``qcheck inspect``/``qcheck check``: every GGUF model of a Hub repo or local directory, one set
result, the worst exit code; pasted Hub links; one loader for the check and memory paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qcheck.cli import main
from support.contract import validate
from support.gguf_helpers import Q, write_gguf
from support.hubserver import gguf_bytes

SPLIT_1 = "Q4_K_M/m-Q4_K_M-00001-of-00002.gguf"
SPLIT_2 = "Q4_K_M/m-Q4_K_M-00002-of-00002.gguf"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def _tq1_gguf(path: Path) -> bytes:
    """A GGUF whose weights are TQ1_0 (ternary): vLLM 0.23.0's GGUF kernels have no TQ1_0, llama.cpp does.

    The tests pin vllm==0.23.0: from 0.24 vLLM hands GGUF to vllm-gguf-plugin, whose type list is read at
    one release only, so a newer vLLM answers unknown for TQ1_0 rather than unsupported.
    """
    [written] = write_gguf(path, [("blk.0.attn_q.weight", (256, 256), Q.TQ1_0),
                                  ("token_embd.weight", (64, 256), Q.F32)])
    return written.read_bytes()


@pytest.fixture
def three_models(hub, tmp_path: Path) -> str:
    """org/three-GGUF: a Q8_0 file, a TQ1_0 file and a Q4_K_M split set of two parts in a subfolder."""
    files = {
        "m-Q8_0.gguf": gguf_bytes(str(tmp_path / "q8.gguf"), file_type=7),
        "m-TQ1_0.gguf": _tq1_gguf(tmp_path / "tq1.gguf"),
        SPLIT_1: gguf_bytes(str(tmp_path / "s1.gguf"), split=(0, 2), layers=2, first_layer=0, split_tensors=8),
        SPLIT_2: gguf_bytes(str(tmp_path / "s2.gguf"), split=(1, 2), layers=2, first_layer=2, split_tensors=8),
        "README.md": b"# three models\n",
    }
    return hub.add_repo("org/three-GGUF", files)


def test_repo_with_several_models_without_all_is_a_usage_error_listing_them(three_models, capsys):
    code, out, err = run(capsys, "check", "org/three-GGUF", "--engine", "together")
    assert code == 2 and out == ""
    assert "org/three-GGUF holds 3 GGUF models" in err
    assert "Q8_0" in err and "TQ1_0" in err and "Q4_K_M" in err and "--all" in err
    code, _, err = run(capsys, "inspect", "org/three-GGUF")
    assert code == 2 and "holds 3 GGUF models" in err


def test_repo_with_several_models_and_a_gpu_answers_which_quant_fits(three_models, capsys):
    code, out, err = run(capsys, "check", "org/three-GGUF", "--engine", "vllm==0.23.0", "--gpu", "h100")
    assert err == "" and code == 1  # TQ1_0 cannot run on vLLM: the worst model's exit code
    assert out.startswith("org/three-GGUF: 3 models")
    header = next(line.split() for line in out.splitlines() if "quant" in line.split())
    rows = [line.split() for line in out.splitlines() if "vllm x h100" in line]
    # these test files differ in shape (parameter counts), so each row also names its file
    assert {r[header.index("quant")] for r in rows} == {"Q8_0", "TQ1_0", "Q4_K_M"}
    assert "--all shows each model's detail" in out


def test_check_all_judges_every_model_and_exits_with_the_worst(three_models, hub, capsys):
    code, out, err = run(capsys, "check", "org/three-GGUF", "--all", "--engine", "vllm==0.23.0", "--gpu", "h100", "--json")
    data = json.loads(out)
    validate(data, "check-set")
    assert err == ""
    assert data["schema"] == "qcheck.check-set/1" and data["target"] == "org/three-GGUF"
    paths = [r["inspection"]["path"] for r in data["results"]]
    # in the Hub listing's model order (the one the usage error lists), a split set named by its first part
    assert paths == [f"org/three-GGUF:{SPLIT_1}", "org/three-GGUF:m-Q8_0.gguf", "org/three-GGUF:m-TQ1_0.gguf"]
    assert all(r["schema"] == "qcheck.check/1" for r in data["results"])
    assert all(r["inspection"]["revision"] == three_models for r in data["results"])
    by_path = {r["inspection"]["path"]: r for r in data["results"]}
    tq1 = by_path["org/three-GGUF:m-TQ1_0.gguf"]
    assert [v["status"] for v in tq1["verdicts"]] == ["unsupported"] and tq1["exit_code"] == 1
    q8 = by_path["org/three-GGUF:m-Q8_0.gguf"]
    assert q8["exit_code"] == 0
    assert by_path[f"org/three-GGUF:{SPLIT_1}"]["inspection"]["gguf_split_count"] == 2
    assert data["exit_code"] == code == 1 == max(r["exit_code"] for r in data["results"])
    # only headers were read: no split part or file was downloaded whole
    assert hub.bytes_sent(r"/resolve/") < 200_000


def test_all_with_only_passing_models_exits_0_and_text_has_one_block_per_model(three_models, capsys):
    code, out, _ = run(capsys, "check", "org/three-GGUF:Q8_0", "--all", "--engine", "vllm==0.23.0", "--gpu", "h100")
    assert code == 0
    assert out.startswith("[1/1] org/three-GGUF:Q8_0\n")
    code, out, _ = run(capsys, "check", "org/three-GGUF", "--all", "--engine", "vllm==0.23.0", "--gpu", "h100")
    assert code == 1
    heads = [line for line in out.splitlines() if line.startswith("[")]
    assert heads == [f"[1/3] org/three-GGUF:{SPLIT_1}", "[2/3] org/three-GGUF:m-Q8_0.gguf",
                     "[3/3] org/three-GGUF:m-TQ1_0.gguf"]
    assert out.count("UNSUPPORTED") == 1 and out.count("<- fails") == 1


def test_one_model_without_all_keeps_todays_object(three_models, capsys):
    code, out, _ = run(capsys, "check", "org/three-GGUF:TQ1_0", "--engine", "vllm==0.23.0", "--gpu", "h100", "--json")
    data = json.loads(out)
    assert code == 1 and data["schema"] == "qcheck.check/1" and "results" not in data
    assert data["inspection"]["path"] == "org/three-GGUF:TQ1_0"


def test_inspect_all_and_memory_with_all(three_models, capsys):
    code, out, _ = run(capsys, "inspect", "org/three-GGUF", "--all", "--json")
    data = json.loads(out)
    validate(data, "inspection-set")
    assert code == 0 and data["schema"] == "qcheck.inspection-set/1" and data["exit_code"] == 0
    assert [r["schema"] for r in data["results"]] == ["qcheck.inspection/1"] * 3
    assert [r["quantization"]["gguf_file_type"] for r in data["results"]] == ["Q4_K_M", "Q8_0", "F32"]
    assert data["results"][2]["quantization"]["tensor_types"] == {"TQ1_0": 1, "F32": 1}
    code, out, _ = run(capsys, "check", "org/three-GGUF", "--all", "-e", "vllm==0.23.0", "-g", "h100", "--context", "1000",
                       "--json")
    data = json.loads(out)
    assert code == 1
    q8 = data["results"][1]["verdicts"][0]["memory"]
    # gguf_bytes: 2 layers, 2 KV heads of 64/8 = 8 dims, f16 cache: 2 x 2 x (8 + 8) x 2 bytes per token = 128
    assert q8["context"] == 1000 and q8["kv_bytes_per_token"] == 128
    assert q8["kv_cache_bytes"] == 128 * 1000


def test_set_reports_in_every_format(three_models, tmp_path, capsys):
    junit, sarif, md = tmp_path / "r.xml", tmp_path / "r.sarif", tmp_path / "r.md"
    code, out, _ = run(capsys, "check", "org/three-GGUF", "--all", "-e", "vllm==0.23.0", "-g", "h100", "--format", "github",
                       "--junit", str(junit), "--sarif", str(sarif), "--markdown", str(md))
    assert code == 1
    errors = [line for line in out.splitlines() if line.startswith("::error")]
    assert len(errors) == 1 and "TQ1_0" in errors[0]
    assert out.rstrip().endswith("qcheck check-set: exit 1, " + out.rstrip().rsplit(", ", 1)[1])
    xml = junit.read_text()
    assert xml.count("<testsuite ") == 3 and 'tests="3" failures="1"' in xml
    results = json.loads(sarif.read_text())["runs"][0]["results"]
    [error] = [r for r in results if r["level"] == "error"]
    assert error["ruleId"] == "QC110"
    # a Hub model is not a file in the checked-out repo: a logical location, no artifact
    assert "physicalLocation" not in error["locations"][0]
    assert error["properties"]["model"] == "org/three-GGUF:m-TQ1_0.gguf"
    markdown = md.read_text()
    assert markdown.count("### qcheck check:") == 3 and markdown.count("❌ fail") == 1


def test_local_directory_with_two_gguf_files(tmp_path, capsys):
    d = tmp_path / "models"
    d.mkdir()
    write_gguf(d / "m-Q8_0.gguf", [("blk.0.attn_q.weight", (256, 256), Q.Q8_0),
                                   ("token_embd.weight", (64, 256), Q.F32)])
    _tq1_gguf(d / "m-TQ1_0.gguf")
    code, _, err = run(capsys, "check", str(d), "-e", "together")
    assert code == 2 and "2 GGUF checkpoints here: m-Q8_0.gguf; m-TQ1_0.gguf" in err and "--all" in err
    code, out, err = run(capsys, "check", str(d), "-e", "vllm==0.23.0", "-g", "h100", "--json")
    data = json.loads(out)
    status = {q["path"]: (q["quant"], q["status"]) for q in data["quants"]}  # smallest model first
    assert code == 1 and status == {str(d / "m-Q8_0.gguf"): ("Q8_0", "native"),
                                    str(d / "m-TQ1_0.gguf"): ("TQ1_0", "unsupported")}
    code, out, _ = run(capsys, "check", str(d), "--all", "-e", "vllm==0.23.0", "-g", "h100", "--json")
    data = json.loads(out)
    validate(data, "check-set")
    assert data["schema"] == "qcheck.check-set/1" and data["target"] == str(d)
    assert [r["inspection"]["path"] for r in data["results"]] == [str(d / "m-Q8_0.gguf"), str(d / "m-TQ1_0.gguf")]
    assert [r["exit_code"] for r in data["results"]] == [0, 1] and code == data["exit_code"] == 1
    code, out, _ = run(capsys, "inspect", str(d), "--all")
    assert code == 0 and out.count(f"[1/2] {d / 'm-Q8_0.gguf'}") == 1 and f"[2/2] {d / 'm-TQ1_0.gguf'}" in out
    # a single file or a one-model directory with --all: a set of one
    code, out, _ = run(capsys, "inspect", str(d / "m-Q8_0.gguf"), "--all", "--json")
    data = json.loads(out)
    assert code == 0 and [r["path"] for r in data["results"]] == [str(d / "m-Q8_0.gguf")]


def test_pasted_hub_link_resolves_against_hf_endpoint(three_models, hub, capsys):
    link = "https://huggingface.co/org/three-GGUF"
    code, out, _ = run(capsys, "inspect", f"{link}/blob/main/m-Q8_0.gguf", "--json")
    data = json.loads(out)
    assert code == 0 and data["revision"] == three_models and data["container"] == "gguf"
    assert hub.requests(r"^/api/models/org/three-GGUF")  # the fake Hub answered, not huggingface.co
    code, out, _ = run(capsys, "check", link, "--all", "-e", "vllm==0.23.0", "-g", "h100", "--json")
    data = json.loads(out)
    assert code == 1 and data["target"] == link and len(data["results"]) == 3
    for text in ("hf.co/org/three-GGUF:Q8_0", "hf://org/three-GGUF:Q8_0"):
        code, out, _ = run(capsys, "inspect", text, "--json")
        assert code == 0 and json.loads(out)["path"] == text


def test_readers_use_the_hub_rules_for_repo_ids(hub, tmp_path):
    from qcheck.errors import InputError
    from qcheck.readers import load_checkpoint, looks_like_repo_id

    assert looks_like_repo_id("hf.co/org/name") and looks_like_repo_id("https://hf.co/org/name:Q4_K_M")
    assert not looks_like_repo_id("org/na--me")  # the Hub refuses '--' in names; so do the readers now
    assert not looks_like_repo_id("org/x.gguf") and looks_like_repo_id("org/x.gguf@main")
    for missing in ("org/x.gguf", "org/na--me", "nope"):
        with pytest.raises(InputError, match=rf"{missing}: no such file or directory"):
            load_checkpoint(missing)
    assert hub.requests(r".") == []  # none of them went to the network


def test_a_saved_inspection_carries_what_memory_needs(tmp_path):
    from qcheck.check import inspect_target, load_targets

    [path] = write_gguf(tmp_path / "m.gguf", [("blk.0.attn_q.weight", (256, 256), Q.Q8_0)])
    [inspection] = load_targets(str(path))
    assert inspection.shape is not None and inspection.shape.layer_bytes  # read from the headers, once
    assert inspection.to_json() == inspect_target(str(path)).to_json()
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(inspection.to_json()))
    [again] = load_targets(str(saved), all_models=True)
    assert again.quantization.tensor_types == inspection.quantization.tensor_types
    assert again.shape == inspection.shape
