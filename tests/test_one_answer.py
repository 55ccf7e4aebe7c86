"""One question, one answer: every front end builds the same ``CheckRequest`` and gets the same verdicts, memory
total, KV bytes, fit, max context and offload from the one pipeline.

The front ends run for real (the click commands in process: ``check``, ``gate`` with ``[memory]``, ``hook``, the
which-quant-fits table, and the Python API); ``qcheck.pipeline.judge`` is wrapped to record each question and its
answer, so the test sees exactly what each front end asked. Models vary along the axes memory depends on: MLA, a
sliding window alternating with full layers (gpt-oss), plain GQA, MoE, a hybrid with linear-attention layers,
GGUF files of several architectures, a saved ``qcheck inspect --json`` record, and a Hub repo on a local fake Hub.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from memory_gguf import Arch, write_model

from qcheck import pipeline
from qcheck.cli import cli
from qcheck.request import CheckRequest
from support import builders as b
from support.hubserver import VirtualFile

CONTEXT = 32768
#: (engine, GPU) pairs each model is judged on: a server family, a llama.cpp family, tensor parallel counts
COMBOS = [("vllm", "h100"), ("llama.cpp", "rtx-4090"), ("sglang", "a100")]

DEEPSEEK_MLA = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_hidden_layers": 4,
                "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 16, "kv_lora_rank": 512,
                "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 4096,
                "max_position_embeddings": 163840, "torch_dtype": "bfloat16", "n_routed_experts": 8,
                "num_experts_per_tok": 2, "moe_intermediate_size": 256, "intermediate_size": 2048}
#: GGUF files of several architectures (written by gguf-py, loadable by llama.cpp): dense GQA in two quant types,
#: a 262k-entry-style wide vocabulary, MoE, and Gemma 3's 5-of-6 sliding-window layers
GGUF_ARCHS: dict[str, tuple[Arch, str]] = {
    "llama": (Arch("llama", n_embd=256, n_layer=4, n_head=8, n_head_kv=2, n_ff=512, n_vocab=32000), "Q4_0"),
    "llama-q8": (Arch("llama", n_embd=256, n_layer=4, n_head=8, n_head_kv=2, n_ff=512, n_vocab=32000), "Q8_0"),
    "qwen3moe": (Arch("qwen3moe", n_embd=128, n_layer=2, n_head=4, n_head_kv=2, n_ff=256, n_vocab=2000,
                      n_expert=8, n_expert_used=2), "F16"),
    "gemma3-swa": (Arch("gemma3", n_embd=128, n_layer=6, n_head=4, n_head_kv=1, n_ff=256, n_vocab=2000,
                        head_dim=64, swa=512, n_ctx_train=131072), "F16"),
}
HYBRID = {"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"],
          "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 2}


class Recorder:
    """Wraps ``pipeline.judge``: every (request, result) a front end gets, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[tuple[CheckRequest, Any]] = []
        real = pipeline.judge

        def judge(inspection, request, matrix=None, planned=None):  # type: ignore[no-untyped-def]
            result = real(inspection, request, matrix, planned)
            self.seen.append((request, result))
            return result

        monkeypatch.setattr(pipeline, "judge", judge)

    def take(self) -> list[tuple[CheckRequest, Any]]:
        out, self.seen = self.seen, []
        return out


def _fixture_dir(fx: b.Fixture, path: Path) -> Path:
    return fx.write(path)


def _with_config(fx: b.Fixture, **changes: Any) -> b.Fixture:
    fx.configs["config.json"] = {**fx.configs["config.json"], **changes}
    return fx


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("one-answer")
    shape = b.Shape(hidden=256, intermediate=512, layers=8, vocab=4096, heads=8, kv_heads=2)
    out = {
        "gqa-bf16": _fixture_dir(_with_config(b.bf16_llama(shape), max_position_embeddings=131072), d / "gqa"),
        "mla-fp8-block": _fixture_dir(_with_config(b.fp8_block_deepseek(shape), **DEEPSEEK_MLA), d / "mla"),
        "swa-moe-mxfp4": _fixture_dir(_with_config(
            b.gpt_oss_fixture(layers=4), sliding_window=128,
            layer_types=["sliding_attention", "full_attention"] * 2), d / "gpt-oss"),
        "hybrid-linear": _fixture_dir(_with_config(b.bf16_llama(shape), **HYBRID), d / "hybrid"),
    }
    for label, (arch, wtype) in GGUF_ARCHS.items():
        out[f"gguf-{label}"] = write_model(d / f"{label}.gguf", arch, wtype)
    return out


