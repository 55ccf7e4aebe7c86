"""Which quant fits, for Hub repos of safetensors variants: variants in sub-folders (``fp8/``, ``awq/`` ...) and
variants on branches (TheBloke's ``gptq-4bit-32g-actorder_True``, read with ``org/name@*``), each read header-only
through the bounded Hub client from the local fake Hub, one table row each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qcheck.cli import main
from qcheck.errors import InputError
from qcheck.hub.select import MAX_VARIANT_FOLDERS, MAX_VARIANT_SHARDS, variant_folders
from support.contract import validate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def _model(name: str, prefix: str = "") -> dict[str, bytes]:
    """The files of one example checkpoint (config.json, model.safetensors ...), under ``prefix``."""
    return {prefix + p.name: p.read_bytes() for p in sorted((EXAMPLES / name).iterdir()) if p.is_file()}


@pytest.fixture
def folder_repo(hub) -> str:
    """org/tiny-variants: no weights at the top, one model per sub-folder (BF16, FP8 per channel, AWQ)."""
    files = {"README.md": b"# variants\n", **_model("tiny-llama-bf16", "bf16/"),
             **_model("tiny-llama-fp8-channel", "fp8/"), **_model("tiny-llama-awq", "awq/"),
             "docs/notes.txt": b"not a model\n"}
    return hub.add_repo("org/tiny-variants", files)


@pytest.fixture
def branch_repo(hub) -> str:
    """org/tiny-GPTQ the TheBloke way: GPTQ on main, AWQ and BF16 on branches, and a branch with no model."""
    hub.add_repo("org/tiny-GPTQ", {"README.md": b"# gptq\n", **_model("tiny-llama-gptq")})
    hub.add_repo("org/tiny-GPTQ", {"README.md": b"# awq\n", **_model("tiny-llama-awq")}, branch="awq-4bit")
    hub.add_repo("org/tiny-GPTQ", _model("tiny-llama-bf16"), branch="gptq-4bit-32g-actorder_True")
    return hub.add_repo("org/tiny-GPTQ", {"README.md": b"# docs only\n"}, branch="docs")


def test_subfolder_variants_get_one_row_each_with_size_bits_status_fit_and_max_context(folder_repo, hub, capsys):
    code, out, err = run(capsys, "check", "org/tiny-variants", "--engine", "vllm", "--gpu", "h100", "--json")
    assert code == 0, err
    data = json.loads(out)
    validate(data, "check-set")
    rows = data["quants"]
    assert [(r["variant"], r["quant"], r["status"], r["fit"]) for r in rows] == [
        ("awq/", "awq", "native", "fits"), ("fp8/", "fp8", "native", "fits"), ("bf16/", "bfloat16", "native", "fits")]
    sizes = {r["variant"]: r["size_bytes"] for r in rows}
    assert sizes["bf16/"] == (EXAMPLES / "tiny-llama-bf16" / "model.safetensors").stat().st_size
    assert rows[-1]["bits_per_weight"] == 16.0 and rows[0]["bits_per_weight"] < 8  # AWQ 4-bit with its scales
    assert all(r["max_context"] == 2048 and r["model_context"] == 2048 for r in rows)
    assert [r["inspection"]["path"] for r in data["results"]] == [
        "org/tiny-variants:awq/model.safetensors", "org/tiny-variants:bf16/model.safetensors",
        "org/tiny-variants:fp8/model.safetensors"]
    # header-only: every weight read is a ranged request (no model.safetensors downloaded whole)
    ranged = hub.requests(r"model\.safetensors", "GET")
    assert ranged and all(r.range for r in ranged)
    assert sum(r.sent for r in ranged) < sum(sizes.values())
    # the text table names each variant
    code, out, _ = run(capsys, "check", "org/tiny-variants", "--engine", "vllm", "--gpu", "h100")
    lines = out.splitlines()
    assert lines[0] == "org/tiny-variants: 3 models" and lines[2].split()[:2] == ["variant", "quant"]
    assert [line.split()[0] for line in lines[3:6]] == ["awq/", "fp8/", "bf16/"]


def test_subfolder_variants_without_a_gpu_are_still_ambiguous_and_all_reads_each(folder_repo, capsys):
    code, out, err = run(capsys, "inspect", "org/tiny-variants")
    assert code == 2 and out == ""
    assert "holds 3 safetensors models in sub-folders (awq, bf16, fp8)" in err and "--all" in err
    code, out, err = run(capsys, "inspect", "org/tiny-variants", "--all", "--json")
    assert code == 0, err
    assert [r["quantization"]["method"] for r in json.loads(out)["results"]] == ["awq", "none", "fp8"]


def test_every_branch_with_at_star_gets_a_row_and_a_branch_without_a_model_is_named(branch_repo, hub, capsys):
    code, out, err = run(capsys, "check", "org/tiny-GPTQ@*", "--engine", "vllm", "--gpu", "rtx-4090", "--json")
    assert code == 0, err
    data = json.loads(out)
    validate(data, "check-set")
    rows = {r["variant"]: r for r in data["quants"]}
    assert set(rows) == {"@main", "@awq-4bit", "@gptq-4bit-32g-actorder_True"}
    assert (rows["@main"]["quant"], rows["@awq-4bit"]["quant"]) == ("gptq", "awq")
    assert rows["@gptq-4bit-32g-actorder_True"]["bits_per_weight"] == 16.0
    assert all(r["fit"] == "fits" and r["max_context"] == 2048 for r in rows.values())
    assert [n for n in data["notes"] if "@docs" in n] and len(data["notes"]) == 1
    # each branch was listed at its own commit: one refs request, one listing per branch
    assert len(hub.requests(r"/api/models/org/tiny-GPTQ/refs$")) == 1
    assert len(hub.requests(r"/api/models/org/tiny-GPTQ/revision/")) == 4


def test_a_refs_request_that_fails_is_one_error_line(hub, capsys):
    hub.add_repo("org/x", _model("tiny-llama-awq"))
    hub.inject(r"/api/models/org/x/refs$", 404)
    code, out, err = run(capsys, "check", "org/x@*", "--engine", "vllm", "--gpu", "h100")
    assert code == 2 and out == "" and err.startswith("qcheck: error:") and len(err.splitlines()) == 1


def test_variant_folders_are_bounded_and_need_a_config_next_to_the_weights():
    files: dict[str, int | None] = {f"v{i:03}/config.json": 10 for i in range(100)}
    files.update({f"v{i:03}/model.safetensors": 100 for i in range(100)})
    files.update({"loose/model.safetensors": 1, ".hidden/config.json": 1, ".hidden/model.safetensors": 1})
    found = variant_folders(files)
    assert len(found) == MAX_VARIANT_FOLDERS and "loose" not in found and ".hidden" not in found
    assert found["v000"] == ["v000/model.safetensors"]
    # weights at the top level: the repo is one model, not a set of variants
    assert variant_folders({**files, "model.safetensors": 1}) == {}


def test_a_variant_folder_keeps_its_index_and_is_never_read_in_part():
    """The index sorts after the shards: it is kept whatever the shard count, and a folder over the shard limit is
    refused rather than read in part (a partial read would understate the variant's size)."""
    def folder(n: int) -> dict[str, int | None]:
        files: dict[str, int | None] = {"fp8/config.json": 10, "fp8/model.safetensors.index.json": 10}
        files.update({f"fp8/model-{i:05}-of-{n:05}.safetensors": 100 for i in range(1, n + 1)})
        return files

    found = variant_folders(folder(MAX_VARIANT_SHARDS))
    assert len(found["fp8"]) == MAX_VARIANT_SHARDS + 1 and "fp8/model.safetensors.index.json" in found["fp8"]
    with pytest.raises(InputError, match=f"sub-folder fp8/ holds more than {MAX_VARIANT_SHARDS} safetensors shards"):
        variant_folders(folder(MAX_VARIANT_SHARDS + 1))


def test_at_star_is_only_for_the_table_and_a_wrong_command_is_not_a_missing_branch(branch_repo, capsys):
    code, out, err = run(capsys, "inspect", "org/tiny-GPTQ@*")
    assert code == 2 and out == "" and "'@*' (every branch) is for the which-quant-fits table" in err
    # no --gpu for an engine that needs one: the command's error, not "no branch holds a checkpoint"
    code, out, err = run(capsys, "check", "org/tiny-GPTQ@*", "--engine", "vllm")
    assert code == 2 and "add --gpu" in err and "no branch" not in err


def test_a_variant_row_is_named_from_the_hub_target_and_a_local_path_never_reads_as_a_branch(tmp_path):
    from qcheck.quant_table import variant_name

    assert variant_name("org/name:fp8/model.safetensors") == "fp8/"
    assert variant_name("org/name@gptq-4bit-32g") == "@gptq-4bit-32g"
    assert variant_name("org/name@br:awq/model.safetensors") == "@br awq/"
    assert variant_name("hf.co/org/name@v1") == "@v1"
    assert variant_name("org/name") is None and variant_name("org/x:Q4_K_M.gguf") is None
    local = tmp_path / "a@b" / "model.safetensors"  # an '@' in a local folder name is not a branch
    local.parent.mkdir()
    local.write_bytes(b"")
    assert variant_name(str(local)) is None
    assert variant_name(str(local.parent)) == "a@b"  # a variant directory is named by its folder
