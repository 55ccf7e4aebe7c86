"""The JSON contract as files: every schema under ``qcheck/schemas/`` is a valid draft 2020-12 schema that
the outputs are checked against (the real outputs are validated where each command is tested: test_inspect_cli,
test_check_cli, test_hub_all, test_matrix_cli, test_gate, test_eval_run, test_examples_eval, test_gate_quality).
Here: the schemas themselves, and that they reject what the contract does not allow."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import jsonschema
import pytest

from qcheck import model
from qcheck.cli import main
from qcheck.matrix.schema import METHODS
from qcheck.memory import GIB, MemoryEstimate, OffloadPlan, Part
from qcheck.speed import SpeedEstimate
from support.contract import SCHEMAS, schema, validate
from support.memory_helpers import estimate

ROOT = Path(__file__).resolve().parents[1]
NAMES = ["inspection", "check", "inspection-set", "check-set", "matrix", "eval", "gate", "probe"]


def test_every_output_has_a_schema_file() -> None:
    assert sorted(p.name for p in SCHEMAS.glob("*.schema.json")) == sorted(f"{n}.schema.json" for n in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_schema_is_valid_draft_2020_12(name: str) -> None:
    s = schema(name)
    jsonschema.Draft202012Validator.check_schema(s)
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert s["$id"] == f"urn:qcheck:schema:{name}"
    assert s["properties"]["schema"]["const"] == f"qcheck.{name}/1"
    assert f"qcheck.{name}/1" in s["title"]


def test_the_method_enum_is_the_matrix_method_list() -> None:
    """A new quantisation method is a contract change: its id goes into inspection.schema.json too."""
    enum = schema("inspection")["$defs"]["quantization"]["properties"]["method"]["enum"]
    assert enum == list(METHODS)


def _check_json(capsys: pytest.CaptureFixture[str]) -> dict:
    with pytest.raises(SystemExit) as exc:
        main(["check", str(ROOT / "examples" / "tiny-llama-nvfp4"), "--engine", "vllm", "--gpu", "h100", "--json"])
    assert exc.value.code == 0
    return json.loads(capsys.readouterr().out)


def test_a_real_check_fits_and_deviations_do_not(capsys: pytest.CaptureFixture[str]) -> None:
    data = _check_json(capsys)
    validate(data, "check")
    bad: list[tuple[str, dict]] = []
    for label, path, value in [
        ("unknown top-level field", (), ("surprise", 1)),
        ("unknown verdict field", ("verdicts", 0), ("surprise", 1)),
        ("unknown inspection field", ("inspection",), ("surprise", 1)),
        ("unknown quantization field", ("inspection", "quantization"), ("surprise", 1)),
        ("status outside the four", ("verdicts", 0), ("status", "maybe")),
        ("method outside the list", ("inspection", "quantization"), ("method", "fp3")),
        ("dtype word not lower case", ("inspection", "quantization"), ("weight_dtype", "FP4")),
        ("exit code 2 in a check record", (), ("exit_code", 2)),
        ("group size 0", ("inspection", "quantization"), ("group_size", 0)),
    ]:
        doc = copy.deepcopy(data)
        target = doc
        for key in path:
            target = target[key]
        target[value[0]] = value[1]
        bad.append((label, doc))
    missing = copy.deepcopy(data)
    del missing["verdicts"][0]["sources"]
    bad.append(("verdict without sources", missing))
    for label, doc in bad:
        with pytest.raises(jsonschema.ValidationError):
            validate(doc, "check")
        print("rejected:", label)


def test_a_gate_verdict_carries_fails_and_nothing_else(capsys: pytest.CaptureFixture[str]) -> None:
    """Gate records embed check verdicts plus ``fails``; the check schema's verdict stays closed."""
    verdict = _check_json(capsys)["verdicts"][0]
    data = {"schema": "qcheck.gate/1", "policy": {"file": None, "models": [], "targets": [], "memory": None,
                                                  "quality": None, "lfs_pointers": "error"},
            "summary": {"models": 1, "judged": 1, "errors": 0, "skipped": 0, "verdicts": 1, "failing": 0,
                        "quality_failed": False, "quality_error": False},
            "models": [{"name": "m", "path": "m", "status": "judged", "error": None, "error_kind": None,
                        "inspection": None, "failing": 0,
                        "verdicts": [{**verdict, "fails": False, "memory_fails": False,
                                      "policy": {"require_native": False, "allow_unknown": False, "target": "t"}}]}],
            "quality": None, "exit_code": 0}
    validate(data, "gate")
    data["models"][0]["verdicts"][0]["surprise"] = 1
    with pytest.raises(jsonschema.ValidationError, match="surprise"):
        validate(data, "gate")
    del data["models"][0]["verdicts"][0]["surprise"], data["models"][0]["verdicts"][0]["fails"]
    with pytest.raises(jsonschema.ValidationError, match="fails"):
        validate(data, "gate")