def _cli(*args: str) -> tuple[int, str]:
    """A command run in process (as ``qcheck ARGS`` would, but the exit code is the command's return value)."""
    result = CliRunner().invoke(cli, list(args), standalone_mode=False, catch_exceptions=False)
    return result.return_value, result.stdout


def _answer(result: Any) -> list[tuple[Any, ...]]:
    """What must agree: per verdict, the status and the memory figures (JSON, as users read them)."""
    out = []
    for v in result.verdicts:
        m = v.memory.to_json() if v.memory is not None else {}
        out.append((v.engine, v.gpu, v.status, m.get("total_bytes"), m.get("kv_cache_bytes"), m.get("fits"),
                    m.get("max_context"), m.get("max_batch"), json.dumps(m.get("offload"), sort_keys=True),
                    m.get("gpus_needed"), json.dumps(m.get("speed"), sort_keys=True),
                    json.dumps([o.to_json() for o in v.options], sort_keys=True)))
    return out


def _same_question(a: CheckRequest, b_: CheckRequest) -> bool:
    """Equal requests, but for the target's spelling (an absolute path, a relative one, a saved record)."""
    return a.replace(target="m", notes=()) == b_.replace(target="m", notes=())


def _policy(tmp: Path, model: Path, engine: str, gpu: str) -> Path:
    policy = tmp / "qcheck.toml"
    policy.write_text(f'models = [{{ path = "{model}" }}]\n'
                      f'[[targets]]\nengine = ["{engine}"]\ngpu = ["{gpu}"]\n'
                      f"[memory]\ncontext = {CONTEXT}\nbatch = 1\n")
    return policy


def _front_ends(model: Path, engine: str, gpu: str, tmp: Path, rec: Recorder) -> dict[str, tuple[CheckRequest, Any]]:
    """The same question through every front end; each front end's one (request, result)."""
    got: dict[str, tuple[CheckRequest, Any]] = {}
    code, out = _cli("check", str(model), "-e", engine, "-g", gpu, "--context", str(CONTEXT), "--json")
    assert code in (0, 1), out
    [got["check"]] = rec.take()
    assert json.loads(out)["verdicts"][0]["status"] == got["check"][1].verdicts[0].status
    code, out = _cli("gate", "--policy", str(_policy(tmp, model, engine, gpu)), "--allow-outside", "--json")
    assert code in (0, 1), out
    [got["gate"]] = rec.take()
    gate_verdict = json.loads(out)["models"][0]["verdicts"][0]
    assert gate_verdict["memory"] == got["gate"][1].verdicts[0].memory.to_json()
    code, out = _cli("hook", str(model), "-e", engine, "-g", gpu, "--context", str(CONTEXT))
    [got["hook"]] = rec.take()
    hook_result = got["hook"][1]
    fails = any(hook_result.fails(v) or (v.memory and v.memory.fits is False) for v in hook_result.verdicts)
    assert (code == 1) == fails and ("fails" in out) == fails, out
    from qcheck.request import Deploy

    api = CheckRequest(str(model), (engine,), (gpu,), Deploy(context=CONTEXT, batch=1), memory=True)
    pipeline.run(api)
    [got["api"]] = rec.take()
    return got


