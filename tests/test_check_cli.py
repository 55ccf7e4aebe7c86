"""``qcheck check`` through the real CLI (subprocesses): exit codes, outputs, usage errors, import hygiene.

Checkpoints are saved ``qcheck.inspection/1`` records (what ``qcheck inspect --json`` writes), judged
against the test matrix selected with ``QCHECK_MATRICES``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qcheck.check import CheckResult, inspection_from_json, verdict_fails
from qcheck.errors import InputError
from qcheck.model import Inspection, Quantization, Verdict
from support.contract import validate

TEST_MATRIX = Path(__file__).parent / "data" / "matrices"
PY = sys.executable

def run(*args: str, matrices: Path | None = TEST_MATRIX, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("QCHECK_DEBUG", None)
    if matrices is not None:
        env["QCHECK_MATRICES"] = str(matrices)
    return subprocess.run([PY, "-m", "qcheck", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=180)


def save(path: Path, inspection: Inspection) -> str:
    path.write_text(json.dumps(inspection.to_json()), encoding="utf-8")
    return str(path)


@pytest.fixture
def fp8(tmp_path: Path) -> str:
    return save(tmp_path / "fp8.json", Inspection(
        path="org/model-FP8", container="safetensors", dtype="bfloat16", architecture="LlamaForCausalLM",
        quantization=Quantization(method="fp8", weight_bits=8, activation_dtype="float8_e4m3",
                                  scale_granularity="per-tensor")))


@pytest.fixture
def split_gguf(tmp_path: Path) -> str:
    return save(tmp_path / "gguf.json", Inspection(
        path="model-Q4_K_M-00001-of-00002.gguf", container="gguf", gguf_split_count=2,
        quantization=Quantization(method="gguf", gguf_file_type="Q4_K_M",
                                  tensor_types={"Q4_K": 193, "Q6_K": 33, "F32": 65})))


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--engine", "fastserve", "--gpu", "h100"], 0),                        # native
        (["--engine", "fastserve", "--gpu", "t4"], 0),                          # fallback runs
        (["--engine", "fastserve", "--gpu", "t4", "--require-native"], 1),      # ... unless native is required
        (["--engine", "fastserve", "--gpu", "h100", "--require-native"], 0),
        (["--engine", "fastserve", "--gpu", "v100"], 1),                        # unsupported
        (["--engine", "fastserve", "--gpu", "v100", "--allow-unknown"], 1),
        (["--engine", "fastserve", "--gpu", "mi300x"], 1),                      # unknown
        (["--engine", "fastserve", "--gpu", "mi300x", "--allow-unknown"], 0),
        (["--engine", "fastserve", "--gpu", "h100", "--gpu", "v100"], 1),       # any failing combination
        (["-e", "fastserve", "-e", "cloudco", "-g", "h100"], 1),                # the provider refuses FP8
    ],
)
def test_exit_codes(fp8: str, args: list[str], code: int) -> None:
    proc = run("check", fp8, *args)
    assert proc.returncode == code, proc.stderr + proc.stdout
    assert proc.stderr == ""


def test_bare_path_means_check(fp8: str) -> None:
    proc = run(fp8, "--engine", "fastserve", "--gpu", "t4", "--require-native")
    assert proc.returncode == 1
    assert "FALLBACK" in proc.stdout and "Marlin FP8 W8A16" in proc.stdout


def test_text_output(split_gguf: str) -> None:
    proc = run("check", split_gguf, "--engine", "fastserve", "--engine", "fastserve==0.20.0", "--gpu", "rtx 4090")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.splitlines()[0].startswith("model-Q4_K_M-00001-of-00002.gguf: ")
    assert "NATIVE       fastserve 0.33.0 x rtx-4090 (ada, sm89)" in out
    assert "NATIVE       fastserve 0.20.0 x rtx-4090 (ada, sm89)" in out
    assert "requires:  pip install fastserve-gguf-plugin" in out
    assert "merge shards: llama-gguf-split --merge model-Q4_K_M-00001-of-00002.gguf merged.gguf" in out
    assert "sources:   https://example.org/fastserve-gguf-plugin @ 0.24.0" in out
    assert out.rstrip().endswith("2 combinations: 2 native; all combinations run it (exit 0)")


def test_json_output_and_file(fp8: str, tmp_path: Path) -> None:
    proc = run("check", fp8, "--engine", "fastserve", "--gpu", "t4", "--gpu", "v100", "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    validate(data, "check")
    assert data["exit_code"] == 1
    assert [(v["gpu"], v["status"]) for v in data["verdicts"]] == [("t4", "fallback"), ("v100", "unsupported")]
    assert data["verdicts"][1]["reasons"] == ["fp8 needs compute capability 7.5; v100 is sm70"]
    assert data["verdicts"][1]["sources"][0] == {"ref": "example/fastserve: quantization/fp8.py",
                                                 "version": "0.33.0", "note": None}
    out = tmp_path / "report.json"
    proc = run("check", fp8, "--engine", "fastserve", "--gpu", "h100", "--format", "json", "-o", str(out))
    assert proc.returncode == 0 and proc.stdout == ""
    assert json.loads(out.read_text())["verdicts"][0]["status"] == "native"


def test_gpu_only_checks_every_gpu_engine(fp8: str) -> None:
    proc = run("check", fp8, "--gpu", "h100", "--json")
    engines = [v["engine"] for v in json.loads(proc.stdout)["verdicts"]]
    assert engines == ["fastserve", "tinycpp"]  # providers take no GPU and are not implied


def test_provider_only(fp8: str) -> None:
    proc = run("check", fp8, "--engine", "cloudco", "--json")
    [v] = json.loads(proc.stdout)["verdicts"]
    assert (v["engine"], v["gpu"], v["status"]) == ("cloudco", None, "unsupported")
    assert proc.returncode == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engine", "fastserve", "--gpu", "h10"], "qcheck: error: unknown GPU 'h10'; did you mean: h100"),
        (["--engine", "fastserv", "--gpu", "h100"], "qcheck: error: unknown engine 'fastserv'; did you mean: fastserve?"),
        (["--engine", "fastserve==x.y", "--gpu", "h100"], "'x.y' is not a PEP 440 version"),
        (["--engine", "fastserve"], "FastServe runs on hardware you choose: add --gpu"),
        (["--engine", "tinycpp:opencl", "--gpu", "h100"], "has no backend 'opencl' (known: cuda, rocm, metal, vulkan, cpu)"),
        (["--engine", "fastserve", "--gpu", "h100", "--format", "yaml"], "Invalid value for '--format'"),
    ],
)
def test_usage_errors_exit_2_with_one_line(fp8: str, args: list[str], message: str) -> None:
    proc = run("check", fp8, *args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_usage_errors_come_before_reading_the_file(tmp_path: Path) -> None:
    proc = run("check", str(tmp_path / "missing.gguf"), "--engine", "fastserve", "--gpu", "hopperr")
    assert proc.returncode == 2 and "unknown GPU 'hopperr'; did you mean: hopper" in proc.stderr


def test_bad_saved_inspection_is_input_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "qcheck.inspection/1", "path": "x", "container": "gguf",
                               "quantization": {"method": "gguf", "tensor_types": {"Q4_K": "many"}}}))
    proc = run("check", str(bad), "--engine", "fastserve", "--gpu", "h100")
    assert proc.returncode == 2
    assert "quantization.tensor_types: must map type names to counts" in proc.stderr and "bad.json" in proc.stderr


def test_matrix_data_error_exit_2_names_file(tmp_path: Path, fp8: str) -> None:
    import shutil

    root = tmp_path / "matrices"
    shutil.copytree(TEST_MATRIX, root)
    path = root / "engines" / "fastserve.toml"
    path.write_text(path.read_text().replace('id = "fp8-native"\nmethods = ["fp8"]',
                                             'id = "fp8-native"\nmethods = ["fp9"]'))
    proc = run("check", fp8, "--engine", "fastserve", "--gpu", "h100", matrices=root)
    assert proc.returncode == 2
    assert ("qcheck: error: matrix data error: matrices/engines/fastserve.toml: rule 'fp8-native' (#5): "
            "[unknown-method] method 'fp9' is not canonical") in proc.stderr


def test_check_imports_no_heavy_modules(fp8: str) -> None:
    code = (
        "import sys\n"
        "from qcheck.cli import main\n"
        "try:\n"
        f"    main(['check', {fp8!r}, '--engine', 'fastserve', '--gpu', 'h100', '--json'])\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'numpy', 'safetensors', 'huggingface_hub') "
        "if m in sys.modules)\n"
        "print('HEAVY=' + ','.join(heavy), file=sys.stderr)\n"
    )
    env = {**os.environ, "QCHECK_MATRICES": str(TEST_MATRIX)}
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY=\n" in proc.stderr or proc.stderr.strip().endswith("HEAVY=")


def test_check_imports_no_heavy_modules_on_shipped_matrix() -> None:
    code = (
        "import sys\n"
        "from qcheck.matrix import load_matrix\n"
        "from qcheck.pipeline import judge\n"
        "from qcheck.request import CheckRequest, Deploy\n"
        "from qcheck.model import Inspection, Quantization\n"
        "m = load_matrix()\n"
        "insp = Inspection(path='x', container='safetensors', quantization=Quantization(method='fp8'))\n"
        "judge(insp, CheckRequest('x', (), ('h100', 'rtx-4090', 'mi300x', 'm3-max', 'cpu'), Deploy(context=4096),\n"
        "                         memory=True), m)\n"
        "print('MODULES=' + ','.join(sorted(x for x in ('torch', 'transformers', 'numpy') if x in sys.modules)))\n"
    )
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "MODULES="


class TestPolicy:
    @pytest.mark.parametrize(
        ("status", "require_native", "allow_unknown", "fails"),
        [("native", False, False, False), ("native", True, True, False), ("fallback", False, False, False),
         ("fallback", True, False, True), ("unsupported", False, True, True), ("unknown", False, False, True),
         ("unknown", False, True, False), ("unknown", True, True, False)],
    )
    def test_verdict_fails(self, status: str, require_native: bool, allow_unknown: bool, fails: bool) -> None:
        v = Verdict(engine="e", engine_version="1", gpu=None, arch=None, compute_capability=None, status=status)
        assert verdict_fails(v, require_native=require_native, allow_unknown=allow_unknown) is fails

    def test_empty_result_passes(self) -> None:
        assert CheckResult(Inspection(path="x", container="gguf"), []).exit_code == 0


def test_inspection_round_trip() -> None:
    insp = Inspection(path="m.gguf", container="gguf", gguf_split_count=3, moe=True, parameters=8_000_000_000,
                      quantization=Quantization(method="gguf", tensor_types={"Q4_K": 3}, block_size=[128, 128]))
    back = inspection_from_json(json.loads(json.dumps(insp.to_json())))
    assert back == insp


@pytest.mark.parametrize(
    ("patch", "where"),
    [({"container": "zip"}, "container"), ({"moe": "yes"}, "moe"), ({"gguf_split_count": True}, "gguf_split_count"),
     ({"quantization": {"method": 4}}, "quantization.method"), ({"files": [1]}, "files[0]")],
)
def test_inspection_from_json_rejects_wrong_types(patch: dict, where: str) -> None:
    data = {"schema": "qcheck.inspection/1", "path": "x", "container": "gguf", "quantization": {"method": "gguf"}}
    data.update(patch)
    with pytest.raises(InputError) as info:
        inspection_from_json(data, "x.json")
    assert info.value.where == where


def test_real_files_check_without_heavy_imports(tmp_path: Path) -> None:
    """The whole real path (reader -> classifier -> shipped matrix) on a GGUF file and a safetensors model
    directory imports neither torch, transformers nor numpy."""
    from support import builders
    from support.gguf_helpers import Q, write_gguf

    [gguf_file] = write_gguf(tmp_path / "m-Q4_K_M.gguf", [("blk.0.attn_q.weight", (256, 256), Q.Q4_K),
                                                          ("output_norm.weight", (256,), Q.F32)], file_type=15)
    model_dir = builders.fp8_block_deepseek().write(tmp_path / "fp8")
    code = (
        "import sys\n"
        "from qcheck.cli import main\n"
        "codes = []\n"
        f"for path in ({str(gguf_file)!r}, {str(model_dir)!r}):\n"
        "    try:\n"
        "        main(['check', path, '--engine', 'vllm', '--gpu', 'h100', '--json'])\n"
        "    except SystemExit as e:\n"
        "        codes.append(e.code)\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers', 'numpy'))\n"
        "print('CODES=%s HEAVY=%s' % (codes, heavy), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "QCHECK_MATRICES"}
    proc = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, timeout=180)
    assert proc.stderr.strip().splitlines()[-1] == "CODES=[0, 0] HEAVY=[]", proc.stderr
    reports = [json.loads(chunk) for chunk in proc.stdout.replace("}\n{", "}\n\x00{").split("\x00")]
    assert [r["inspection"]["quantization"]["method"] for r in reports] == ["gguf", "fp8"]
    assert [r["verdicts"][0]["status"] for r in reports] == ["native", "native"]


def test_a_memory_question_fills_every_verdict() -> None:
    from qcheck.matrix.loader import load_matrix
    from qcheck.pipeline import judge
    from qcheck.request import CheckRequest, Deploy

    m = load_matrix(TEST_MATRIX)
    insp = Inspection(path="x", container="safetensors", quantization=Quantization(method="fp8"), num_layers=2,
                      num_attention_heads=4, num_kv_heads=2, hidden_size=128, size_bytes=10**6)
    asked = CheckRequest("x", ("fastserve",), ("h100", "t4"), Deploy(context=1024), memory=True)
    result = judge(insp, asked, m)
    # products without a driver figure in this test catalogue: its [capacity] estimate, 0.98 x the datasheet size
    assert [v.memory.gpu_memory_bytes for v in result.verdicts] == [int(80 * 0.98 * 2**30), int(16 * 0.98 * 2**30)]
    assert all(v.memory.capacity_basis == "estimate" for v in result.verdicts)
    assert result.request is asked
    # the request's per-GPU memory (--gpu auto: what is free) is where the engine starts from; the device total
    # and its source stay in `capacity`
    result = judge(insp, asked.replace(gpu_memory_gib=(("t4", 9.5),)), m)
    h100, t4 = (v.memory for v in result.verdicts)
    assert t4.gpu_memory_bytes == int(9.5 * 2**30) and t4.usable_bytes <= int(9.5 * 2**30)
    assert "9.5 GiB free, measured on this machine" in t4.capacity and h100.usable_bytes > 50 * 2**30
    # no memory question: the memory figure at the engine's defaults for the verdicts that run on a product, its
    # start-up reported, not judged (issue 33); the status is the kernels' alone
    plain = judge(insp, asked.replace(memory=False, deploy=Deploy()), m)
    assert all(v.memory is None or (v.status in ("native", "fallback") and v.memory.context) for v in plain.verdicts)
    assert all(v.startup is None or (not v.startup.judged and v.startup.not_judged == "no deployment setting asked")
               for v in plain.verdicts)
    assert all(d.dimension != "start-up" for v in plain.verdicts for d in v.dimensions)


def test_pickle_checkpoint_is_not_judged(tmp_path: Path) -> None:
    """A pickle is never loaded and cannot be judged from headers: exit 2, one line, nothing on stdout."""
    import collections
    import pickle

    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(pickle.dumps(collections.OrderedDict(a=1), protocol=2))
    proc = run("check", str(path), "--engine", "fastserve", "--gpu", "h100", "--json")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("qcheck: error: ") and "never unpickled" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_gpu_only_skips_engines_that_do_not_run_on_the_vendor(fp8: str) -> None:
    # fastserve runs on nvidia and amd, tinycpp on nvidia, amd, apple and cpu
    proc = run("check", fp8, "--gpu", "m3-max", "--gpu", "mi300x", "--json")
    pairs = [(v["engine"], v["gpu"]) for v in json.loads(proc.stdout)["verdicts"]]
    assert pairs == [("fastserve", "mi300x"), ("tinycpp", "m3-max"), ("tinycpp", "mi300x")]
    named = run("check", fp8, "--engine", "fastserve", "--gpu", "m3-max", "--json")
    [v] = json.loads(named.stdout)["verdicts"]
    assert (v["status"], v["rule_id"]) == ("unsupported", "engine-hardware")  # named: judged, not skipped