@pytest.mark.parametrize(("record", "schema_name", "where", "extra"), [
    (model.Inspection, "inspection", (), {"schema", "exit_code"}),
    (model.Quantization, "inspection", ("$defs", "quantization"), set()),
    (model.SourceFile, "inspection", ("$defs", "source_file"), set()),
    (model.Verdict, "check", ("$defs", "verdict"), {"fails", "memory_fails", "outcome", "policy"}),
    (model.Judgement, "check", ("$defs", "judgement"), set()),
    (model.Source, "check", ("$defs", "source"), set()),
    (MemoryEstimate, "check", ("$defs", "memory"), {"weights_gib", "kv_cache_gib", "total_gib", "gpu_memory_gib",
                                                    "usable_gib", "per_gpu_gib", "kv_available_gib", "summary",
                                                    "speed_summary"}),
    (OffloadPlan, "check", ("$defs", "offload"), set()),
    (Part, "check", ("$defs", "memory_part"), set()),
    (SpeedEstimate, "check", ("$defs", "speed"), set()),
], ids=lambda v: v.__name__ if isinstance(v, type) else None)
def test_every_record_field_is_in_its_schema(record: type, schema_name: str, where: tuple[str, ...],
                                             extra: set[str]) -> None:
    """A field added to a public record is a field of the JSON contract: add it to qcheck/schemas/ too."""
    node = schema(schema_name)
    for key in where:
        node = node[key]
    fields = {f.name for f in dataclasses.fields(record)}
    assert sorted(fields - set(node["properties"])) == [], f"add these to qcheck/schemas/{schema_name}.schema.json"
    assert sorted(set(node["properties"]) - fields - extra) == [], "fields the record no longer has"


def test_a_memory_estimate_fits_its_schema(capsys: pytest.CaptureFixture[str]) -> None:
    """``verdicts[].memory`` is closed too: on a product with speed data, on an architecture (the note), in RAM,
    and a llama.cpp MoE offload plan (its --n-cpu-moe keys)."""
    with pytest.raises(SystemExit) as exc:
        main(["check", str(ROOT / "examples" / "tiny-llama-Q4_0.gguf"), "--engine", "llama.cpp", "--gpu", "h100",
              "--gpu", "hopper", "--gpu", "cpu", "--context", "1024", "--json"])
    assert exc.value.code == 1  # no product's memory on hopper, no host RAM on cpu: the start-up is unknown
    data = json.loads(capsys.readouterr().out)
    validate(data, "check")
    memory = [v["memory"] for v in data["verdicts"]]
    assert [("speed" in m, "note" in m, m["device"]) for m in memory] == [
        (True, False, "GPU"), (False, True, "GPU"), (False, False, "RAM")]
    layers = 8
    tensors = {"output.weight": model.TensorInfo("output.weight", "Q6_K", (1, 1), nbytes=GIB // 4)}
    for i in range(layers):
        for name, size in ((f"blk.{i}.attn_q.weight", GIB // 2), (f"blk.{i}.ffn_up_exps.weight", 4 * GIB)):
            tensors[name] = model.TensorInfo(name, "Q4_K", (1, 1), nbytes=size)
    ins = model.Inspection(path="m.gguf", container="gguf", size_bytes=sum(t.nbytes or 0 for t in tensors.values()),
                           num_layers=layers, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
                           context_length=8192, moe=True, num_experts=64, num_experts_used=8)
    est = estimate(ins, context=4096, engine="llama.cpp", gpu_memory_gib=24, tensors=tensors)
    assert est.offload is not None and est.offload.n_cpu_moe
    data["verdicts"][0]["memory"] = est.to_json()
    validate(data, "check")
    for label, doc in (("a MoE plan without its RAM bytes", _without(data, "moe_ram_bytes")),
                       ("an unknown memory field", _with(data, memory[0], surprise=1))):
        with pytest.raises(jsonschema.ValidationError) as err:
            validate(doc, "check")
        # memory (and offload) is null or the record (oneOf): the record's branch says what is wrong
        assert any(word in m for m in _messages(err.value) for word in ("moe_ram_bytes", "surprise")), label


def _messages(error: jsonschema.ValidationError) -> list[str]:
    return [error.message] + [m for sub in error.context for m in _messages(sub)]


def _without(data: dict, key: str) -> dict:
    doc = copy.deepcopy(data)
    del doc["verdicts"][0]["memory"]["offload"][key]
    return doc


def _with(data: dict, memory: dict, **extra: object) -> dict:
    doc = copy.deepcopy(data)
    doc["verdicts"][0]["memory"] = {**memory, **extra}
    return doc
