"""KV-cache scales from the headers (issue #24): which attention layers ship k_scale/v_scale (and q/prob scales),
what the config declares, and the engine's own log line on the verdict when a quantised cache runs with the
default scale of 1.0; ``require_kv_scales`` (CLI ``--require-kv-scales``, policy ``require-kv-scales``) makes it fail.

Every checkpoint is a real header-only safetensors directory (support.builders) read through the readers and the
classifier; the check goes through ``qcheck check`` in-process, the CLI and the gate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from qcheck.check import inspect_target
from qcheck.errors import InputError
from qcheck.model import Verdict
from qcheck.pipeline import run
from qcheck.request import CheckRequest, Deploy, KVCacheTypes
from qcheck.saved_inspection import inspection_from_json
from support import builders as b
from support.contract import validate

STATIC_KV = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}
VLLM_LINE = ("'Using KV cache scaling factor 1.0 for fp8_e4m3. If this is unintended, verify that k/v_scale scaling "
             "factors are properly set in the checkpoint.'")


def declared(tmp: Path, name: str, *, drop: str | None = None, layers: int | None = None) -> str:
    """compressed-tensors FP8 with a static FP8 KV cache declared; ``drop`` removes scale tensors whose name holds it."""
    shape = b.Shape(layers=layers) if layers else b.DEFAULT
    fx = b.fp8_ct_static(shape)
    if drop is not None:
        for key in [k for k in fx.tensors if drop in k]:
            del fx.tensors[key]
    return str(fx.write(tmp / name))


def risks(v: Verdict) -> list[str]:
    return [r.id for r in v.risks]


def one(path: str, engine: str, gpu: str, kv_cache_dtype: str | None = None,
        require_kv_scales: bool = False) -> tuple[Verdict, int]:
    result = run(CheckRequest(path, (engine,), (gpu,), Deploy(kv_cache=KVCacheTypes.parse(kv_cache_dtype)),
                              require_kv_scales=require_kv_scales))
    return result.verdicts[0], result.exit_code


# ------------------------------------------------------------------ the classifier

def test_the_headers_say_which_layers_ship_scales(tmp_path: Path) -> None:
    full = inspect_target(declared(tmp_path, "full", layers=4))
    s = full.quantization.kv_scales
    assert s is not None and (s.declared_by, s.static) == ("kv_cache_scheme", True)
    assert (s.attention_layers, s.k_scales, s.v_scales, s.q_scales, s.prob_scales) == (4, 4, 4, 0, 0)
    assert s.kv_complete and not s.qp_complete and s.missing == [] and full.findings == []

    none = inspect_target(declared(tmp_path, "none", drop="_scale", layers=4))
    assert (none.quantization.kv_scales.k_scales, none.quantization.kv_scales.missing[0]) == (0, "model.layers.0")
    assert none.findings[0].kind == "config-mismatch" and none.findings[0].where == "kv_cache_scheme"
    assert ("declares a static float8_e4m3 KV cache, but k_scale/v_scale tensors cover 0 of 4 attention layers "
            "(e.g. model.layers.0)") in none.findings[0].message

    part = inspect_target(declared(tmp_path, "part", drop="layers.2.self_attn.v_scale", layers=4))
    assert part.quantization.kv_scales.missing == ["model.layers.2"]
    assert "cover 3 of 4 attention layers (e.g. model.layers.2)" in part.findings[0].message


@pytest.mark.parametrize(("names", "kv"), [
    ((".self_attn.k_proj.k_scale", ".self_attn.v_proj.v_scale"), (2, 2)),  # ModelOpt export
    ((".self_attn.kv_scale",), (2, 2)),  # the deprecated single scale: K and V
    ((".self_attn.k_proj.output_scale", ".self_attn.v_proj.output_scale"), (2, 2)),  # Quark
    ((".self_attn.k_cache.scale", ".self_attn.v_cache.scale"), (2, 2)),  # HYV3
    ((".self_attn.k_scale",), (2, 0)),  # V missing
])
def test_every_scale_spelling_the_engines_load_is_counted(tmp_path: Path, names: tuple[str, ...],
                                                          kv: tuple[int, int]) -> None:
    fx = b.bf16_llama()
    for n in range(2):
        for suffix in names:
            fx.tensors[f"model.layers.{n}{suffix}"] = ("F32", ())
        fx.tensors[f"model.layers.{n}.self_attn.q_scale"] = ("F32", ())
    s = inspect_target(str(fx.write(tmp_path / "m"))).quantization.kv_scales
    assert (s.k_scales, s.v_scales, s.q_scales, s.attention_layers) == (*kv, 2, 2)


def test_a_vision_tower_is_not_an_attention_layer_that_caches(tmp_path: Path) -> None:
    fx = b.fp8_ct_static()
    for n in range(3):
        fx.tensors[f"model.vision_tower.encoder.layers.{n}.self_attn.k_proj.weight"] = ("BF16", (64, 64))
    s = inspect_target(str(fx.write(tmp_path / "mm"))).quantization.kv_scales
    assert (s.attention_layers, s.kv_complete) == (2, True)


def test_gguf_has_no_scale_record(tmp_path: Path) -> None:
    from support.gguf_helpers import Q, write_gguf

    path = write_gguf(tmp_path / "m.gguf", [("blk.0.attn_q.weight", (64, 64), Q.Q8_0)])[0]
    assert inspect_target(str(path)).quantization.kv_scales is None


# ------------------------------------------------------------------ the verdict

def test_declared_but_missing_scales_warn_with_the_engines_log_line(tmp_path: Path) -> None:
    path = declared(tmp_path, "none", drop="_scale")
    v, code = one(path, "vllm", "rtx-4090")  # the checkpoint's own FP8 cache; sm89: no query quantisation
    assert v.status == "native" and code == 0
    assert risks(v) == ["kv-scales-default-one"]
    assert any(VLLM_LINE in w and "0 of 2 attention layers" in w for w in v.warnings)
    kv = next(d for d in v.dimensions if d.dimension == "kv-cache")
    assert kv.risks[0].kind == "kv-scales" and any("kv_cache.py" in s.ref for s in kv.sources)
    s, _ = one(path, "sglang", "h100")
    assert risks(s) == ["kv-scales-default-one"]
    assert any("'Using FP8 KV cache but no scaling factors provided. Defaulting to scaling factors of 1.0.'" in w
               for w in s.warnings)


def test_shipped_scales_raise_nothing_about_k_and_v(tmp_path: Path) -> None:
    v, _ = one(declared(tmp_path, "full"), "vllm", "rtx-4090")
    assert v.risks == [] and not any("scaling factor" in w for w in v.warnings)


def test_fp8_asked_on_a_checkpoint_without_scales(tmp_path: Path) -> None:
    bf16 = str(b.bf16_llama().write(tmp_path / "bf16"))
    v, code = one(bf16, "vllm", "l40s", kv_cache_dtype="fp8")
    assert risks(v) == ["kv-scales-default-one"] and code == 0
    assert any("ships k_scale/v_scale for 0 of 2 attention layers (none has one)" in w for w in v.warnings)
    assert one(bf16, "vllm", "l40s")[0].risks == []  # nothing quantised asked: nothing to say
    assert one(bf16, "sglang", "h100", kv_cache_dtype="fp8_e5m2")[0].risks == []  # e5m2: no scaling needed


def test_q_and_prob_scales_matter_where_the_query_is_quantised(tmp_path: Path) -> None:
    """vLLM quantises the query to FP8 with q_scale on sm90/sm100 (FlashAttention 3/4, FlashInfer TRTLLM)."""
    path = declared(tmp_path, "full")  # k/v scales, no q/prob scales
    h100, _ = one(path, "vllm", "h100")
    assert risks(h100) == ["kv-scales-query-fp8"]
    assert any("'Using uncalibrated q_scale 1.0 and/or prob_scale 1.0 with fp8 attention." in w for w in h100.warnings)
    assert one(path, "vllm", "b200")[0].risks != []
    assert one(path, "vllm", "rtx-4090")[0].risks == []  # sm89: FlashInfer does not quantise the query
    assert one(path, "vllm", "rtx-5090")[0].risks == []  # sm120: neither


def test_the_scale_rules_hold_from_the_version_they_were_read_at(tmp_path: Path) -> None:
    path = declared(tmp_path, "none", drop="_scale")
    assert risks(one(path, "vllm==0.33.0", "rtx-4090")[0]) == ["kv-scales-default-one"]
    older, _ = one(path, "vllm==0.28.0", "rtx-4090")  # FP8 KV per GPU was not read before 0.33.0: unknown
    assert older.risks == [] and next(d for d in older.dimensions if d.dimension == "kv-cache").status == "unknown"


def test_require_kv_scales_makes_the_risk_a_failure(tmp_path: Path) -> None:
    path = declared(tmp_path, "none", drop="_scale")
    result = run(CheckRequest(path, ("vllm",), ("rtx-4090",), require_kv_scales=True))
    assert result.verdicts[0].status == "native" and result.exit_code == 1
    assert result.to_json()["policy"]["require_kv_scales"] is True
    assert one(declared(tmp_path, "full"), "vllm", "rtx-4090", require_kv_scales=True)[1] == 0
    assert one(path, "vllm", "rtx-4090")[1] == 0  # a warning unless the policy asks for scales


def test_a_saved_inspection_keeps_the_scale_record(tmp_path: Path) -> None:
    insp = inspect_target(declared(tmp_path, "part", drop="layers.1.self_attn.k_scale"))
    data = json.loads(json.dumps(insp.to_json()))
    assert data["quantization"]["kv_scales"] == {"declared_by": "kv_cache_scheme", "static": True,
                                                 "attention_layers": 2, "k_scales": 1, "v_scales": 2, "q_scales": 0,
                                                 "prob_scales": 0, "missing": ["model.layers.1"]}
    validate(data, "inspection")
    assert inspection_from_json(data).quantization.kv_scales == insp.quantization.kv_scales
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps(data))
    assert risks(one(str(saved), "vllm", "rtx-4090")[0]) == ["kv-scales-default-one"]
    old = dict(data, quantization={k: v for k, v in data["quantization"].items() if k != "kv_scales"})
    assert inspection_from_json(old).quantization.kv_scales is None  # records from before issue 24 still load
    for bad in ({"k_scales": -1}, {"k_scales": "2"}, {"missing": [3]}, "all"):
        broken = dict(data, quantization={**data["quantization"], "kv_scales": bad if isinstance(bad, str) else
                                          {**data["quantization"]["kv_scales"], **bad}})
        with pytest.raises(InputError):
            inspection_from_json(broken)


# ------------------------------------------------------------------ front ends

def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "QCHECK_"))}
    return subprocess.run([sys.executable, "-m", "qcheck", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=300)


def test_the_cli_flag_and_the_sarif_finding(tmp_path: Path) -> None:
    path = declared(tmp_path, "none", drop="_scale")
    plain = cli("check", path, "--engine", "vllm", "--gpu", "rtx-4090", "--json")
    assert plain.returncode == 0, plain.stderr
    data = json.loads(plain.stdout)
    validate(data, "check")
    assert data["verdicts"][0]["risks"][0]["kind"] == "kv-scales"
    strict = cli("check", path, "--engine", "vllm", "--gpu", "rtx-4090", "--require-kv-scales", "--format", "sarif")
    assert strict.returncode == 1, strict.stderr
    results = json.loads(strict.stdout)["runs"][0]["results"]
    qc115 = [r for r in results if r["ruleId"] == "QC115"]
    assert qc115 and qc115[0]["level"] == "error" and "scaling factor 1.0" in qc115[0]["message"]["text"]
    lenient = cli("check", path, "--engine", "vllm", "--gpu", "rtx-4090", "--format", "sarif")
    assert [r["level"] for r in json.loads(lenient.stdout)["runs"][0]["results"] if r["ruleId"] == "QC115"] == [
        "warning"]


def test_the_gate_policy_key(tmp_path: Path) -> None:
    declared(tmp_path, "model", drop="_scale")
    policy = 'models = ["model"]\n[[targets]]\nengine = "vllm"\ngpu = ["rtx-4090"]\n'
    (tmp_path / "qcheck.toml").write_text(policy)
    assert cli("gate", "--json", cwd=tmp_path).returncode == 0
    (tmp_path / "qcheck.toml").write_text("require-kv-scales = true\n" + policy)
    proc = cli("gate", "--json", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    verdict = json.loads(proc.stdout)["models"][0]["verdicts"][0]
    assert verdict["fails"] is True and verdict["policy"]["require_kv_scales"] is True


def test_scale_names_of_no_kind_or_no_layer_do_not_end_the_count() -> None:
    """A tensor whose last component looks like a scale but names no KV scale (an MLP output scale), or a scale
    outside any layer, comes first in the file: the layers' k/v scales after it still count."""
    from qcheck.classify.base import Draft
    from qcheck.classify.kv_scales import kv_scales
    from qcheck.classify.table import TensorTable
    from qcheck.model import TensorInfo

    names = ["model.layers.0.mlp.down_proj.output_scale", "lm_head.k_scale", "model.layers.0.self_attn.k_proj.weight",
             "model.layers.0.self_attn.k_scale", "model.layers.0.self_attn.v_scale"]
    table = TensorTable({n: TensorInfo(n, "F32", (1,), 4) for n in names})
    out = kv_scales(table, Draft(tensors={}, metadata={}, qlinears=[]))
    assert (out.attention_layers, out.k_scales, out.v_scales, out.missing) == (1, 1, 1, [])


def test_missing_layers_are_listed_in_number_order_and_other_digits_first() -> None:
    """Layer 10 after layer 2 (numbers, not text); an index in non-ASCII digits is not read as a number."""
    from qcheck.classify.base import Draft
    from qcheck.classify.kv_scales import kv_scales
    from qcheck.classify.table import TensorTable
    from qcheck.model import TensorInfo

    names = [f"model.layers.{i}.self_attn.k_proj.weight" for i in ("10", "2", "\u0663")]
    table = TensorTable({n: TensorInfo(n, "F8_E4M3", (8, 8), 64) for n in names})
    draft = Draft(tensors={}, metadata={}, qlinears=[], kv_cache_declared="kv_cache_scheme")
    out = kv_scales(table, draft)
    assert out.missing == ["model.layers.\u0663", "model.layers.2", "model.layers.10"]
