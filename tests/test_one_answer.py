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
                    m.get("gpus_needed"), json.dumps(m.get("speed"), sort_keys=True)))
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
            assert _same_question(request.replace(all_models=False), single_q)
            assert _answer(result) == _answer(single)


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
