"""``qcheck gate`` end to end through the real CLI: exit codes 0/1/2, every report from one run,
memory limits, LFS pointers, ``--init``."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import jsonschema
import junitparser
import pytest

from support.contract import validate
from support.gate_helpers import (
    PY,
    SARIF_SCHEMA,
    bf16_dir,
    env,
    fp8_dir,
    lfs_pointer,
    malformed_safetensors,
    mxfp4_dir,
    q4_gguf,
    qcheck,
)

TARGETS = ('[[targets]]\nengine = "tinycpp"\ngpu = ["cpu"]\nmodels = ["*.gguf"]\n'
           '[[targets]]\nengine = "fastserve"\ngpu = ["a100"]\nmodels = ["bf16", "fp8"]\n')


@pytest.fixture
def project(tmp_path: Path) -> Path:
    q4_gguf(tmp_path / "q4.gguf")
    bf16_dir(tmp_path / "bf16")
    fp8_dir(tmp_path / "fp8")
    return tmp_path


def _gate(project: Path, policy: str, *args: str):
    (project / "qcheck.toml").write_text(policy)
    proc = qcheck("gate", "--json", *args, cwd=project)
    data = json.loads(proc.stdout) if proc.stdout.startswith("{") else None
    if data is not None:
        validate(data, "gate")
    return proc, data


def test_exit_0_when_every_model_runs_on_its_targets(project):
    proc, data = _gate(project, 'models = ["q4.gguf", "bf16", "fp8"]\n' + TARGETS)
    assert proc.returncode == 0, proc.stderr
    assert data["schema"] == "qcheck.gate/1" and data["exit_code"] == 0
    statuses = {(m["name"], v["engine"], v["gpu"]): v["status"] for m in data["models"] for v in m["verdicts"]}
    assert statuses == {("q4.gguf", "tinycpp", "cpu"): "native", ("bf16", "fastserve", "a100"): "native",
                        ("fp8", "fastserve", "a100"): "fallback"}
    assert data["summary"] == {"models": 3, "judged": 3, "errors": 0, "skipped": 0, "verdicts": 3, "failing": 0,
                               "quality_failed": False, "quality_error": False, "nothing_judged": False}


def test_exit_1_when_native_is_required_or_a_cell_is_unknown(project):
    proc, data = _gate(project, 'models = ["q4.gguf", "bf16", "fp8"]\n' + TARGETS.replace(
        'models = ["bf16", "fp8"]\n', 'models = ["bf16", "fp8"]\nrequire-native = true\n'))
    assert proc.returncode == 1
    failing = [(m["name"], v["status"]) for m in data["models"] for v in m["verdicts"] if v["fails"]]
    assert failing == [("fp8", "fallback")]
    mxfp4_dir(project / "mx")
    policy = 'models = ["mx"]\n[[targets]]\nengine = "tinycpp"\ngpu = "cpu"\n'
    proc, data = _gate(project, policy)
    assert proc.returncode == 1 and data["models"][0]["verdicts"][0]["status"] == "unknown"
    proc, data = _gate(project, "allow-unknown = true\n" + policy)
    assert proc.returncode == 0


def test_exit_2_for_a_malformed_model_and_the_others_are_still_judged(project):
    malformed_safetensors(project / "broken.safetensors")
    proc, data = _gate(project, 'models = ["q4.gguf", "broken.safetensors"]\n'
                                '[[targets]]\nengine = "tinycpp"\ngpu = "cpu"\n')
    assert proc.returncode == 2
    assert [(m["name"], m["status"]) for m in data["models"]] == [("q4.gguf", "judged"), ("broken.safetensors", "error")]
    assert "header length 4096 runs past the end" in data["models"][1]["error"]
    assert data["models"][0]["verdicts"][0]["status"] == "native"


def test_lfs_pointers_fail_by_default_and_can_be_skipped(project):
    lfs_pointer(project / "weights.gguf")
    policy = 'models = ["*.gguf"]\n[[targets]]\nengine = "tinycpp"\ngpu = "cpu"\n'
    proc, data = _gate(project, policy)
    assert proc.returncode == 2
    pointer = next(m for m in data["models"] if m["name"] == "weights.gguf")
    assert (pointer["status"], pointer["error_kind"]) == ("error", "lfs-pointer")
    proc, data = _gate(project, 'lfs-pointers = "skip"\n' + policy)
    assert proc.returncode == 0
    pointer = next(m for m in data["models"] if m["name"] == "weights.gguf")
    assert pointer["status"] == "skipped" and "git lfs pull" in pointer["error"]


def test_every_report_in_one_run_and_the_exit_code_never_depends_on_format(project):
    policy = 'models = ["q4.gguf", "bf16"]\n[[targets]]\nengine = "tinycpp"\ngpu = ["cpu", "a100"]\n'
    (project / "qcheck.toml").write_text(policy)
    (project / "out").mkdir()
    codes = set()
    for fmt in ("text", "json", "junit", "sarif", "github", "markdown"):
        proc = qcheck("gate", "--format", fmt, cwd=project)
        codes.add(proc.returncode)
    assert codes == {1}  # bf16 is unsupported on tinycpp
    proc = qcheck("gate", "--junit", "out/j.xml", "--sarif", "s.sarif", "--markdown", "m.md", cwd=project)
    assert proc.returncode == 1
    assert "gate FAILED (exit 1)" in proc.stdout
    xml = junitparser.JUnitXml.fromfile(str(project / "out" / "j.xml"))
    cases = [(s.name, c.name, c.is_passed) for s in xml for c in s]
    assert cases == [("qcheck gate q4.gguf", "tinycpp b10488 [cpu] x cpu", True),
                     ("qcheck gate q4.gguf", "tinycpp b10488 [cuda] x a100", True),
                     ("qcheck gate bf16", "tinycpp b10488 [cpu] x cpu", False),
                     ("qcheck gate bf16", "tinycpp b10488 [cuda] x a100", False)]
    sarif = json.loads((project / "s.sarif").read_text())
    jsonschema.Draft4Validator(json.loads(SARIF_SCHEMA.read_text())).validate(sarif)
    assert [r["ruleId"] for r in sarif["runs"][0]["results"]] == ["QC110", "QC110"]
    assert "| bf16 | tinycpp b10488 \\[cpu\\] | cpu | **FAIL** ❌ unsupported |" in (project / "m.md").read_text()
    assert not [p.name for p in project.rglob(".qcheck-*")]  # no temporary files left behind


def test_an_unwritable_report_is_exit_2_and_writes_nothing_else(project):
    (project / "qcheck.toml").write_text('models = ["q4.gguf"]\n[[targets]]\nengine = "tinycpp"\ngpu = "cpu"\n')
    proc = qcheck("gate", "--junit", "missing-dir/j.xml", cwd=project)
    assert proc.returncode == 2
    assert proc.stderr == "qcheck: error: cannot write the report missing-dir/j.xml: No such file or directory\n"


def _big_bf16(path: Path, layers: int = 80, hidden: int = 8192, inter: int = 28672, vocab: int = 128256) -> Path:
    """A Llama-70B-shaped BF16 checkpoint: real header, sparse zero data (~141 GB logical, no disk used)."""
    tensors: dict = {"model.embed_tokens.weight": ("BF16", [vocab, hidden]), "lm_head.weight": ("BF16", [vocab, hidden])}
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors |= {p + "self_attn.q_proj.weight": ("BF16", [hidden, hidden]),
                    p + "self_attn.k_proj.weight": ("BF16", [1024, hidden]),
                    p + "self_attn.v_proj.weight": ("BF16", [1024, hidden]),
                    p + "self_attn.o_proj.weight": ("BF16", [hidden, hidden]),
                    p + "mlp.gate_proj.weight": ("BF16", [inter, hidden]),
                    p + "mlp.up_proj.weight": ("BF16", [inter, hidden]),
                    p + "mlp.down_proj.weight": ("BF16", [hidden, inter])}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        size = shape[0] * shape[1] * 2
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.mkdir(parents=True)
    with open(path / "model.safetensors", "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + offset)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
              "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": 64,
              "num_key_value_heads": 8, "vocab_size": vocab, "max_position_embeddings": 131072,
              "torch_dtype": "bfloat16"}
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_memory_limit_fails_a_model_that_does_not_fit(project):
    _big_bf16(project / "big")
    policy = ('models = ["big"]\n[[targets]]\nengine = "fastserve"\ngpu = "a100"\n'
              '[memory]\ncontext = 8192\nbatch = 1\n')
    proc, data = _gate(project, policy)
    assert proc.returncode == 1, proc.stderr
    [v] = data["models"][0]["verdicts"]
    # the test matrix's fastserve has memory data but no start-up behaviour read: a model that does not fit starts
    # or not, qcheck cannot tell (unknown fails), and the start-up is what fails it
    assert v["memory"]["fits"] is False and v["memory_fails"] and v["fails"]
    assert v["status"] == "unknown" and v["startup"]["outcome"] == "unknown"
    assert v["outcome"]["because"] == ["start-up-unknown"]
    assert [d["status"] for d in v["dimensions"] if d["dimension"] == "weights"] == ["native"]
    assert v["memory"]["context"] == 8192
    junit = qcheck("gate", "--format", "junit", cwd=project)
    assert junit.returncode == 1
    [case] = [c for s in junitparser.JUnitXml.fromstring(junit.stdout.split("\n", 1)[1]) for c in s]
    assert case.result[0].type == "start-up-unknown" and "does not fit" in case.result[0].message
    proc = qcheck("gate", "--format", "sarif", cwd=project)
    [res] = json.loads(proc.stdout)["runs"][0]["results"]
    assert (res["ruleId"], res["level"]) == ("QC116", "error")
    proc, data = _gate(project, policy + "enforce = false\n")
    assert proc.returncode == 0
    assert data["models"][0]["verdicts"][0]["memory"]["fits"] is False
    proc = qcheck("gate", "--format", "sarif", cwd=project)
    [res] = json.loads(proc.stdout)["runs"][0]["results"]
    assert (res["ruleId"], res["level"]) == ("QC114", "warning")


def test_init_writes_a_policy_the_gate_accepts(project):
    proc = qcheck("gate", "--init", cwd=project, matrix=False)  # the starter names real engines: shipped matrix
    assert proc.returncode == 0, proc.stderr
    text = (project / "qcheck.toml").read_text()
    assert '"q4.gguf"' in text and '"bf16"' in text and '"fp8"' in text
    proc = qcheck("gate", "--json", cwd=project, matrix=False)
    assert proc.returncode in (0, 1), proc.stderr  # a valid policy: judged, whatever the verdicts
    data = json.loads(proc.stdout)
    validate(data, "gate")
    assert [m["status"] for m in data["models"]] == ["judged"] * 3
    assert {v["engine"] for m in data["models"] for v in m["verdicts"]} == {"llama.cpp", "vllm"}
    q4 = next(m for m in data["models"] if m["name"] == "q4.gguf")
    assert {v["engine"] for v in q4["verdicts"]} == {"llama.cpp"}
    again = qcheck("gate", "--init", cwd=project, matrix=False)
    assert again.returncode == 2 and "already exists; pass --force" in again.stderr
    assert qcheck("gate", "--init", "--force", cwd=project, matrix=False).returncode == 0


def test_init_in_an_empty_directory_says_so(tmp_path):
    proc = qcheck("gate", "--init", "--policy", "ci/policy.toml", cwd=tmp_path)
    assert proc.returncode == 2  # the directory for the file must exist
    assert proc.stderr == "qcheck: error: cannot write ci/policy.toml: No such file or directory\n"
    (tmp_path / "ci").mkdir()
    proc = qcheck("gate", "--init", "--policy", "ci/policy.toml", cwd=tmp_path)
    assert proc.returncode == 0 and "no model files were found" in proc.stdout
    assert 'models = ["models/*.gguf"]' in (tmp_path / "ci" / "policy.toml").read_text()


def test_gate_without_quality_never_imports_torch_or_numpy(project):
    (project / "qcheck.toml").write_text('models = ["q4.gguf", "bf16"]\n' + TARGETS.replace(', "fp8"', ""))
    code = ("import sys\nfrom qcheck.cli import main\n"
            "try:\n    main(['gate', '--junit', 'j.xml', '--sarif', 's.sarif', '--markdown', 'm.md', '--github'])\n"
            "except SystemExit as exc:\n    rc = exc.code\n"
            "print(rc, sorted(m for m in ('torch', 'numpy', 'transformers') if m in sys.modules), file=sys.stderr)\n")
    proc = subprocess.run([PY, "-c", code], cwd=project, env=env(), capture_output=True, text=True, timeout=120)
    assert proc.stderr.strip().splitlines()[-1] == "0 []", proc.stderr
