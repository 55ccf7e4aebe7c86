"""PEFT LoRA adapters: recognised from adapter_config.json + adapter_model.safetensors, cross-checked against
the lora_A/lora_B tensors, and judged by the providers' and engines' adapter rules (never by full-model rules).

Adapters are written here as PEFT writes them (real tensor names and config keys); one is made by peft itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
from safetensors.torch import save_file

from qcheck.errors import InputError
from qcheck.inspect import inspect_path
from qcheck.matrix.loader import load_matrix
from qcheck.matrix.resolve import EngineRequest, parse_engine_spec, resolve_one
from qcheck.matrix.schema import MatrixDataError, Target
from qcheck.model import Adapter
from support.contract import validate

PY = sys.executable
HIDDEN, KV, INTER, LAYERS = 64, 16, 128, 2
#: module -> (in, out) for the tiny Llama the adapters are for
SHAPES = {"self_attn.q_proj": (HIDDEN, HIDDEN), "self_attn.k_proj": (HIDDEN, KV), "self_attn.v_proj": (HIDDEN, KV),
          "self_attn.o_proj": (HIDDEN, HIDDEN), "mlp.gate_proj": (HIDDEN, INTER), "mlp.up_proj": (HIDDEN, INTER),
          "mlp.down_proj": (INTER, HIDDEN)}
BASE = "meta-llama/Llama-3.1-8B-Instruct"

ADAPTER_SCHEMA = {
    "type": "object",
    "required": ["type", "rank", "max_rank", "alpha", "target_modules", "base_model", "modules_to_save", "use_dora",
                 "rank_pattern"],
    "properties": {
        "type": {"type": "string"}, "rank": {"type": ["integer", "null"], "minimum": 1},
        "max_rank": {"type": ["integer", "null"], "minimum": 1}, "alpha": {"type": ["number", "null"]},
        "target_modules": {"type": "array", "items": {"type": "string"}},
        "base_model": {"type": ["string", "null"]},
        "modules_to_save": {"type": "array", "items": {"type": "string"}},
        "use_dora": {"type": "boolean"}, "rank_pattern": {"type": "boolean"},
    },
}


def peft_config(r: int, targets: Any = ("q_proj", "v_proj"), **extra: Any) -> dict[str, Any]:
    """adapter_config.json with the keys PEFT 0.1x writes for a LoraConfig."""
    cfg = {
        "alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": BASE, "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "layer_replication": None,
        "layers_pattern": None, "layers_to_transform": None, "loftq_config": {}, "lora_alpha": 2 * r,
        "lora_dropout": 0.05, "megatron_config": None, "megatron_core": "megatron.core", "modules_to_save": None,
        "peft_type": "LORA", "r": r, "rank_pattern": {}, "revision": None,
        "target_modules": list(targets) if not isinstance(targets, str) else targets, "task_type": "CAUSAL_LM",
        "use_dora": False, "use_rslora": False,
    }
    cfg.update(extra)
    return cfg


def write_adapter(directory: Path, r: int, targets: tuple[str, ...] = ("q_proj", "v_proj"), *,
                  tensor_rank: int | None = None, config: dict[str, Any] | None = None, dora: bool = False,
                  ranks: dict[str, int] | None = None) -> Path:
    """A PEFT adapter directory: adapter_model.safetensors (PEFT's saved names) + adapter_config.json."""
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for layer in range(LAYERS):
        for module, (fan_in, fan_out) in SHAPES.items():
            short = module.rsplit(".", 1)[-1]
            if short not in targets:
                continue
            rank = (ranks or {}).get(short, tensor_rank or r)
            prefix = f"base_model.model.model.layers.{layer}.{module}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, fan_in, dtype=torch.bfloat16)
            tensors[f"{prefix}.lora_B.weight"] = torch.zeros(fan_out, rank, dtype=torch.bfloat16)
            if dora:
                tensors[f"{prefix}.lora_magnitude_vector"] = torch.ones(fan_out, dtype=torch.bfloat16)
    save_file(tensors, str(directory / "adapter_model.safetensors"), metadata={"format": "pt"})
    (directory / "adapter_config.json").write_text(json.dumps(config or peft_config(r, targets), indent=2))
    return directory


def run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("QCHECK_DEBUG", "QCHECK_MATRICES")}
    return subprocess.run([PY, "-m", "qcheck", *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture(scope="module")
def matrix():
    return load_matrix()


def provider(matrix, name: str, inspection) -> Any:
    return resolve_one(matrix, inspection, parse_engine_spec(name, matrix), None)


# ----------------------------------------------------------------------------------------- inspect

def test_inspect_reads_the_adapter_and_recomputes_it_from_tensors(tmp_path: Path) -> None:
    path = write_adapter(tmp_path / "a", 16, ("q_proj", "k_proj", "v_proj", "o_proj"))
    insp = inspect_path(str(path))
    assert insp.adapter == Adapter(type="lora", rank=16, max_rank=16, alpha=32,
                                   target_modules=["k_proj", "o_proj", "q_proj", "v_proj"], base_model=BASE,
                                   modules_to_save=[], use_dora=False, rank_pattern=False)
    assert insp.to_json()["adapter"] == {"type": "lora", "rank": 16, "max_rank": 16, "alpha": 32,
                                         "target_modules": ["k_proj", "o_proj", "q_proj", "v_proj"],
                                         "base_model": BASE, "modules_to_save": [], "use_dora": False,
                                         "rank_pattern": False}
    per_layer = 16 * HIDDEN * 4 + 16 * (HIDDEN + KV + KV + HIDDEN)
    assert insp.parameters == LAYERS * per_layer
    assert insp.quantization.method == "none" and insp.quantization.weight_dtype == "bfloat16"
    assert insp.tensor_count == LAYERS * 4 * 2
    assert sorted(f.name for f in insp.files) == ["adapter_config.json", "adapter_model.safetensors"]
    assert insp.warnings == []
    data = insp.to_json()
    validate(data, "inspection")
    jsonschema.validate(data["adapter"], ADAPTER_SCHEMA)


def test_full_model_has_no_adapter_field_value(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    save_file({"model.layers.0.self_attn.q_proj.weight": torch.zeros(8, 8, dtype=torch.bfloat16)},
              str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    data = inspect_path(str(d)).to_json()
    assert "adapter" in data and data["adapter"] is None


def test_rank_mismatch_is_a_warning_naming_both_values(tmp_path: Path) -> None:
    path = write_adapter(tmp_path / "a", 8, tensor_rank=32)
    insp = inspect_path(str(path))
    assert insp.adapter.rank == 8 and insp.adapter.max_rank == 32  # limits apply to what the tensors hold
    [warning] = [w for w in insp.warnings if "rank mismatch" in w]
    assert "r=8" in warning and "rank 32" in warning and "4 of 4 modules" in warning


def test_lora_pair_disagreeing_and_targets_disagreeing(tmp_path: Path) -> None:
    path = write_adapter(tmp_path / "a", 16, ("q_proj", "v_proj"), config=peft_config(16, ("q_proj", "k_proj")))
    from safetensors import safe_open
    with safe_open(str(path / "adapter_model.safetensors"), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"] = torch.zeros(HIDDEN, 12,
                                                                                           dtype=torch.bfloat16)
    save_file(tensors, str(path / "adapter_model.safetensors"))
    insp = inspect_path(str(path))
    text = "\n".join(insp.warnings)
    assert "model.layers.0.self_attn.q_proj: lora_A gives rank 16 ([16, 64]), lora_B gives rank 12 ([64, 12])" in text
    assert "target_modules names k_proj, but no LoRA tensors adapt it" in text
    assert "LoRA tensors adapt v_proj (2 modules" in text and "does not list" in text
    assert insp.adapter.target_modules == ["k_proj", "q_proj"]  # as the config says; the warnings say the rest


def test_dora_rank_pattern_and_modules_to_save(tmp_path: Path) -> None:
    cfg = peft_config(8, ("q_proj", "v_proj"), use_dora=True, rank_pattern={"v_proj": 32},
                      modules_to_save=["lm_head"])
    path = write_adapter(tmp_path / "a", 8, config=cfg, dora=True, ranks={"q_proj": 8, "v_proj": 32})
    insp = inspect_path(str(path))
    assert insp.adapter.use_dora is True and insp.adapter.rank_pattern is True
    assert insp.adapter.rank == 8 and insp.adapter.max_rank == 32
    assert insp.adapter.modules_to_save == ["lm_head"]
    assert not [w for w in insp.warnings if "rank mismatch" in w or "use_dora" in w]


def test_dora_claimed_without_magnitudes_is_flagged(tmp_path: Path) -> None:
    path = write_adapter(tmp_path / "a", 8, config=peft_config(8, use_dora=True))
    insp = inspect_path(str(path))
    assert any("use_dora=true, but the tensors have no lora_magnitude_vector" in w for w in insp.warnings)


def test_target_modules_regex_string_and_missing_r(tmp_path: Path) -> None:
    cfg = peft_config(16, ("q_proj",))
    cfg["target_modules"] = r".*\.(q_proj|v_proj)$"
    del cfg["r"]
    path = write_adapter(tmp_path / "a", 16, ("q_proj", "v_proj"), config=cfg)
    insp = inspect_path(str(path))
    assert insp.adapter.target_modules == ["q_proj", "v_proj"]
    assert insp.adapter.rank == 16 and insp.adapter.max_rank == 16
    assert any("target_modules is the pattern" in w for w in insp.warnings)
    assert any("has no r (rank)" in w for w in insp.warnings)


@pytest.mark.parametrize("bad", [0, -4, True, "16", 1 << 40])
def test_hostile_rank_values_are_ignored_with_a_warning(tmp_path: Path, bad: Any) -> None:
    path = write_adapter(tmp_path / "a", 16, config={**peft_config(16), "r": bad})
    insp = inspect_path(str(path))
    assert insp.adapter.rank == 16  # from the tensors
    assert any(f"r = {bad!r} is not a rank" in w for w in insp.warnings)


def test_adapter_config_not_an_object(tmp_path: Path) -> None:
    path = write_adapter(tmp_path / "a", 16)
    (path / "adapter_config.json").write_text("[1, 2]")
    with pytest.raises(InputError, match=r"adapter_config.json: expected a JSON object, found an array"):
        inspect_path(str(path))


def test_broken_adapter_config_json_is_an_input_error(tmp_path: Path) -> None:
    path = write_adapter(tmp_path / "a", 16)
    (path / "adapter_config.json").write_text('{"r": 16,')
    with pytest.raises(InputError, match=r"adapter_config\.json"):
        inspect_path(str(path))


def test_pickle_adapter_is_reported_as_a_pickle(tmp_path: Path) -> None:
    d = tmp_path / "p"
    d.mkdir()
    torch.save({"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": torch.zeros(4, 4)},
               str(d / "adapter_model.bin"))
    (d / "adapter_config.json").write_text(json.dumps(peft_config(16)))
    insp = inspect_path(str(d))
    assert insp.container == "pickle"
    assert insp.adapter.rank == 16 and insp.adapter.max_rank == 16
    assert any("adapter weights are a pickle" in w for w in insp.warnings)
    r = run("inspect", str(d))
    assert r.returncode == 2 and "pickle checkpoint" in r.stderr


def test_adapter_made_by_peft_itself(tmp_path: Path) -> None:
    peft = pytest.importorskip("peft")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTER, num_hidden_layers=LAYERS,
                                         num_attention_heads=4, num_key_value_heads=1, vocab_size=256))
    lora = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"],
                           task_type="CAUSAL_LM")
    wrapped = peft.get_peft_model(model, lora)
    wrapped.save_pretrained(str(tmp_path / "peft"))
    insp = inspect_path(str(tmp_path / "peft"))
    assert insp.adapter is not None
    assert insp.adapter.type == "lora" and insp.adapter.rank == 8 and insp.adapter.max_rank == 8
    assert insp.adapter.alpha == 16 and insp.adapter.target_modules == ["down_proj", "q_proj", "v_proj"]
    assert insp.parameters == wrapped.get_nb_trainable_parameters()[0]
    assert insp.warnings == []


def test_inspect_text_and_json_cli(tmp_path: Path) -> None:
    path = write_adapter(tmp_path / "a", 16)
    r = run("inspect", str(path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"LoRA adapter for {BASE}, ")
    [line] = [x for x in r.stdout.splitlines() if x.strip().startswith("adapter ")]
    assert line.split(None, 1)[1] == f"LoRA r=16, alpha 32, targets q_proj, v_proj, base {BASE}"
    r = run("inspect", str(path), "--json")
    assert r.returncode == 0
    data = json.loads(r.stdout)
    validate(data, "inspection")
    assert data["adapter"]["rank"] == 16 and data["adapter"]["target_modules"] == ["q_proj", "v_proj"]


# ------------------------------------------------------------------------------------------ matrix

def test_fireworks_accepts_rank_16_and_refuses_rank_128(tmp_path: Path, matrix) -> None:
    ok = provider(matrix, "fireworks", inspect_path(str(write_adapter(tmp_path / "r16", 16))))
    assert ok.status == "native" and ok.rule_id == "lora-addon"
    assert ok.kernel.startswith("Fireworks LoRA addon")
    assert any("fine-tuned-import" in s.ref for s in ok.sources)
    big = provider(matrix, "fireworks", inspect_path(str(write_adapter(tmp_path / "r128", 128))))
    assert big.status == "unsupported" and big.rule_id == "lora-rank-over-64"
    assert big.reasons == ["Fireworks LoRA addons need r between 4 and 64 inclusive; this adapter's rank is 128"]
    small = provider(matrix, "fireworks", inspect_path(str(write_adapter(tmp_path / "r2", 2))))
    assert small.status == "unsupported" and "rank is 2" in small.reasons[0]
    edge = provider(matrix, "fireworks", inspect_path(str(write_adapter(tmp_path / "r64", 64))))
    assert edge.status == "native"


def test_fireworks_refuses_unlisted_target_modules_naming_them(tmp_path: Path, matrix) -> None:
    cfg = peft_config(16, ("q_proj", "v_proj", "embed_tokens"))
    insp = inspect_path(str(write_adapter(tmp_path / "a", 16, config=cfg)))
    v = provider(matrix, "fireworks", insp)
    assert v.status == "unsupported" and v.rule_id == "lora-targets"
    assert v.reasons[0].endswith("this adapter also targets embed_tokens")
    # rank and targets both wrong: both reasons
    cfg = peft_config(128, ("q_proj", "embed_tokens"))
    both = provider(matrix, "fireworks", inspect_path(str(write_adapter(tmp_path / "b", 128, ("q_proj",),
                                                                        config=cfg))))
    assert both.status == "unsupported" and len(both.reasons) == 2


def test_fireworks_dora_is_a_warning(tmp_path: Path, matrix) -> None:
    insp = inspect_path(str(write_adapter(tmp_path / "a", 16, config=peft_config(16, use_dora=True), dora=True)))
    v = provider(matrix, "fireworks", insp)
    assert v.status == "native" and any("DoRA" in w for w in v.warnings)


def test_together_groq_cerebras(tmp_path: Path, matrix) -> None:
    insp = inspect_path(str(write_adapter(tmp_path / "a", 128)))
    t = provider(matrix, "together", insp)
    assert t.status == "native" and t.rule_id == "lora-adapter"
    assert any(BASE in x for x in t.requires)
    cfg = peft_config(16, base_model_name_or_path="meta-llama/Meta-Llama-3.1-8B-Instruct-Reference")
    serverless = provider(matrix, "together", inspect_path(str(write_adapter(tmp_path / "s", 16, config=cfg))))
    assert serverless.rule_id == "lora-adapter-serverless-base" and "serverless" in serverless.kernel
    g = provider(matrix, "groq", insp)
    assert g.status == "unknown" and g.rule_id == "lora-adapter-enterprise" and "enterprise" in g.reasons[0]
    c = provider(matrix, "cerebras", insp)
    assert c.status == "unknown" and c.rule_id == "adapter-undocumented" and "merge the adapter" in c.reasons[0]


def test_pickle_adapter_on_together_is_refused(tmp_path: Path, matrix) -> None:
    d = tmp_path / "p"
    d.mkdir()
    torch.save({"x": torch.zeros(2)}, str(d / "adapter_model.bin"))
    (d / "adapter_config.json").write_text(json.dumps(peft_config(16)))
    v = provider(matrix, "together", inspect_path(str(d)))
    assert v.status == "unsupported" and "adapter_model.safetensors" in v.reasons[0]


def test_vllm_rank_flag_and_engines_without_adapter_rules(tmp_path: Path, matrix) -> None:
    h100 = Target(label="h100", arch=matrix.gpus.archs["hopper"], cc="9.0")
    small = inspect_path(str(write_adapter(tmp_path / "r16", 16)))
    big = inspect_path(str(write_adapter(tmp_path / "r128", 128)))
    vllm = parse_engine_spec("vllm", matrix)
    v = resolve_one(matrix, small, vllm, h100)
    assert v.status == "native" and v.rule_id == "lora-default-rank" and not any("max-lora-rank" in x
                                                                                  for x in v.requires)
    v = resolve_one(matrix, big, vllm, h100)
    assert v.status == "native" and v.rule_id == "lora-raised-rank"
    assert any("--max-lora-rank at least 128" in x for x in v.requires)
    # a full-model rule (sglang: unquantised BF16 is native) never accepts an adapter
    s = resolve_one(matrix, small, parse_engine_spec("sglang", matrix), h100)
    assert s.status == "unknown" and s.rule_id is None
    assert "x LoRA adapters" in s.reasons[0] and "never judge an adapter" in s.reasons[0]


def test_every_engine_resolves_adapters_without_ambiguity(tmp_path: Path, matrix) -> None:
    """The audit's probes are full models; sweep adapters over every engine/version/backend/arch too."""
    adapters = [
        inspect_path(str(write_adapter(tmp_path / "r16", 16))),
        inspect_path(str(write_adapter(tmp_path / "r2", 2))),
        inspect_path(str(write_adapter(tmp_path / "r600", 600, ("q_proj",)))),
        inspect_path(str(write_adapter(tmp_path / "bad", 128, ("q_proj",), config=peft_config(128, ("q_proj", "x"))))),
        inspect_path(str(write_adapter(tmp_path / "dora", 16, config=peft_config(16, use_dora=True), dora=True))),
    ]
    ia3 = inspect_path(str(write_adapter(tmp_path / "ia3", 16, config={**peft_config(16), "peft_type": "IA3"})))
    adapters.append(ia3)
    targets = [Target(label=a.id, arch=a, cc=cc) for a in matrix.gpus.archs.values() for cc in (a.ccs or (None,))]
    seen = set()
    for engine in matrix.engines.values():
        for version in engine.versions:
            request = EngineRequest(engine, version)
            for insp in adapters:
                for target in targets if engine.needs_gpu else [None]:
                    try:
                        v = resolve_one(matrix, insp, request, target)
                    except MatrixDataError as exc:  # pragma: no cover - the failure message is the point
                        pytest.fail(f"{engine.id} {version} {target and target.label}: {exc}")
                    assert v.reasons or v.status == "native", (engine.id, v)
                    seen.add(v.status)
    assert seen == {"native", "unsupported", "unknown"}


def test_check_cli_exit_codes_and_json(tmp_path: Path) -> None:
    ok = write_adapter(tmp_path / "r16", 16)
    big = write_adapter(tmp_path / "r128", 128)
    r = run("check", str(ok), "--engine", "fireworks", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["inspection"]["adapter"]["rank"] == 16
    [verdict] = data["verdicts"]
    assert verdict["status"] == "native" and verdict["rule_id"] == "lora-addon"
    r = run("check", str(big), "--engine", "fireworks")
    assert r.returncode == 1
    assert "need r between 4 and 64 inclusive; this adapter's rank is 128" in r.stdout
    r = run("check", str(big), "--engine", "groq", "--engine", "together", "--json")
    statuses = {v["engine"]: v["status"] for v in json.loads(r.stdout)["verdicts"]}
    assert statuses == {"groq": "unknown", "together": "native"}


def test_match_keys_are_validated(tmp_path: Path) -> None:
    from qcheck.matrix.conditions import compile_match

    def fail(check: str, message: str):
        raise MatrixDataError(Path("x.toml"), check, message)

    with pytest.raises(MatrixDataError, match="adapter_targets_all_in must be a non-empty list"):
        compile_match({"adapter_targets_all_in": "q_proj"}, fail)
    with pytest.raises(MatrixDataError, match="expected an integer"):
        compile_match({"adapter_rank": "about 64"}, fail)
    with pytest.raises(MatrixDataError, match="unknown match key 'adapter_rnak'"):
        compile_match({"adapter_rnak": 4}, fail)
    [cond] = compile_match({"adapter_rank": ">=4,<=64"}, fail)
    assert cond.comparisons == (("<=", 64), (">=", 4)) or cond.comparisons == ((">=", 4), ("<=", 64))


# ------------------------------------------------------------------------------ hub + saved JSON


def test_adapter_repo_on_the_hub(hub, tmp_path: Path, matrix) -> None:
    local = write_adapter(tmp_path / "a", 32, ("q_proj", "k_proj", "v_proj", "o_proj"))
    files = {name: (local / name).read_bytes() for name in ("adapter_config.json", "adapter_model.safetensors")}
    files["README.md"] = b"# adapter\n"
    sha = hub.add_repo("org/tiny-lora", files)
    insp = inspect_path("org/tiny-lora")
    assert insp.revision == sha
    assert insp.adapter.rank == 32 and insp.adapter.target_modules == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert provider(matrix, "fireworks", insp).status == "native"


def test_saved_inspection_round_trip_and_hostile_adapter_fields(tmp_path: Path) -> None:
    saved = tmp_path / "insp.json"
    r = run("inspect", str(write_adapter(tmp_path / "a", 128)), "--json")
    saved.write_text(r.stdout)
    r = run("check", str(saved), "--engine", "fireworks")
    assert r.returncode == 1 and "this adapter's rank is 128" in r.stdout
    data = json.loads(saved.read_text())
    data["adapter"].update(target_modules=5, max_rank="many")
    saved.write_text(json.dumps(data))
    r = run("check", str(saved), "--engine", "fireworks", "--json")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    [verdict] = json.loads(r.stdout)["verdicts"]
    assert verdict["status"] == "unknown" and verdict["rule_id"] == "adapter-other"


def test_full_model_with_an_adapter_beside_it_stays_a_model(tmp_path: Path, matrix) -> None:
    d = write_adapter(tmp_path / "m", 16)
    save_file({"model.layers.0.self_attn.q_proj.weight": torch.zeros(HIDDEN, HIDDEN, dtype=torch.bfloat16)},
              str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama"}))
    insp = inspect_path(str(d))
    assert insp.adapter is None and insp.tensor_count == 1 and insp.parameters == HIDDEN * HIDDEN
    assert any("adapter_model.safetensors (a PEFT adapter) beside the model was not read" in w
               for w in insp.warnings)
    assert provider(matrix, "fireworks", insp).rule_id == "hf-checkpoint"


# ------------------------------------------------------------------------------------ edges, in process
def _adapter_ckpt(cfg: Any, ranks: dict[str, tuple[int, int]] | None = None, *, container: str = "safetensors",
                  files: tuple[str, ...] = ("adapter_model.safetensors",), extra: dict[str, Any] | None = None):
    """A Checkpoint as the reader gives it for an adapter directory: module -> (lora_A rank, lora_B rank)."""
    from qcheck.model import Checkpoint, SourceFile, TensorInfo

    tensors = {}
    for module, (ra, rb) in (ranks or {}).items():
        prefix = f"base_model.model.model.layers.0.{module}"
        tensors[f"{prefix}.lora_A.weight"] = TensorInfo(f"{prefix}.lora_A.weight", "BF16", (ra, 64), ra * 128)
        tensors[f"{prefix}.lora_B.weight"] = TensorInfo(f"{prefix}.lora_B.weight", "BF16", (64, rb), rb * 128)
    for name, shape in (extra or {}).items():
        tensors[name] = TensorInfo(name, "BF16", shape, 2)
    kind = "pickle" if container == "pickle" else "safetensors"
    return Checkpoint(path="a", container=container, tensors=tensors, configs={"adapter_config.json": cfg},
                      files=[SourceFile(f, 10, kind) for f in files])


def _adapter(cfg: Any, ranks: dict[str, tuple[int, int]] | None = None, **kw: Any):
    from qcheck.classify.adapter import apply_adapter
    from qcheck.model import Inspection

    insp = Inspection(path="a", container=kw.get("container", "safetensors"))
    apply_adapter(_adapter_ckpt(cfg, ranks, **kw), insp)
    return insp.adapter, insp.warnings


def test_is_an_adapter_only_with_its_config_and_only_adapter_weights():
    from qcheck.classify.adapter import is_adapter

    assert is_adapter(_adapter_ckpt(peft_config(8)))
    assert is_adapter(_adapter_ckpt(peft_config(8), files=("sub/dir/adapter_model.bin",), container="pickle"))
    no_config = _adapter_ckpt(peft_config(8))
    no_config.configs = {}
    assert not is_adapter(no_config)
    assert not is_adapter(_adapter_ckpt(peft_config(8), files=("adapter_model.safetensors", "model.safetensors")))
    assert not is_adapter(_adapter_ckpt(peft_config(8), files=()))


@pytest.mark.parametrize("r, kept", [(1, True), (65536, True), (65537, False), (0, False), (True, False),
                                     ("8", False)])
def test_config_rank_between_1_and_65536(r, kept):
    adapter, warnings = _adapter(peft_config(r), {"self_attn.q_proj": (8, 8)})
    assert adapter.rank == (r if kept else 8)  # an ignored r falls back to the tensors' rank
    assert any(f"r = {r!r} is not a rank (an integer 1..65536); ignored" in w for w in warnings) is (not kept)


def test_largest_rank_from_config_and_rank_pattern_when_the_tensors_cannot_say():
    """A pickle adapter's ranks are the config's: r and every valid rank_pattern value (1..65536, no booleans)."""
    pattern = {"q_proj": 32, "k_proj": 65536, "v_proj": 65537, "o_proj": True, "up_proj": 0}
    adapter, _ = _adapter(peft_config(8, rank_pattern=pattern), container="pickle", files=("adapter_model.bin",))
    assert (adapter.rank, adapter.max_rank, adapter.rank_pattern) == (8, 65536, True)
    adapter, _ = _adapter(peft_config(8, rank_pattern={"q_proj": 4}), container="pickle",
                          files=("adapter_model.bin",))
    assert adapter.max_rank == 8
    adapter, _ = _adapter(peft_config(8), container="pickle", files=("adapter_model.bin",))
    assert (adapter.rank, adapter.max_rank, adapter.rank_pattern) == (8, 8, False)
    adapter, _ = _adapter(peft_config(8, rank_pattern={"q_proj": 16}), {"self_attn.q_proj": (16, 16)})
    assert (adapter.rank, adapter.max_rank) == (8, 16)


def test_rank_pattern_ranks_start_at_1():
    """Without r, a rank_pattern of 1 is the largest rank; a 0 in it is no rank."""
    for pattern, largest in (({"q_proj": 1}, 1), ({"q_proj": 0}, None)):
        cfg = peft_config(8, rank_pattern=pattern)
        del cfg["r"]
        adapter, _ = _adapter(cfg, container="pickle", files=("adapter_model.bin",))
        assert adapter.max_rank == largest, pattern


def test_half_pairs_and_vectors_are_malformed_and_the_next_pairs_still_count():
    """A lora_A without its lora_B, and a pair where one side is a vector: each is listed (no crash), and the pairs
    after them still give their ranks."""
    pre = "base_model.model.model.layers.0."
    extra = {f"{pre}a_proj.lora_A.weight": (8, 64),  # no lora_B
             f"{pre}b_proj.lora_A.weight": (8, 64), f"{pre}b_proj.lora_B.weight": (64,),  # B is a vector
             f"{pre}c_proj.lora_A.weight": (8,), f"{pre}c_proj.lora_B.weight": (64, 8)}  # A is a vector
    adapter, warnings = _adapter(peft_config(8, targets=["a_proj", "b_proj", "c_proj", "q_proj"]),
                                 {"self_attn.q_proj": (8, 8)}, extra=extra)
    (line,) = [w for w in warnings if w.startswith("malformed LoRA pairs: ")]
    assert line == (f"malformed LoRA pairs: {pre}a_proj.lora_A.weight has no lora_B partner; "
                    f"{pre}b_proj.lora_A.weight [8, 64] / {pre}b_proj.lora_B.weight [64] are not matrices; "
                    f"{pre}c_proj.lora_A.weight [8] / {pre}c_proj.lora_B.weight [64, 8] are not matrices")
    assert adapter.rank == 8 and adapter.max_rank == 8
    only_b = {f"{pre}a_proj.lora_B.weight": (64, 8)}
    _, warnings = _adapter(peft_config(8), {"self_attn.q_proj": (8, 8)}, extra=only_b)
    assert f"malformed LoRA pairs: {pre}a_proj.lora_B.weight has no lora_A partner" in warnings


def test_peft_type_missing_or_not_a_string():
    for value in (None, 5, "  "):
        cfg = peft_config(8, peft_type=value)
        adapter, warnings = _adapter(cfg, {"self_attn.q_proj": (8, 8)})
        assert adapter.type == "lora"
        assert "adapter_config.json has no peft_type; LoRA tensors found, reported as lora" in warnings
        adapter, warnings = _adapter(cfg)
        assert adapter.type == "unknown" and "adapter_config.json has no peft_type; reported as unknown" in warnings
    adapter, _ = _adapter(peft_config(8, peft_type=" LoHa "))
    assert adapter.type == "loha"


def test_alpha_base_model_and_dora_fields():
    for alpha, kept in ((16, 16), (0.5, 0.5), (True, None), ("16", None)):
        adapter, _ = _adapter(peft_config(8, lora_alpha=alpha), {"self_attn.q_proj": (8, 8)})
        assert adapter.alpha == kept
    adapter, _ = _adapter(peft_config(8, base_model_name_or_path=""), {"self_attn.q_proj": (8, 8)})
    assert adapter.base_model is None
    adapter, warnings = _adapter(peft_config(8, use_dora=True), {"self_attn.q_proj": (8, 8)})
    assert adapter.use_dora is True  # claimed, even without the magnitude tensors (and that is a warning)
    assert any("says use_dora=true, but the tensors have no lora_magnitude_vector" in w for w in warnings)
    adapter, _ = _adapter(peft_config(8), {"self_attn.q_proj": (8, 8)},
                          extra={"base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector": (64,)})
    assert adapter.use_dora is True


def test_target_modules_from_the_tensors_when_the_config_gives_no_list():
    ranks = {"self_attn.q_proj": (8, 8), "mlp.down_proj": (8, 8)}
    adapter, _ = _adapter(peft_config(8, targets=["q_proj", 5]), ranks)
    assert adapter.target_modules == ["down_proj", "q_proj"]
    adapter, warnings = _adapter(peft_config(8, targets=".*proj"), ranks)
    assert adapter.target_modules == ["down_proj", "q_proj"]
    assert "adapter_config.json target_modules is the pattern '.*proj'; target modules from the tensors" in warnings
    _, warnings = _adapter(peft_config(8, targets=".*proj"))
    assert "adapter_config.json target_modules is the pattern '.*proj'; target modules unknown: no LoRA tensors" \
        in warnings
    _, warnings = _adapter(peft_config(8, targets=""), ranks)
    assert not any("is the pattern" in w for w in warnings)


@pytest.mark.parametrize("bad, more", [(6, ""), (7, " (+1 more)")])
def test_malformed_pairs_are_listed_up_to_six(bad, more):
    ranks = {f"m{i}.q_proj": (8, 4) for i in range(bad)}
    _, warnings = _adapter(peft_config(8), ranks)
    (line,) = [w for w in warnings if w.startswith("malformed LoRA pairs: ")]
    assert line.count("lora_A gives rank 8") == 6 and line.endswith("([64, 4])" + more)


def test_rank_mismatch_names_the_rank_pattern_when_there_is_one():
    ranks = {"self_attn.q_proj": (16, 16), "self_attn.v_proj": (4, 4)}
    _, warnings = _adapter(peft_config(8, rank_pattern={"q_proj": 16}), ranks)
    assert ("rank mismatch: adapter_config.json says r=8 (and its rank_pattern), but the tensors have rank 4 "
            "(1 of 2 modules, e.g. base_model.model.model.layers.0.self_attn.v_proj)") in warnings
    _, warnings = _adapter(peft_config(8), ranks)
    assert ("rank mismatch: adapter_config.json says r=8, but the tensors have rank 4, 16 (2 of 2 modules, e.g. "
            "base_model.model.model.layers.0.self_attn.q_proj)") in warnings
    # a pattern string for target_modules is not a list of names: no per-name comparison with the tensors
    _, warnings = _adapter(peft_config(8, targets="q_proj"), {"self_attn.q_proj": (8, 8)})
    assert not any("target_modules names" in w or "does not list" in w for w in warnings)