@pytest.mark.parametrize("engine,gpu", COMBOS)
def test_every_front_end_asks_and_answers_alike(models: dict[str, Path], engine: str, gpu: str,
                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(monkeypatch)
    monkeypatch.chdir(tmp_path)
    for name, model in models.items():
        got = _front_ends(model, engine, gpu, tmp_path, rec)
        question, answer = got["api"]
        for front, (request, result) in got.items():
            assert _same_question(request, question), (name, front, request, question)
            assert _answer(result) == _answer(answer), (name, front)
        assert answer.verdicts[0].memory is not None, name


def test_a_saved_inspection_answers_as_the_file(models: dict[str, Path], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(monkeypatch)
    for name in ("mla-fp8-block", "swa-moe-mxfp4", "gguf-gemma3-swa", "gguf-qwen3moe"):
        code, out = _cli("inspect", str(models[name]), "--json")
        assert code == 0, out
        saved = tmp_path / f"{name}.json"
        saved.write_text(out)
        for engine, gpu in COMBOS:
            for target in (models[name], saved):
                _cli("check", str(target), "-e", engine, "-g", gpu, "--context", str(CONTEXT), "--json")
            (q1, from_file), (q2, from_record) = rec.take()
            assert _same_question(q1, q2)
            assert _answer(from_file) == _answer(from_record), (name, engine, gpu)


def test_the_which_quant_fits_table_rows_are_the_single_answers(models: dict[str, Path], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory of GGUF quants and a directory of safetensors variants: each table row is what `check` of that
    one model says."""
    rec = Recorder(monkeypatch)
    quants = tmp_path / "quants"
    quants.mkdir()
    for name in ("gguf-llama", "gguf-llama-q8"):
        shutil.copy(models[name], quants / models[name].name)
    variants = tmp_path / "variants"
    for name in ("gqa-bf16", "hybrid-linear"):
        shutil.copytree(models[name], variants / name)
    for folder in (quants, variants):
        code, out = _cli("check", str(folder), "-e", "llama.cpp", "-e", "vllm", "-g", "rtx-4090", "--context",
                         str(CONTEXT), "--json")
        assert code in (0, 1), out
        table = json.loads(out)
        assert len(table["quants"]) == 4, table["quants"]
        rows = rec.take()
        assert len(rows) == 2
        for request, result in rows:
            _cli("check", result.inspection.path, "-e", "llama.cpp", "-e", "vllm", "-g", "rtx-4090", "--context",
                 str(CONTEXT), "--json")
            [(single_q, single)] = rec.take()
            # a row is the single question without the options block (a table row has no room for it)
            assert request.options is False
            assert _same_question(request.replace(all_models=False, options=True), single_q)
            assert [a[:-1] for a in _answer(result)] == [a[:-1] for a in _answer(single)]


def test_a_hub_model_answers_as_the_local_copy(models: dict[str, Path], hub: Any, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(monkeypatch)
    local = models["swa-moe-mxfp4"]
    files: dict[str, bytes | VirtualFile] = {}
    for f in sorted(local.iterdir()):
        data = f.read_bytes()
        files[f.name] = VirtualFile(data, len(data)) if f.suffix == ".safetensors" else data
    hub.add_repo("org/oss-style", files)
    for engine, gpu in COMBOS:
        for target in (str(local), "org/oss-style"):
            code, out = _cli("check", target, "-e", engine, "-g", gpu, "--context", str(CONTEXT), "--json")
            assert code in (0, 1), out
        (q1, local_answer), (q2, hub_answer) = rec.take()
        assert _same_question(q1, q2)
        assert _answer(local_answer) == _answer(hub_answer), (engine, gpu)
        assert hub_answer.inspection.shape == local_answer.inspection.shape


#: engine settings as each front end spells them: check/hook flags, the gate policy's [memory] keys, the API's knobs
KNOB_FLAGS = ["--gpu-memory-utilization", "0.85", "--max-num-seqs", "128", "--max-num-batched-tokens", "4K",
              "--mem-fraction-static", "0.8", "-np", "2", "-ub", "256", "-fa", "off", "-ngl", "3", "--fit", "off"]
KNOB_POLICY = ('gpu-memory-utilization = 0.85\nmax-num-seqs = 128\nmax-num-batched-tokens = "4K"\n'
               'mem-fraction-static = 0.8\nparallel = 2\nubatch-size = 256\nflash-attn = "off"\nn-gpu-layers = 3\n'
               'fit = "off"\n')


@pytest.mark.parametrize("engine,gpu", COMBOS)
def test_engine_settings_reach_the_pipeline_alike_from_every_front_end(models: dict[str, Path], engine: str,
                                                                        gpu: str, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The knobs users set (vLLM, SGLang and llama.cpp names) build the same EngineKnobs from check, hook, the gate
    policy and the API, and change the answer the same way."""
    from qcheck.request import Deploy, EngineKnobs

    rec = Recorder(monkeypatch)
    monkeypatch.chdir(tmp_path)
    knobs = EngineKnobs(gpu_memory_utilization=0.85, max_num_seqs=128, max_num_batched_tokens=4096,
                        mem_fraction_static=0.8, n_parallel=2, n_ubatch=256, flash_attn=False, n_gpu_layers=3,
                        fit=False)
    for name in ("gqa-bf16", "gguf-llama"):
        model = models[name]
        _cli("check", str(model), "-e", engine, "-g", gpu, "--context", str(CONTEXT), "--json", *KNOB_FLAGS)
        _cli("hook", str(model), "-e", engine, "-g", gpu, "--context", str(CONTEXT), *KNOB_FLAGS)
        policy = tmp_path / "qcheck.toml"
        policy.write_text(f'models = [{{ path = "{model}" }}]\n[[targets]]\nengine = ["{engine}"]\ngpu = ["{gpu}"]\n'
                          f"[memory]\ncontext = {CONTEXT}\nbatch = 1\n{KNOB_POLICY}")
        _cli("gate", "--policy", str(policy), "--allow-outside", "--json")
        pipeline.run(CheckRequest(str(model), (engine,), (gpu,), Deploy(context=CONTEXT, batch=1, knobs=knobs),
                                  memory=True))
        (q_check, a_check), (q_hook, a_hook), (q_gate, a_gate), (q_api, a_api) = rec.take()
        for front, question, answer in (("check", q_check, a_check), ("hook", q_hook, a_hook),
                                        ("gate", q_gate, a_gate)):
            assert question.deploy.knobs == knobs, (name, front)
            assert _same_question(question, q_api), (name, front)
            assert _answer(answer) == _answer(a_api), (name, front)
        plain = pipeline.run(CheckRequest(str(model), (engine,), (gpu,), Deploy(context=CONTEXT, batch=1), memory=True))
        rec.take()
        assert _answer(plain) != _answer(a_api), (name, engine)  # the settings changed the estimate


# ------------------------------------------------------------------------------------------ every door
# The definition of "one answer" (issue 30): questions generated over models (GGUF and safetensors; dense, MoE, MLA,
# sliding window), engines and versions, GPUs, deployment settings and strictness, each asked through every door
# that can express it; every door must give the same status, start-up, memory figures, fit and pass/fail. In
# process (CliRunner), so the whole grid runs in seconds.

@dataclass(frozen=True)
class Question:
    model: str  # a key of the ``models`` fixture
    engine: str  # name==version (the manifests name the release by their image tag)
    gpu: str
    context: int | None = None
    kv: str | None = None
    tp: int | None = None
    batch: int = 1
    knobs: tuple[tuple[str, Any], ...] = ()  # (EngineKnobs field, value as the flag takes it)
    strict: tuple[str, ...] = ()  # policy keys: require-native, require-kv-scales, allow-unknown, kernels-only

    @property
    def engine_id(self) -> str:
        return self.engine.split("==")[0]

    @property
    def version(self) -> str | None:
        return self.engine.partition("==")[2] or None


QUESTIONS = [
    Question("gqa-bf16", "vllm==0.34.0", "h100", context=32768, knobs=(("gpu_memory_utilization", 0.85),)),
    Question("gqa-bf16", "vllm==0.11.0", "a100", context=131072, tp=2, knobs=(("max_num_seqs", 64),),
             strict=("require-native",)),
    Question("mla-fp8-block", "vllm==0.34.0", "h100", context=65536, kv="fp8", strict=("require-kv-scales",)),
    Question("mla-fp8-block", "sglang==0.5.23", "h100", context=16384, tp=2, strict=("allow-unknown",)),
    Question("swa-moe-mxfp4", "vllm==0.34.0", "h100", context=131072, batch=4, knobs=(("max_num_seqs", 16),)),
    Question("swa-moe-mxfp4", "sglang==0.5.23", "a100", context=8192, knobs=(("mem_fraction_static", 0.8),),
             strict=("require-native",)),
    Question("gqa-bf16", "vllm==0.34.0", "h100", context=262144),  # above the model's 131072: refused
    Question("gqa-bf16", "vllm==0.34.0", "a100", context=16384, knobs=(("kv_cache_memory", 1048576),)),  # KV pool
    Question("mla-fp8-block", "sglang==0.5.23", "h100", context=200000, tp=2),  # above the model's 163840
    Question("gqa-bf16", "vllm==0.34.0", "hopper", context=8192),  # no product: the start-up is unknown
    Question("gqa-bf16", "vllm==0.34.0", "hopper", context=8192, strict=("kernels-only",)),
    Question("gguf-llama", "llama.cpp==b11312", "rtx-4090", context=32768, kv="q8_0", knobs=(("n_gpu_layers", 2),)),
    Question("gguf-llama-q8", "llama.cpp==b8895", "h100", context=16384, knobs=(("n_gpu_layers", 0),),
             strict=("require-native",)),
    Question("gguf-qwen3moe", "llama.cpp==b11312", "rtx-4090", context=4096, knobs=(("n_cpu_moe", 1),)),
    Question("gguf-gemma3-swa", "llama.cpp==b11312", "h100", batch=2, kv="q4_0"),
    Question("gguf-gemma3-swa", "ollama", "rtx-4090", context=32768, knobs=(("n_gpu_layers", 3),)),
    Question("gguf-llama", "ollama", "h100", context=8192, strict=("kernels-only", "allow-unknown")),
]

#: GPU feature discovery's product labels (Kubernetes node selectors) of the GPUs asked about
K8S_LABELS = {"h100": "NVIDIA-H100-80GB-HBM3", "a100": "NVIDIA-A100-SXM4-40GB"}  # a100 is the 40 GB part
#: how each engine's own command line spells a setting (a value of None: a switch)
ENGINE_FLAGS: dict[str, dict[str, str]] = {
    "vllm": {"context": "--max-model-len", "kv": "--kv-cache-dtype", "tp": "--tensor-parallel-size",
             "gpu_memory_utilization": "--gpu-memory-utilization", "max_num_seqs": "--max-num-seqs",
             "kv_cache_memory": "--kv-cache-memory-bytes"},
    "sglang": {"context": "--context-length", "kv": "--kv-cache-dtype", "tp": "--tp",
               "mem_fraction_static": "--mem-fraction-static"},
    "llama.cpp": {"context": "-c", "kv": "-ctk {v} -ctv {v}", "n_gpu_layers": "-ngl", "n_cpu_moe": "--n-cpu-moe"},
}


def _flags(q: Question) -> list[str]:
    """The question as qcheck's own flags (check, hook)."""
    from qcheck.knobs import KNOBS

    out = ["-e", q.engine, "-g", q.gpu]
    out += ["--context", str(q.context)] if q.context else []
    out += ["--kv-cache-dtype", q.kv] if q.kv else []
    out += ["--tp", str(q.tp)] if q.tp else []
    out += ["--batch", str(q.batch)] if q.batch > 1 else []
    flag = {k.field: k.flags[0] for k in KNOBS}
    for name, value in q.knobs:
        out += [flag[name], str(value)]
    return out + [f"--{s}" for s in q.strict]


def _engine_words(q: Question, model: str) -> list[str]:
    """The question as the engine's own command line (its model first), or [] when it has none here."""
    table = ENGINE_FLAGS.get(q.engine_id)
    if table is None:
        return []
    words = {"vllm": ["vllm", "serve", model], "sglang": ["python", "-m", "sglang.launch_server", "--model-path",
                                                          model], "llama.cpp": ["llama-server", "-m", model]}
    out = list(words[q.engine_id])
    for name, value in (("context", q.context), ("kv", q.kv), ("tp", q.tp), *q.knobs):
        if value is not None:
            spelled = table[name]
            out += spelled.format(v=value).split() if "{v}" in spelled else [spelled, str(value)]
    return out


def _policy_strict(q: Question) -> str:
    return "".join(f"{s} = true\n" for s in q.strict)


def _target_policy(q: Question, model: Path) -> str:
    from qcheck.knobs import KNOBS

    key = {k.field: k.policy_key for k in KNOBS}
    memory = ([f"context = {q.context}"] if q.context else []) + [f"batch = {q.batch}"] + \
        ([f'kv-cache-dtype = "{q.kv}"'] if q.kv else []) + ([f"tp = {q.tp}"] if q.tp else []) + \
        [f"{key[n]} = {v}" for n, v in q.knobs]
    return (f'models = [{{ path = "{model}" }}]\n[[targets]]\nengine = "{q.engine}"\ngpu = "{q.gpu}"\n'
            f"{_policy_strict(q)}[memory]\n" + "\n".join(memory) + "\n")


def _manifest(q: Question, model: Path, tmp: Path) -> Path | None:
    """The question as a deployment manifest: Kubernetes for vLLM and SGLang, compose for llama.cpp, a Modelfile
    for Ollama; None when it cannot say it (a --tp without a command flag, an Ollama question without a GGUF)."""
    gpus = q.tp or 1
    if q.engine_id == "ollama":
        lines = [f"FROM {model}"] + ([f"PARAMETER num_ctx {q.context}"] if q.context else []) + \
            [f"PARAMETER num_gpu {v}" for n, v in q.knobs if n == "n_gpu_layers"]
        if q.kv or any(n != "n_gpu_layers" for n, _ in q.knobs):
            return None
        path = tmp / "Modelfile"
        path.write_text("\n".join(lines) + "\n")
        return path
    args = _engine_words(q, "/models/m")
    if q.engine_id == "llama.cpp":
        path = tmp / "compose.yaml"
        path.write_text(f"services:\n  llm:\n    image: ghcr.io/ggml-org/llama.cpp:server-cuda-{q.version}\n"
                        f"    command: {json.dumps(args[1:])}\n    deploy:\n      resources:\n        reservations:\n"
                        f"          devices:\n            - {{driver: nvidia, count: {gpus}, capabilities: [gpu]}}\n")
        return path
    image = {"vllm": f"vllm/vllm-openai:v{q.version}", "sglang": f"lmsysorg/sglang:v{q.version}-cu126"}[q.engine_id]
    key, words = ("args", args[2:]) if q.engine_id == "vllm" else ("command", args)
    label = K8S_LABELS.get(q.gpu)
    if label is None:  # an architecture has no node label: a compose file, whose GPU the policy names
        path = tmp / "compose.yaml"
        path.write_text(f"services:\n  llm:\n    image: {image}\n    command: {json.dumps(words)}\n    deploy:\n"
                        "      resources:\n        reservations:\n          devices:\n"
                        f"            - {{driver: nvidia, count: {gpus}, capabilities: [gpu]}}\n")
        return path
    path = tmp / "k8s.yaml"
    path.write_text("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: m}\nspec:\n  template:\n    spec:\n"
                    f"      nodeSelector: {{nvidia.com/gpu.product: {label}}}\n"
                    f"      containers:\n        - name: server\n          image: {image}\n"
                    f"          {key}: {json.dumps(words)}\n"
                    f"          resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}\n")
    return path


def _deployment_policy(q: Question, manifest: Path, model: Path) -> str:
    mapping = "" if manifest.name == "Modelfile" else f', models = {{ "/models/m" = "{model}" }}'
    return (f"{_policy_strict(q)}deployments = [{{ file = \"{manifest}\"{mapping}, gpu = \"{q.gpu}\" }}]\n"
            f"[memory]\nbatch = {q.batch}\n")


def _outcomes(result: Any) -> list[tuple[Any, ...]]:
    """What every door must agree on, per verdict: the memory answer, the status, the start-up, pass or fail."""
    out = []
    for (v, memory), o in zip(zip(result.verdicts, _answer(result), strict=True),
                              [result.outcome(v) for v in result.verdicts], strict=True):
        s = v.startup
        out.append((*memory, v.engine_version, s and (s.outcome, s.context, s.max_concurrency, s.judged), o.fails,
                    o.because))
    return out


def _ask_every_door(q: Question, model: Path, saved: Path, tmp: Path, rec: Recorder) -> dict[str, tuple[int, Any]]:
    """(exit code, result) of the question through each door that can say it."""
    got: dict[str, tuple[int, Any]] = {}

    def take(door: str, code: int) -> None:
        [(request, result)] = rec.take()
        got[door] = (code, (request, result))

    take("check", _cli("check", str(model), *_flags(q), "--json")[0])
    take("saved inspection", _cli("check", str(saved), *_flags(q), "--json")[0])
    take("hook", _cli("hook", str(model), *_flags(q))[0])
    policy = tmp / "targets.toml"
    policy.write_text(_target_policy(q, model))
    take("gate targets", _cli("gate", "--policy", str(policy), "--allow-outside", "--json")[0])
    from qcheck.doors import Asked, build_request
    from qcheck.outcome import StrictnessFlags
    from qcheck.request import Deploy, EngineKnobs, KVCacheTypes, Parallel

    strictness = StrictnessFlags(*(s in q.strict for s in ("require-native", "allow-unknown", "require-kv-scales",
                                                            "kernels-only")))
    deploy = Deploy(q.context, q.batch, KVCacheTypes.parse(q.kv), Parallel(tp=q.tp), EngineKnobs(**dict(q.knobs)))
    result = pipeline.run(build_request(Asked((q.engine,), (q.gpu,), deploy, True).judged_by(strictness), str(model)))
    take("python api", result.exit_code)
    words = _engine_words(q, str(model))
    if words:
        batch = ["--batch", str(q.batch)] if q.batch > 1 else []
        take("engine command", _cli("check", "-e", q.engine, "-g", q.gpu, *[f"--{s}" for s in q.strict], *batch,
                                    "--json", "--", *words)[0])
    manifest = _manifest(q, model, tmp)
    if manifest is not None:
        policy = tmp / "deployments.toml"
        policy.write_text(_deployment_policy(q, manifest, model))
        door = {"Modelfile": "gate Modelfile", "compose.yaml": "gate compose"}.get(manifest.name, "gate Kubernetes")
        take(door, _cli("gate", "--policy", str(policy), "--allow-outside", "--json")[0])
    return got


@pytest.mark.parametrize("q", QUESTIONS, ids=lambda q: f"{q.model}-{q.engine}-{q.gpu}-{'-'.join(q.strict) or 'default'}")
def test_every_door_gives_one_answer(q: Question, models: dict[str, Path], tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(monkeypatch)
    model = models[q.model]
    code, out = _cli("inspect", str(model), "--json")
    assert code == 0, out
    saved = tmp_path / "saved.json"
    saved.write_text(out)
    rec.take()
    got = _ask_every_door(q, model, saved, tmp_path, rec)
    assert {"check", "hook", "gate targets", "python api", "saved inspection"} <= set(got)
    if q.engine_id in ENGINE_FLAGS:
        assert {"engine command"} <= set(got) and any(d.startswith("gate ") and d != "gate targets" for d in got)
    reference = _outcomes(got["python api"][1][1])
    exit_code = got["python api"][0]
    for door, (code, (request, result)) in got.items():
        assert _outcomes(result) == reference, (door, q)
        assert code == exit_code, (door, q, code, exit_code)
        assert (request.require_native, request.allow_unknown, request.require_kv_scales, request.kernels_only) == \
            tuple(s in q.strict for s in ("require-native", "allow-unknown", "require-kv-scales", "kernels-only"))
    startup = [v.startup for v in got["python api"][1][1].verdicts]
    assert all(s is not None and s.judged is ("kernels-only" not in q.strict) for s in startup), q


def test_the_questions_cover_every_outcome(models: dict[str, Path]) -> None:
    """The grid asks questions whose answers differ in every way the doors could disagree on: each start-up outcome
    and each reason a verdict fails (a strictness flag that changes nothing would test nothing)."""
    from qcheck.doors import Asked, build_request
    from qcheck.outcome import StrictnessFlags
    from qcheck.request import Deploy, EngineKnobs, KVCacheTypes, Parallel

    outcomes: set[str] = set()
    because: set[str] = set()
    for q in QUESTIONS:
        strict = StrictnessFlags(*(s in q.strict for s in ("require-native", "allow-unknown", "require-kv-scales",
                                                            "kernels-only")))
        deploy = Deploy(q.context, q.batch, KVCacheTypes.parse(q.kv), Parallel(tp=q.tp), EngineKnobs(**dict(q.knobs)))
        result = pipeline.run(build_request(Asked((q.engine,), (q.gpu,), deploy, True).judged_by(strict),
                                            str(models[q.model])))
        for v in result.verdicts:
            outcomes.add(v.startup.outcome if v.startup else "none")
            because.update(result.outcome(v).because)
    assert {"starts", "offloaded", "does-not-start", "unknown"} <= outcomes
    assert {"does-not-start", "start-up-unknown", "fallback", "kv-scales"} <= because
