"""``qcheck check --gpu G -- ENGINE-COMMAND``: real command lines copied from each engine's documentation read into
the same request as qcheck's own flags, with the engine's spellings, aliases, negations, environment variables and
refusals (worded as the engine words them).

Sources of the command lines (each found verbatim in the engine's documentation or public use, then varied):
- vLLM docs, distributed serving: "vllm serve facebook/opt-13b --tensor-parallel-size 4"; vLLM docs, XPU
  installation: "vllm serve facebook/opt-13b --dtype=bfloat16 --max_model_len=1024
  --distributed-executor-backend=mp --pipeline-parallel-size=2 -tp=8"
- SGLang docs/basic_usage/send_request.ipynb: "python3 -m sglang.launch_server --model-path
  qwen/qwen2.5-0.5b-instruct --host 0.0.0.0"
- llama.cpp tools/server/README.md: "./llama-server -m models/7B/ggml-model.gguf -c 2048"
- Ollama docs/faq.md: "OLLAMA_CONTEXT_LENGTH=8192 ollama serve"; docs/modelfile.md "PARAMETER num_ctx 4096"
- TensorRT-LLM docs, quick start: trtllm-serve "TinyLlama/TinyLlama-1.1B-Chat-v1.0"
- mlx-lm, public use: "mlx_lm.server --host 0.0.0.0 --port 8080 --use-default-chat-template --model
  mlx-community/Mistral-7B-Instruct-v0.3-4bit"
- LM Studio lms, public use: "lms load <model_id> --context-length 8192 --gpu max -y"
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qcheck.deploy.cmdline import parse_command
from qcheck.doors import Asked, build_request
from qcheck.errors import UsageError
from qcheck.request import Deploy, EngineKnobs, KVCacheTypes, Parallel
from support.contract import validate

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def request(cmd: str, target: str | None = None):
    return build_request(Asked(gpus=("h100",)), target, command=[cmd])


# ------------------------------------------------------------------------------------------ reading
@pytest.mark.parametrize(("cmd", "target", "deploy"), [
    ("vllm serve facebook/opt-13b --tensor-parallel-size 4", "facebook/opt-13b",
     Deploy(parallel=Parallel(tp=4))),
    ("vllm serve facebook/opt-13b --dtype=bfloat16 --max_model_len=1024 --distributed-executor-backend=mp "
     "--pipeline-parallel-size=2 -tp=8", "facebook/opt-13b",
     Deploy(context=1024, parallel=Parallel(tp=8, pp=2), knobs=EngineKnobs(dtype="bfloat16"))),
    # the same with vLLM's spellings: -tp alias, --flag=value, underscores, --model moved to the front,
    # an abbreviation argparse accepts, human-readable numbers
    ("vllm serve --model facebook/opt-13b -tp=4 --max_model_len 32k --kv-cache-dtype fp8 --gpu-memory-util 0.85",
     "facebook/opt-13b", Deploy(context=32000, kv_cache=KVCacheTypes("fp8", "fp8"), parallel=Parallel(tp=4),
                                knobs=EngineKnobs(gpu_memory_utilization=0.85))),
    ("python -m vllm.entrypoints.openai.api_server --model Qwen/Qwen2.5-1.5B-Instruct --max-model-len 8K "
     "--enable-expert-parallel -tp 2 --data-parallel-size 2 --max-num-seqs 64 --enforce-eager",
     "Qwen/Qwen2.5-1.5B-Instruct",
     Deploy(context=8192, parallel=Parallel(tp=2, ep=4), knobs=EngineKnobs(max_num_seqs=64, enforce_eager=True))),
    ("vllm serve org/m --revision v2 --enforce-eager --no-enforce-eager", "org/m@v2",
     Deploy(knobs=EngineKnobs(enforce_eager=False))),
    ("python3 -m sglang.launch_server --model-path qwen/qwen2.5-0.5b-instruct --host 0.0.0.0 --tp 2 "
     "--context-length 4096 --mem-fraction-static 0.8 --kv-cache-dtype fp8_e4m3", "qwen/qwen2.5-0.5b-instruct",
     Deploy(context=4096, kv_cache=KVCacheTypes("fp8_e4m3", "fp8_e4m3"), parallel=Parallel(tp=2),
            knobs=EngineKnobs(mem_fraction_static=0.8))),
    ("sglang serve Qwen/Qwen3-8B --tensor-parallel-size 2 --pp-size 2", "Qwen/Qwen3-8B",
     Deploy(parallel=Parallel(tp=2, pp=2))),
    ("llama-server -m models/7B/ggml-model.gguf -c 2048", "models/7B/ggml-model.gguf", Deploy(context=2048)),
    ("llama-server -hf ggml-org/gemma-3-1b-it-GGUF:Q8_0 --ctx-size 8192 -ngl 99 -fa on -ctk q8_0 -ctv q4_0 "
     "-np 4 -ub 512 --n_cpu_moe 3", "ggml-org/gemma-3-1b-it-GGUF:Q8_0",
     Deploy(context=8192, kv_cache=KVCacheTypes("q8_0", "q4_0"),
            knobs=EngineKnobs(n_gpu_layers=99, flash_attn=True, n_parallel=4, n_ubatch=512, n_cpu_moe=3))),
    ("LLAMA_ARG_CTX_SIZE=4096 LLAMA_ARG_N_GPU_LAYERS=all llama-server --hf-repo ggml-org/m-GGUF --hf-file m-Q4_0.gguf",
     "ggml-org/m-GGUF:m-Q4_0.gguf", Deploy(context=4096, knobs=EngineKnobs(n_gpu_layers=1 << 16))),
    # the command line overrides the environment (llama.cpp: "will be overwritten by command line argument")
    ("LLAMA_ARG_CTX_SIZE=4096 llama-server -m m.gguf -c 1024", "m.gguf", Deploy(context=1024)),
    ("OLLAMA_CONTEXT_LENGTH=8192 OLLAMA_KV_CACHE_TYPE=q8_0 ollama run hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M",
     "bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M", Deploy(context=8192, kv_cache=KVCacheTypes("q8_0", "q8_0"))),
    ("trtllm-serve TinyLlama/TinyLlama-1.1B-Chat-v1.0 --tp_size 2 --max_seq_len 4096", "TinyLlama/TinyLlama-1.1B-Chat-v1.0",
     Deploy(context=4096, parallel=Parallel(tp=2))),
    ("mlx_lm.server --host 0.0.0.0 --port 8080 --use-default-chat-template --model "
     "mlx-community/Mistral-7B-Instruct-v0.3-4bit", "mlx-community/Mistral-7B-Instruct-v0.3-4bit", Deploy()),
    ("python -m mlx_lm.server --model mlx-community/Mistral-7B-Instruct-v0.3-4bit --kv-bits 8",
     "mlx-community/Mistral-7B-Instruct-v0.3-4bit", Deploy(kv_cache=KVCacheTypes("q8", "q8"))),
    ("lms load qwen/qwen3-4b --context-length 8192 --gpu max -y", "qwen/qwen3-4b", Deploy(context=8192)),
    ("lms load qwen/qwen3-4b -c8192", "qwen/qwen3-4b", Deploy(context=8192)),
])
def test_command_reads_as_the_flags(cmd: str, target: str, deploy: Deploy) -> None:
    req = request(cmd)
    assert req.target == target
    assert req.deploy == deploy
    assert req.deploy.findings == ()


def test_not_judged_flags_are_listed_and_secrets_masked() -> None:
    cmd = parse_command(["vllm", "serve", "org/m", "--port", "8000", "--api-key", "sk-live-0123456789abcdef",
                         "--enable-prefix-caching", "--max-model-len", "4096"])
    not_judged = [(s.flag, s.value) for s in cmd.origin.not_judged]
    assert not_judged == [("--port", "8000"), ("--api-key", "***"), ("--enable-prefix-caching", None)]
    assert "sk-live" not in json.dumps(cmd.origin.to_json())
    assert "sk-live" not in cmd.origin.command
    judged = [(s.flag, s.judged_as) for s in cmd.origin.settings if s.judged_as]
    assert ("--max-model-len", "context") in judged


@pytest.mark.parametrize(("cmd", "flag", "message"), [
    ("vllm serve org/m --no-such-flag", "--no-such-flag", "unrecognized arguments: --no-such-flag"),
    ("vllm serve org/m -tp two", "-tp", "argument -tp: invalid int value: 'two'"),
    ("vllm serve org/m --max-model-len 1.5K", "--max-model-len", "invalid human_readable_int_or_auto value"),
    ("vllm serve org/m --max-num", "--max-num", "ambiguous option: --max-num could match"),
    ("vllm serve org/m -q fp9", "--quantization", "Unknown quantization method: fp9"),
    ("python -m sglang.launch_server --model-path org/m --kv-cache-dtype q4_0", "--kv-cache-dtype",
     "invalid choice: 'q4_0'"),
    ("llama-server -m m.gguf --ctx-size=4096", "--ctx-size=4096", "error: invalid argument: --ctx-size=4096"),
    ("llama-server -m m.gguf -ctk q3_K", "-ctk", "Unsupported cache type: q3_K"),
    ("llama-server -m m.gguf -c", "-c", "expected value for argument"),
    ("llama-server -m m.gguf -fa maybe", "-fa", "error: unknown value for --flash-attn: 'maybe'"),
    ("llama-server -m m.gguf -p hello", "-p", "error: invalid argument: -p"),  # -p is llama-cli's, not the server's
    ("trtllm-serve org/m --max-seq-len 4096", "--max-seq-len", "No such option: --max-seq-len"),
    ("trtllm-serve org/m --backend onnx", "--backend", "'onnx' is not one of"),
    ("ollama run llama3.2 --ctx 4096", "--ctx", "unknown flag: --ctx"),
    ("lms load m --context-length 0", "--context-length", "Must be an integer of at least 1"),
])
def test_refusals_are_worded_as_the_engine(cmd: str, flag: str, message: str) -> None:
    findings = request(cmd, target="x").deploy.findings
    assert findings, cmd
    assert findings[0].flag.startswith(flag)
    assert message in findings[0].message
    assert findings[0].status == "unsupported"


def test_modelfile_parameters(tmp_path: Path) -> None:
    modelfile = tmp_path / "Modelfile"
    modelfile.write_text("# docs/modelfile.md\nFROM ./tiny.gguf\nPARAMETER temperature 1\nPARAMETER num_ctx 4096\n"
                         "PARAMETER num_gpu 20\nSYSTEM \"\"\"You are\nMario.\"\"\"\n", encoding="utf-8")
    req = request(f"ollama create mario -f {modelfile}")
    assert req.target == str(tmp_path / "tiny.gguf")
    assert req.deploy.context == 4096 and req.deploy.knobs.n_gpu_layers == 20
    assert [(s.flag, s.where) for s in req.origin.not_judged] == [
        ("PARAMETER temperature", f"{modelfile}:3"), ("SYSTEM", f"{modelfile}:6")]
    modelfile.write_text("FROM ./tiny.gguf\nPARAMETER num_context 4096\nPARAMETER num_ctx big\n", encoding="utf-8")
    messages = [f.message for f in request(f"ollama create mario -f {modelfile}").deploy.findings]
    assert messages == ["unknown parameter 'num_context'", "invalid int value big"]


@pytest.mark.parametrize("cmd", ["docker run vllm/vllm-openai", "python -m http.server", ""])
def test_unknown_programs_are_usage_errors(cmd: str) -> None:
    with pytest.raises(UsageError):
        request(cmd or "")


def test_ollama_serve_environment_with_a_path() -> None:
    req = request("OLLAMA_CONTEXT_LENGTH=8192 OLLAMA_NUM_PARALLEL=4 OLLAMA_FLASH_ATTENTION=1 ollama serve",
                  target="models/tiny.gguf")
    assert req.target == "models/tiny.gguf"
    assert req.deploy == Deploy(context=8192, knobs=EngineKnobs(n_parallel=4, flash_attn=True))
    # Ollama keeps its default for a value it cannot parse (envconfig.Uint): listed, not judged, not refused
    req = request("OLLAMA_CONTEXT_LENGTH=lots ollama serve", target="x.gguf")
    assert req.deploy.context is None and req.deploy.findings == ()
    assert [(s.flag, s.judged_as) for s in req.origin.settings] == [("OLLAMA_CONTEXT_LENGTH", None)]


def test_library_name_needs_a_path() -> None:
    with pytest.raises(UsageError, match="give the model file"):
        request("ollama run llama3.2")
    assert request("ollama run llama3.2", target="x.gguf").target == "x.gguf"


def test_qcheck_flags_beside_a_command_are_refused() -> None:
    with pytest.raises(UsageError, match="in the engine command"):
        build_request(Asked(gpus=("h100",), deploy=Deploy(context=5)), command=["vllm serve org/m"])
    with pytest.raises(UsageError, match="runs vllm"):
        build_request(Asked(engines=("sglang",), gpus=("h100",)), command=["vllm serve org/m"])


# ------------------------------------------------------------------------------------------ whole CLI
def qcheck(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QCHECK_")}
    return subprocess.run([sys.executable, "-m", "qcheck", *args], capture_output=True, text=True, env=env,
                          timeout=180)


def verdict_view(out: str) -> list[dict]:
    data = json.loads(out)
    return [{k: v.get(k) for k in ("engine", "engine_version", "gpu", "status", "reasons", "memory")}
            for v in data["verdicts"]]


@pytest.mark.parametrize(("command", "flags"), [
    (["vllm", "serve", str(EXAMPLES / "tiny-llama-bf16"), "--max-model-len", "1024", "-tp", "2",
      "--kv-cache-dtype", "fp8"],
     [str(EXAMPLES / "tiny-llama-bf16"), "--engine", "vllm", "--context", "1024", "--tp", "2",
      "--kv-cache-dtype", "fp8"]),
    (["llama-server", "-m", str(EXAMPLES / "tiny-llama-Q4_0.gguf"), "-c", "2048", "-ctk", "q8_0", "-ctv", "q8_0"],
     [str(EXAMPLES / "tiny-llama-Q4_0.gguf"), "--engine", "llama.cpp", "--context", "2048", "-ctk", "q8_0",
      "-ctv", "q8_0"]),
    (["python", "-m", "sglang.launch_server", "--model-path", str(EXAMPLES / "tiny-llama-awq"), "--tp-size", "2",
      "--context-length", "512"],
     [str(EXAMPLES / "tiny-llama-awq"), "--engine", "sglang", "--tp", "2", "--context", "512"]),
])
@pytest.mark.parametrize("gpu", ["h100", "rtx-4090"])
def test_same_verdicts_and_memory_as_the_flags(command: list[str], flags: list[str], gpu: str) -> None:
    by_command = qcheck("check", "--gpu", gpu, "--json", "--", *command)
    by_flags = qcheck("check", *flags, "--gpu", gpu, "--json")
    assert by_command.returncode == by_flags.returncode, by_command.stderr
    assert verdict_view(by_command.stdout) == verdict_view(by_flags.stdout)
    assert verdict_view(by_command.stdout)[0]["memory"] is not None
    validate(json.loads(by_command.stdout), "check")
    deployment = json.loads(by_command.stdout)["deployment"]
    assert deployment["kind"] == "command" and deployment["not_judged"] == []
    assert "deployment" not in json.loads(by_flags.stdout)


def test_refused_flag_fails_the_verdict_in_text_and_json() -> None:
    model = str(EXAMPLES / "tiny-llama-bf16")
    # at the release the flags were read at, an unknown flag is the engine's refusal
    res = qcheck("check", "--gpu", "h100", "--engine", "vllm==0.34.0", "--", "vllm", "serve", model, "--port", "8000",
                 "--frobnicate")
    assert res.returncode == 1, res.stderr
    assert "command-line: vLLM refuses --frobnicate: unrecognized arguments: --frobnicate" in res.stdout
    assert "not judged: --port 8000" in res.stdout
    data = json.loads(qcheck("check", "--gpu", "h100", "--engine", "vllm==0.34.0", "--json", "--", "vllm", "serve",
                             model, "--frobnicate").stdout)
    assert data["verdicts"][0]["status"] == "unsupported"
    assert any(d["dimension"] == "command-line" for d in data["verdicts"][0]["dimensions"])
    # at another release the flag may exist: unknown, never a pass
    data = json.loads(qcheck("check", "--gpu", "h100", "--engine", "vllm==0.23.0", "--json", "--", "vllm", "serve",
                             model, "--frobnicate").stdout)
    assert data["verdicts"][0]["status"] == "unknown" and data["exit_code"] == 1


def test_quantization_override_is_unknown_not_a_pass() -> None:
    res = qcheck("check", "--gpu", "h100", "--json", "--", "vllm", "serve", str(EXAMPLES / "tiny-llama-bf16"),
                 "--quantization", "fp8")
    data = json.loads(res.stdout)
    assert res.returncode == 1
    assert data["verdicts"][0]["status"] == "unknown"
    assert "qcheck does not judge the override" in " ".join(data["verdicts"][0]["reasons"])


def test_usage_errors_exit_2() -> None:
    res = qcheck("check", "--gpu", "h100", "--", "ollama", "run", "llama3.2")
    assert res.returncode == 2 and "give the model file" in res.stderr
    res = qcheck("check", "--gpu", "h100", "--context", "10", "--", "vllm", "serve", "org/m")
    assert res.returncode == 2 and "in the engine command" in res.stderr


@pytest.mark.parametrize("cmd", [
    # TensorRT-LLM docs (trtllm-serve, "extra_llm_api_options"): the KV cache dtype and more live in that YAML
    'trtllm-serve "TinyLlama/TinyLlama-1.1B-Chat-v1.0" --extra_llm_api_options extra_llm_config.yaml',
    "vllm serve org/m --config serve.yaml",
    "python -m sglang.launch_server --model-path org/m --config sglang.yaml",
])
def test_a_settings_file_is_unknown_not_assumed_default(cmd: str) -> None:
    findings = request(cmd).deploy.findings
    assert [f.status for f in findings] == ["unknown"]
    assert "qcheck does not read the settings in" in findings[0].message
