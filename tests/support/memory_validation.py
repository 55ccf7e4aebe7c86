"""The memory validation table: published engine runs (tests/data/memory_validation.toml) against qcheck's estimate,
recomputed from each run's inputs through ``qcheck.memory.apply_memory`` (the code every front end calls).

``rows()`` gives one ``Row`` per run with qcheck's figure and the error; ``render()`` the Markdown table of
docs/memory.md; ``update_docs()`` writes it between the markers. tests/test_memory_validation.py asserts the errors
and that the docs are current; bench/memory_validation.py prints and writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

from qcheck.matrix import load_matrix
from qcheck.memory import GIB, MIB, MemoryEstimate, apply_memory
from qcheck.model import Inspection, Verdict
from qcheck.model_shape import shape_from
from qcheck.request import Deploy, EngineKnobs, KVCacheTypes, Parallel

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "memory_validation.toml"
DOCS = ROOT / "docs" / "memory.md"
START, END = "<!-- validation-table:start -->", "<!-- validation-table:end -->"
#: the quality bar: every compared figure within this share of the measured one
TOLERANCE = 0.05


@dataclass
class Row:
    """One published run, what it measured, and what qcheck says from the same inputs."""

    run: dict[str, Any]
    estimate: MemoryEstimate
    measured: float | None
    ours: float | None
    unit: str

    @property
    def kind(self) -> str:
        return str(self.run["measured"]["kind"])

    @property
    def error(self) -> float | None:
        if self.measured in (None, 0) or self.ours is None:
            return None
        return (self.ours - self.measured) / self.measured

    @property
    def ok(self) -> bool:
        if self.kind == "refused":
            return self.estimate.fits is False
        return self.error is not None and abs(self.error) <= TOLERANCE


def load_runs(path: Path = DATA) -> list[dict[str, Any]]:
    with path.open("rb") as fh:
        return list(tomllib.load(fh)["run"])


def _inspection(run: dict[str, Any]) -> Inspection:
    cfg = run["config"]
    container = run.get("container", "safetensors")
    ins = Inspection(path=run["model"], container=container, size_bytes=run.get("weights_bytes"),
                     model_type=cfg.get("model_type"), num_layers=cfg.get("num_hidden_layers"),
                     hidden_size=cfg.get("hidden_size"), num_attention_heads=cfg.get("num_attention_heads"),
                     num_kv_heads=cfg.get("num_key_value_heads"), head_dim=cfg.get("head_dim"),
                     vocab_size=cfg.get("vocab_size"), context_length=cfg.get("max_position_embeddings"),
                     dtype=None if container == "gguf" else cfg.get("torch_dtype"),
                     intermediate_size=cfg.get("intermediate_size"), moe=bool(cfg.get("num_experts")),
                     num_experts=cfg.get("num_experts"), num_experts_used=cfg.get("num_experts_per_tok"))
    ins.shape = shape_from(ins, config=cfg)
    return ins


def _deploy(run: dict[str, Any]) -> Deploy:
    s = run.get("settings", {})
    return Deploy(context=s.get("context"), batch=s.get("batch", 1),
                  kv_cache=KVCacheTypes.parse(run.get("kv_cache_dtype")), parallel=Parallel(tp=s.get("tp")),
                  knobs=EngineKnobs(**s.get("knobs", {})))


def estimate(run: dict[str, Any]) -> MemoryEstimate:
    """qcheck's memory estimate for one run: the verdict's engine, version and GPU, judged by apply_memory."""
    matrix = load_matrix()
    target = matrix.gpus.lookup(run["gpu"])
    verdict = Verdict(engine=run["engine"], engine_version=run["version"], gpu=target.gpu, arch=target.arch.id,
                      compute_capability=target.cc, status="native")
    apply_memory([verdict], _inspection(run), _deploy(run), matrix)
    assert verdict.memory is not None
    return verdict.memory


def _buffers_mib(est: MemoryEstimate) -> float:
    parts = {p.name: p.bytes for p in est.parts}
    return (parts["KV cache"] + parts["compute buffer"] + parts["output buffer"]) / MIB


def row(run: dict[str, Any]) -> Row:
    est = estimate(run)
    kind, value = run["measured"]["kind"], run["measured"].get("value")
    if kind in ("kv_pool_gib", "refused"):
        ours = est.kv_available_bytes / GIB if est.kv_available_bytes is not None else None
        return Row(run, est, value, ours, "GiB")
    if kind == "buffers_mib":
        return Row(run, est, value, _buffers_mib(est), "MiB")
    if kind == "peak_gb":
        return Row(run, est, value, est.total_bytes / 1e9, "GB")
    raise ValueError(f"{run['id']}: unknown measured kind {kind!r}")


def rows() -> list[Row]:
    return [row(run) for run in load_runs()]


def _what(r: Row) -> str:
    return {"kv_pool_gib": "KV pool", "refused": "did not start", "buffers_mib": "KV + compute + output",
            "peak_gb": "peak"}[r.kind]


def _measured_cell(r: Row) -> str:
    if r.kind == "refused":
        return "refused to start" + (f" ({r.measured:g} GiB of KV)" if r.measured is not None else "")
    return f"{r.measured:g} {r.unit}"


def _ours_cell(r: Row) -> str:
    if r.kind == "refused":
        pool = f"{r.ours:.2f} GiB of KV; " if r.ours is not None else ""
        return pool + ("does not fit" if r.estimate.fits is False else "**fits**")
    return f"{r.ours:.2f} {r.unit}" if r.ours is not None else "?"


def _settings(run: dict[str, Any]) -> str:
    s = run.get("settings", {})
    out = [f"context {s['context']}"] if s.get("context") else []
    if s.get("tp"):
        out.append(f"tp {s['tp']}")
    out += [f"{k} {str(v).lower() if isinstance(v, bool) else v}" for k, v in s.get("knobs", {}).items()]
    return ", ".join(out)


def render(table: list[Row] | None = None) -> str:
    """The validation table in Markdown (what docs/memory.md holds between the markers)."""
    table = rows() if table is None else table
    lines = ["| run | engine | GPU | model | settings | measured | qcheck | error | held out |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        run = r.run
        err = "ok" if r.kind == "refused" and r.ok else (f"{r.error:+.1%}" if r.error is not None else "n/a")
        lines.append(f"| [{run['id']}]({run['source']}) | {run['engine']} {run['version']} | {run['gpu']} | "
                     f"{run['model']} | {_settings(run)} | {_what(r)}: {_measured_cell(r)} | {_ours_cell(r)} | {err} | "
                     f"{'yes' if run.get('held_out') else 'no'} |")
    worst = max((abs(r.error) for r in table if r.error is not None and r.kind != "refused"), default=0.0)
    held = [r for r in table if r.run.get("held_out")]
    worst_held = max((abs(r.error) for r in held if r.error is not None), default=0.0)
    lines += ["", f"{len(table)} runs; largest error {worst:.1%} ({len(held)} held-out runs: {worst_held:.1%}); every "
              "run that did not start is judged \"does not fit\" (recomputed by tests/test_memory_validation.py "
              "from tests/data/memory_validation.toml)."]
    return "\n".join(lines) + "\n"


def docs_table(text: str) -> str | None:
    """The table docs/memory.md holds between the markers (None: no markers)."""
    if START not in text or END not in text:
        return None
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def update_docs(path: Path = DOCS) -> bool:
    """Write the rendered table into docs/memory.md between the markers; True when it changed."""
    text = path.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise SystemExit(f"{path}: the markers {START} / {END} are missing")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{START}\n{render()}{END}{tail}"
    if new != text:
        path.write_text(new, encoding="utf-8")
        return True
    return False
