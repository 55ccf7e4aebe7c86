"""Runs means it starts (issue 30): when a question names a deployment's settings, the verdict and the exit code
carry what the engine does at start-up with them, through every door.

Every case runs the real CLI (a subprocess, the shipped matrix) on real-shaped checkpoints: safetensors headers with
the published runs' shapes (data written sparse), GGUF headers from tests/support/model_headers.py. The doors are
qcheck's flags, the engine command line (``qcheck check --gpu G -- vllm serve ...``) and a Kubernetes manifest in
``qcheck gate`` without a ``[memory]`` table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from support.gate_helpers import qcheck
from support.memory_validation import load_runs
from support.startup_models import command_args, fixture_for, manifest, write_run

REFUSED = [r for r in load_runs() if r["measured"]["kind"] == "refused"]
QWEN32 = next(r for r in load_runs() if r["id"] == "vllm-011-qwen3-32b-32k")


def check(*args: str, cwd: Path | None = None) -> tuple[int, str]:
    proc = qcheck("check", *args, cwd=cwd, matrix=False)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, proc.stdout


def check_json(*args: str, cwd: Path | None = None) -> tuple[int, dict[str, Any]]:
    code, out = check("--json", *args, cwd=cwd)  # before any `--`: after it the words are the engine's
    return code, json.loads(out)


def flags_of(run: dict[str, Any]) -> list[str]:
    s = run.get("settings", {})
    out = ["--context", str(s["context"])] if s.get("context") else []
    if s.get("tp"):
        out += ["--tp", str(s["tp"])]
    for name, value in s.get("knobs", {}).items():
        out += ["--" + name.replace("_", "-"), str(value)]
    return out


def gate_repo(tmp: Path, run: dict[str, Any]) -> Path:
    """A repository holding the run's model and a Kubernetes manifest deploying it, and a deployments-only policy
    (no [memory]: the manifest is the deployment)."""
    (tmp / ".git").mkdir(parents=True)
    write_run(run, tmp / "models" / "m")
    (tmp / "deploy").mkdir()
    (tmp / "deploy" / "server.yaml").write_text(manifest(run, "/models/m"))
    (tmp / "qcheck.toml").write_text('deployments = [{ file = "deploy/server.yaml", '
                                     'models = { "/models/m" = "models/m" } }]\n')
    return tmp


# ------------------------------------------------------------------------------------------ refusals, every door
@pytest.mark.parametrize("run", REFUSED, ids=[r["id"] for r in REFUSED])
def test_every_published_refusal_fails_through_every_door(run: dict[str, Any], tmp_path: Path) -> None:
    """tests/data/memory_validation.toml's runs that did not start are exit 1 from the flags, from the engine's
    command line and from a manifest, and read "does not start" in the status line and the summary."""
    model = write_run(run, tmp_path / "m")
    engine = f"{run['engine']}=={run['version']}"
    code, out = check(str(model), "--engine", engine, "--gpu", run["gpu"], *flags_of(run))
    assert code == 1, out
    assert "DOES NOT START" in out and "1 does not start; 1 of 1 fails (exit 1)" in out, out
    assert "it runs" not in out
    code, data = check_json("--engine", engine, "--gpu", run["gpu"], "--", *command_args(run, str(model)))
    [v] = data["verdicts"]
    assert code == 1 and v["startup"]["outcome"] == "does-not-start" and v["status"] == "unsupported"
    assert v["outcome"]["because"] == ["does-not-start"] and v["fails"] and data["exit_code"] == 1
    repo = gate_repo(tmp_path / "repo", run)
    proc = qcheck("gate", "--json", cwd=repo, matrix=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    [judged] = json.loads(proc.stdout)["models"]
    [g] = judged["verdicts"]
    assert (g["engine_version"], g["gpu"], g["startup"]["outcome"], g["fails"]) == \
        (run["version"], run["gpu"], "does-not-start", True)
    text = qcheck("gate", cwd=repo, matrix=False).stdout
    assert "DOES NOT START" in text and "gate FAILED (exit 1)" in text


def test_the_issue_example_reads_as_vllm_says_it(tmp_path: Path) -> None:
    """Qwen3-32B BF16 at 32000 tokens on one H100, gpu_memory_utilization 0.9: vLLM 0.11 logged 7.81 GiB of KV
    needed for one request and 4.45 GiB available; qcheck says the same within 5 % and how to make it start."""
    model = write_run(QWEN32, tmp_path / "Qwen3-32B")
    code, data = check_json(str(model), "--engine", "vllm==0.11.0", "--gpu", "h100", *flags_of(QWEN32))
    [v] = data["verdicts"]
    startup, memory = v["startup"], v["memory"]
    assert code == 1 and startup["outcome"] == "does-not-start" and startup["judged"]
    assert "To serve at least one request with the model's max seq len (32000)" in startup["message"]
    assert memory["kv_available_gib"] == pytest.approx(4.45, rel=0.05)
    assert memory["max_concurrency"] < 1 and "--tensor-parallel-size 2" in startup["message"]
    assert "kv_cache_utils.py" in startup["source"] and "0.11.0" in startup["version"]
    assert [d["status"] for d in v["dimensions"] if d["dimension"] in ("weights", "start-up")] == \
        ["native", "unsupported"]
    # the same model at 16000 tokens starts: one request fits, and the batch asked is more than the pool holds
    code, data = check_json(str(model), "--engine", "vllm==0.11.0", "--gpu", "h100", "--context", "16000",
                            "--gpu-memory-utilization", "0.9", "--batch", "8")
    [v] = data["verdicts"]
    assert code == 0 and v["startup"]["outcome"] == "starts" and v["status"] == "native"
    assert "at most 1 request of 16000 tokens at once (--batch 8 asked: the rest wait)" in v["startup"]["message"]
    # --tp 2 on two GPUs: it starts
    code, data = check_json(str(model), "--engine", "vllm==0.11.0", "--gpu", "h100", "--tp", "2",
                            *flags_of(QWEN32))
    assert code == 0 and data["verdicts"][0]["startup"]["outcome"] == "starts"


def test_kernels_only_reports_the_start_up_without_failing(tmp_path: Path) -> None:
    model = write_run(QWEN32, tmp_path / "m")
    args = [str(model), "--engine", "vllm==0.11.0", "--gpu", "h100", *flags_of(QWEN32)]
    code, out = check(*args, "--kernels-only")
    assert code == 0 and "NATIVE" in out and "(not judged: --kernels-only)" in out
    assert "vLLM refuses to start" in out
    code, data = check_json(*args, "--kernels-only")
    [v] = data["verdicts"]
    assert v["startup"]["judged"] is False and v["status"] == "native" and data["policy"]["kernels_only"]
    assert all(d["dimension"] != "start-up" for d in v["dimensions"])
    # the policy key, per target and at the top level
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    write_run(QWEN32, repo / "m")
    base = ('models = ["m"]\n[[targets]]\nengine = "vllm==0.11.0"\ngpu = "h100"\n{extra}'
            "[memory]\ncontext = 32000\ngpu-memory-utilization = 0.9\n")
    for extra, code in (("", 1), ("kernels-only = true\n", 0)):
        (repo / "qcheck.toml").write_text(base.format(extra=extra))
        proc = qcheck("gate", "--json", cwd=repo, matrix=False)
        assert proc.returncode == code, proc.stdout + proc.stderr
        [g] = json.loads(proc.stdout)["models"][0]["verdicts"]
        assert g["policy"]["kernels_only"] is bool(code == 0) and g["startup"]["outcome"] == "does-not-start"


# ------------------------------------------------------------------------------------------ what cannot be told
def test_an_architecture_or_an_engine_without_memory_data_is_unknown_never_runs(tmp_path: Path) -> None:
    model = write_run(QWEN32, tmp_path / "m")
    code, out = check(str(model), "--engine", "vllm==0.11.0", "--gpu", "hopper", "--context", "8192")
    assert code == 1 and "START UNKNOWN" in out and "no GPU product was named" in out and "it runs" not in out
    code, _ = check(str(model), "--engine", "vllm==0.11.0", "--gpu", "hopper", "--context", "8192",
                    "--allow-unknown")
    assert code == 0
    code, data = check_json(str(model), "--engine", "vllm==0.11.0", "--gpu", "h100")  # no deployment asked
    assert code == 0 and data["verdicts"][0]["startup"] is None


def test_a_context_above_the_model_limit(tmp_path: Path) -> None:
    """vLLM and SGLang refuse --max-model-len / --context-length above the model's maximum unless the environment
    allows it; llama.cpp accepts it (a warning)."""
    model = write_run(QWEN32, tmp_path / "Qwen3-32B")  # max_position_embeddings 40960
    code, data = check_json("--gpu", "h100", "--", "vllm", "serve", str(model), "--max-model-len", "65536", "-tp",
                            "4")
    [v] = data["verdicts"]
    assert code == 1 and v["startup"]["outcome"] == "does-not-start"
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in v["startup"]["message"]
    code, data = check_json("--gpu", "h100", "--", "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1", "vllm", "serve", str(model),
                            "--max-model-len", "65536", "-tp", "4")
    [v] = data["verdicts"]
    assert code == 0 and v["startup"]["outcome"] == "starts", v["startup"]
    judged = {s["flag"]: s["judged_as"] for s in data["deployment"]["judged"]}
    assert judged["VLLM_ALLOW_LONG_MAX_MODEL_LEN"] == "knobs.allow_long_context"
    code, data = check_json("--gpu", "h100", "--", "python", "-m", "sglang.launch_server", "--model-path",
                            str(model), "--context-length", "65536", "--tp", "4")
    assert code == 1 and "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in data["verdicts"][0]["startup"]["message"]
    # a model that declares RoPE scaling: the engines raise the limit by its factor for some types, not modelled
    cfg = dict(QWEN32["config"], rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                               "original_max_position_embeddings": 32768})
    fixture_for(cfg).write(tmp_path / "yarn")
    code, data = check_json("--gpu", "h100", "--", "vllm", "serve", str(tmp_path / "yarn"), "--max-model-len",
                            "65536", "-tp", "4")
    startup = data["verdicts"][0]["startup"]
    assert code == 1 and startup["outcome"] == "unknown" and "RoPE scaling (yarn)" in startup["message"]


# ------------------------------------------------------------------------------------------ llama.cpp
@pytest.fixture(scope="module")
def llama8b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from support.model_headers import llama31_8b_q4_k_m, write_header

    path = tmp_path_factory.mktemp("gguf") / "Llama-3.1-8B-Instruct-Q4_K_M.gguf"
    write_header(path, llama31_8b_q4_k_m())
    return path


def _llama(model: Path, *more: str) -> dict[str, Any]:
    code, data = check_json(str(model), "--engine", "llama.cpp", "--gpu", "h100", "--context", "8192", *more)
    assert code in (0, 1)
    return data["verdicts"][0]


def test_ngl_sets_the_gpu_part_the_fit_and_the_speed(llama8b: Path) -> None:
    """-ngl 0 on an 8B Q4_K_M needs < 1 GiB on the GPU and decodes at host bandwidth (well under half the
    all-on-GPU ceiling); -ngl 20 is in between; every listed part adds up to the stated total."""
    full, half, none = (_llama(llama8b, "-ngl", n) for n in ("all", "20", "0"))
    gib = 1024**3
    for v in (full, half, none):
        m = v["memory"]
        device = [p for p in m["parts"] if p["name"] not in ("weights in host memory", "KV cache in host memory")]
        host = [p for p in m["parts"] if p["name"] in ("weights in host memory", "KV cache in host memory")]
        assert sum(p["bytes"] for p in device) == m["total_bytes"] == m["per_gpu_bytes"]
        assert sum(p["bytes"] for p in host) == m["host_bytes"]
        assert m["fits"] is True
    assert none["memory"]["total_bytes"] < 1 * gib < half["memory"]["total_bytes"] < full["memory"]["total_bytes"]
    assert none["memory"]["host_bytes"] > half["memory"]["host_bytes"] > full["memory"]["host_bytes"]
    speeds = [v["memory"]["speed"]["decode_tokens_per_s"] for v in (full, half, none)]
    assert speeds[2] < 0.5 * speeds[0] and speeds[2] < speeds[1] < speeds[0]
    slow = none["memory"]["speed"]
    assert slow["host_bandwidth_gbs"] == 307.2 and slow["ram_bytes_per_step"] > 0.9 * slow["bytes_per_step"]
    assert "in RAM at 307.2 GB/s host bandwidth" in none["memory"]["speed_summary"]
    assert none["memory"]["summary"].startswith("needs 0.1 GiB on the GPU with -ngl 0 of 33")
    assert (none["startup"]["outcome"], none["status"], full["startup"]["outcome"]) == \
        ("offloaded", "fallback", "starts")
    # the host bandwidth is an input: twice the bandwidth, about twice the all-in-RAM ceiling
    faster = _llama(llama8b, "-ngl", "0", "--host-bandwidth", "614.4")["memory"]["speed"]
    assert faster["host_bandwidth_basis"] == "--host-bandwidth"
    assert faster["decode_tokens_per_s"] == pytest.approx(2 * slow["decode_tokens_per_s"], rel=0.02)


def test_a_pinned_split_that_does_not_fit_does_not_start(llama8b: Path) -> None:
    code, data = check_json(str(llama8b), "--engine", "llama.cpp", "--gpu", "rtx-3060", "--context", "131072",
                            "-ngl", "all")
    [v] = data["verdicts"]
    assert code == 1 and v["startup"]["outcome"] == "does-not-start" and "fails to load" in v["startup"]["message"]
    # without -ngl, --fit lowers the context (none asked) or moves layers to the CPU (one asked): it starts
    code, data = check_json(str(llama8b), "--gpu", "rtx-3060", "--", "llama-server", "-m", str(llama8b))
    [v] = data["verdicts"]
    assert code == 0 and v["startup"]["outcome"] == "context-lowered" and v["startup"]["context"] < 131072
    asked = (str(llama8b), "--engine", "llama.cpp", "--gpu", "rtx-3090", "--context", "131072", "--batch", "2")
    code, data = check_json(*asked)
    [v] = data["verdicts"]
    assert code == 0 and v["startup"]["outcome"] == "offloaded" and v["status"] == "fallback"
    assert v["memory"]["fits"] is False and v["memory"]["speed"]["ram_bytes_per_step"] > 0
    assert v["memory"]["speed"]["host_bandwidth_gbs"] == 89.6  # a GeForce card: the desktop default
    code, _ = check(*asked, "--require-native")
    assert code == 1


def test_the_bf16_gguf_parts_add_up(tmp_path: Path) -> None:
    """The token embeddings llama.cpp keeps in RAM are not also in the GPU total (issue 30's BF16 example)."""
    import copy

    from support.model_headers import llama31_8b_q4_k_m, write_header

    header = copy.deepcopy(llama31_8b_q4_k_m())
    header.tensors = [(n, s, "F32" if t == "F32" else "BF16") for n, s, t in header.tensors]
    header.metadata["general.file_type"] = 32
    path = tmp_path / "Llama-3.1-8B-BF16.gguf"
    write_header(path, header)
    v = _llama(path)
    m = v["memory"]
    parts = {p["name"]: p["bytes"] for p in m["parts"]}
    device = sum(b for n, b in parts.items() if n != "weights in host memory")
    assert device == m["total_bytes"] and parts["weights in host memory"] == m["host_bytes"]
    assert parts["weights"] + parts["weights in host memory"] == m["weights_bytes"]
    gib = 1024**3
    assert f"(weights {parts['weights'] / gib:.1f} + KV" in m["summary"]


def test_a_setting_the_engine_does_not_read_is_not_judged(tmp_path: Path) -> None:
    model = write_run(QWEN32, tmp_path / "m")
    code, out = check(str(model), "--engine", "vllm==0.11.0", "--gpu", "h100", "--tp", "2", "-ngl", "20")
    assert code == 0 and "not judged: -ngl 20" in out
    code, data = check_json("--gpu", "h100", "--", "vllm", "serve", str(model), "-tp", "2", "--enforce-eager")
    assert not data["deployment"]["not_judged"]
    code, data = check_json(str(model), "--gpu", "rtx-4090", "--", "llama-server", "-m", "x.gguf", "-lm", "none")
    assert [s["flag"] for s in data["deployment"]["not_judged"]] == ["-lm"]


# ------------------------------------------------------------------------------------------ one policy, every door
def _deploy_repo(tmp: Path, model: Any, args: list[str], image: str = "vllm/vllm-openai:v0.34.0",
                 label: str = "NVIDIA-H100-80GB-HBM3") -> Path:
    """A repository with one model and a Kubernetes manifest serving it; the policy is written by the test."""
    (tmp / ".git").mkdir(parents=True)
    model.write(tmp / "models" / "m")
    (tmp / "deploy").mkdir()
    (tmp / "deploy" / "k8s.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: m}\nspec:\n  template:\n    spec:\n"
        f"      nodeSelector:\n        nvidia.com/gpu.product: {label}\n      containers:\n        - name: server\n"
        f"          image: {image}\n          args: {json.dumps(['/models/m', *args])}\n"
        "          resources: {limits: {nvidia.com/gpu: 1}}\n")
    return tmp


DEPLOYMENT = 'deployments = [{ file = "deploy/k8s.yaml", models = { "/models/m" = "models/m" } }]\n'


def _gate(repo: Path, policy: str) -> tuple[int, dict[str, Any] | None, str]:
    (repo / "qcheck.toml").write_text(policy)
    proc = qcheck("gate", "--json", cwd=repo, matrix=False)
    return proc.returncode, (json.loads(proc.stdout) if proc.stdout else None), proc.stderr


def test_a_deployment_is_judged_under_the_policy_strictness(tmp_path: Path) -> None:
    """require-native and require-kv-scales apply to a manifest's containers as to [[targets]] (they were ignored),
    and the same model asked both ways gets the same pass/fail."""
    from support import builders as b

    nvfp4 = _deploy_repo(tmp_path / "nvfp4", b.nvfp4_modelopt_fixture(), ["--max-model-len", "2048"])
    as_target = 'models = ["models/m"]\n[[targets]]\nengine = "vllm"\ngpu = "h100"\n'
    for strict, code in (("", 0), ("require-native = true\n", 1)):
        got, data, err = _gate(nvfp4, strict + DEPLOYMENT)
        assert got == code, err
        assert data is not None
        [v] = data["models"][0]["verdicts"]
        assert v["status"] == "fallback" and v["policy"]["require_native"] is bool(code)
        assert v["outcome"]["because"] == (["fallback"] if code else [])
        got, data, err = _gate(nvfp4, strict + as_target)
        assert got == code, err
    static = b.fp8_ct_static()
    for key in [k for k in static.tensors if "_scale" in k and ("k_" in k or "v_" in k)]:
        del static.tensors[key]
    kv = _deploy_repo(tmp_path / "kv", static, ["--max-model-len", "2048", "--kv-cache-dtype", "fp8"],
                      label="NVIDIA-GeForce-RTX-4090")
    assert _gate(kv, DEPLOYMENT)[0] == 0
    got, data, err = _gate(kv, "require-kv-scales = true\n" + DEPLOYMENT)
    assert got == 1, err
    assert data is not None and data["models"][0]["verdicts"][0]["outcome"]["because"] == ["kv-scales"]


def test_every_table_is_checked_and_a_key_no_door_applies_is_an_error(tmp_path: Path) -> None:
    from support import builders as b

    repo = _deploy_repo(tmp_path, b.bf16_llama(), ["--max-model-len", "2048"])
    (repo / "ref").mkdir()
    for extra, key in (('[quality]\nreference = "ref"\ntier = "good"\nfrobnicate = 1\n', "quality.frobnicate: unknown key"),
                       ('[quality]\nreference = "nowhere"\ntier = "good"\n', "quality.reference"),
                       ('[quality]\nreference = "ref"\ntier = "good"\n', "quality: a quality gate evaluates"),
                       ("[memory]\ncontext = 4096\n", "memory.context: cannot apply to the policy's deployments"),
                       ("[memory]\ngpu-memory-utilization = 0.8\n", "memory.gpu-memory-utilization"),
                       ('models = ["models/m"]\n[[targets]]\nengine = "vllm"\ngpu = "h100"\n[memory]\ncontext = 4096\n',
                        "memory.context")):
        got, _, err = _gate(repo, DEPLOYMENT + extra)
        assert got == 2 and key in err and err.count("\n") == 1, (extra, err)
    got, data, err = _gate(repo, DEPLOYMENT + "[memory]\nbatch = 4\n")  # the load applies to a deployment
    assert got == 0, err
    assert data is not None and data["models"][0]["verdicts"][0]["memory"]["batch"] == 4


@pytest.mark.parametrize(("engine", "knobs"), [("vllm==0.34.0", {}), ("vllm==0.11.0", {"kv_cache_memory": 8 << 30}),
                                               ("sglang", {}), ("tensorrt-llm", {}), ("transformers", {})])
def test_the_parts_add_up_to_the_total(engine: str, knobs: dict[str, Any], tmp_path: Path) -> None:
    """Every engine's listed parts on the device add up to the stated total (a fixed vLLM pool is counted as the
    pool; TensorRT-LLM's KV share of the free memory shows the headroom it leaves)."""
    from qcheck.doors import Asked, build_request
    from qcheck.pipeline import run
    from qcheck.request import Deploy, EngineKnobs

    model = write_run(QWEN32, tmp_path / "m")
    request = build_request(Asked((engine,), ("h100",), Deploy(8192, knobs=EngineKnobs(**knobs))), str(model))
    [v] = run(request).verdicts  # type: ignore[union-attr]
    m = v.memory
    assert m is not None
    device = [p for p in m.parts if p.name not in ("weights in host memory", "KV cache in host memory")]
    assert sum(p.bytes for p in device) == m.total_bytes, [(p.name, p.bytes) for p in m.parts]
