"""The memory validation tables: published engine runs (tests/data/memory_validation.toml) against qcheck's estimate,
recomputed from each run's inputs through ``qcheck.memory.apply_memory`` (the code every front end calls).

Every run is either ``fitted`` (it informed a constant of the engine's ``[memory]`` data) or ``held-out`` (nothing was
chosen on it), and each group's error is reported apart. ``rows()`` gives one ``Row`` per run with qcheck's figures
and the errors; ``render()`` the Markdown of docs/memory.md (the pools and buffers, the weights as held, vLLM's
maximum concurrency; fitted and held-out apart); ``update_docs()`` writes it between the markers.
tests/test_memory_validation.py asserts the targets and that the docs are current; bench/memory_validation.py
prints and writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

from qcheck.matrix import load_matrix
from qcheck.memory import GIB, MIB, MemoryEstimate, apply_memory
from qcheck.model import Inspection, Quantization, TensorInfo, Verdict
from qcheck.model_shape import shape_from
from qcheck.request import Deploy, EngineKnobs, KVCacheTypes, Parallel

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "memory_validation.toml"
DOCS = ROOT / "docs" / "memory.md"
START, END = "<!-- validation-table:start -->", "<!-- validation-table:end -->"
SPLITS = ("fitted", "held-out")
#: the targets: a fitted run within 5 %; a held-out KV pool within 5 % or 0.5 GiB, whichever is larger; weights as
#: held within 2 %; vLLM's maximum concurrency within 5 %
TOLERANCE = 0.05
HELD_OUT_POOL_GIB = 0.5
WEIGHTS_TOLERANCE = 0.02
CONCURRENCY_TOLERANCE = 0.05


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
    def split(self) -> str:
        return str(self.run["split"])

    @property
    def error(self) -> float | None:
        if self.measured in (None, 0) or self.ours is None:
            return None
        return (self.ours - self.measured) / self.measured

    @property
    def ok(self) -> bool:
        """Within this run's target (a refused run: judged "does not fit")."""
        if self.kind == "refused":
            return self.estimate.fits is False
        if self.kind == "weights_gib":
            return True  # the weights table judges it
        if self.error is None:
            return False
        if self.split == "held-out" and self.kind == "kv_pool_gib":
            assert self.ours is not None and self.measured is not None
            return abs(self.ours - self.measured) <= max(TOLERANCE * abs(self.measured), HELD_OUT_POOL_GIB)
        return abs(self.error) <= TOLERANCE

    # -- the weights as the engine holds them, per GPU
    @property
    def weights_measured(self) -> float | None:
        if self.kind == "weights_gib":
            return float(self.run["measured"]["value"])
        value = self.run["measured"].get("weights_gib")
        return float(value) if value is not None else None

    @property
    def weights_ours(self) -> float | None:
        held = self.estimate.weights_device_bytes
        return held / GIB if held is not None else None

    @property
    def weights_error(self) -> float | None:
        if self.weights_measured is None or self.weights_ours is None:
            return None
        return (self.weights_ours - self.weights_measured) / self.weights_measured

    # -- vLLM's "Maximum concurrency for N tokens per request"
    @property
    def concurrency_measured(self) -> float | None:
        value = self.run["measured"].get("concurrency")
        return float(value) if value is not None else None

    @property
    def concurrency_ours(self) -> float | None:
        """The figure ``qcheck check --capacity`` prints for vLLM (qcheck.memory.capacity)."""
        from qcheck.memory.capacity import engine_concurrency

        return engine_concurrency(self.estimate)

    @property
    def concurrency_error(self) -> float | None:
        if self.concurrency_measured is None or self.concurrency_ours is None:
            return None
        return (self.concurrency_ours - self.concurrency_measured) / self.concurrency_measured


def load_runs(path: Path = DATA) -> list[dict[str, Any]]:
    with path.open("rb") as fh:
        runs = list(tomllib.load(fh)["run"])
    for run in runs:
        if run.get("split") not in SPLITS:
            raise ValueError(f"{run.get('id')}: split must be one of {', '.join(SPLITS)}")
    return runs


def gpt_oss_tensors(cfg: dict[str, Any]) -> dict[str, TensorInfo]:
    """The tensor table of an MXFP4 GPT-OSS checkpoint (openai/gpt-oss-20b, -120b), as its safetensors headers list
    it: BF16 embeddings, output layer, attention with biases and sinks, norms and router; MXFP4 experts as U8 blocks
    (two values a byte) and U8 E8M0 scales (one per 32), BF16 expert biases. Every size follows from config.json."""
    h, v, e, layers = cfg["hidden_size"], cfg["vocab_size"], cfg["num_local_experts"], cfg["num_hidden_layers"]
    w, hd = cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out: dict[str, TensorInfo] = {}

    def add(name: str, dtype: str, *shape: int) -> None:
        size = {"BF16": 2, "U8": 1}[dtype]
        for d in shape:
            size *= d
        out[name] = TensorInfo(name, dtype, shape, size)

    add("model.embed_tokens.weight", "BF16", v, h)
    add("lm_head.weight", "BF16", v, h)
    add("model.norm.weight", "BF16", h)
    for i in range(layers):
        p = f"model.layers.{i}."
        add(p + "input_layernorm.weight", "BF16", h)
        add(p + "post_attention_layernorm.weight", "BF16", h)
        for name, rows in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            add(p + f"self_attn.{name}.weight", "BF16", rows, h)
            add(p + f"self_attn.{name}.bias", "BF16", rows)
        add(p + "self_attn.o_proj.weight", "BF16", h, q)
        add(p + "self_attn.o_proj.bias", "BF16", h)
        add(p + "self_attn.sinks", "BF16", cfg["num_attention_heads"])
        add(p + "mlp.router.weight", "BF16", e, h)
        add(p + "mlp.router.bias", "BF16", e)
        add(p + "mlp.experts.gate_up_proj_blocks", "U8", e, 2 * w, h // 32, 16)
        add(p + "mlp.experts.gate_up_proj_scales", "U8", e, 2 * w, h // 32)
        add(p + "mlp.experts.gate_up_proj_bias", "BF16", e, 2 * w)
        add(p + "mlp.experts.down_proj_blocks", "U8", e, h, w // 32, 16)
        add(p + "mlp.experts.down_proj_scales", "U8", e, h, w // 32)
        add(p + "mlp.experts.down_proj_bias", "BF16", e, h)
    return out


TENSOR_TABLES = {"gpt-oss": gpt_oss_tensors}


def _inspection(run: dict[str, Any]) -> Inspection:
    cfg = run["config"]
    container = run.get("container", "safetensors")
    tensors = TENSOR_TABLES[run["tensors"]](cfg) if run.get("tensors") else None
    size = run.get("weights_bytes")
    if tensors is not None:
        size = sum(t.nbytes or 0 for t in tensors.values())
    experts = cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts")
    ins = Inspection(path=run["model"], container=container, size_bytes=size,
                     model_type=cfg.get("model_type"), num_layers=cfg.get("num_hidden_layers"),
                     hidden_size=cfg.get("hidden_size"), num_attention_heads=cfg.get("num_attention_heads"),
                     num_kv_heads=cfg.get("num_key_value_heads"), head_dim=cfg.get("head_dim"),
                     vocab_size=cfg.get("vocab_size"), context_length=cfg.get("max_position_embeddings"),
                     dtype=None if container == "gguf" else cfg.get("torch_dtype"),
                     intermediate_size=cfg.get("intermediate_size"), moe=bool(experts),
                     num_experts=experts, num_experts_used=cfg.get("num_experts_per_tok"),
                     quantization=Quantization(method=run.get("quantization", "none")))
    ins.shape = shape_from(ins, config=cfg, tensors=tensors)
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
    if kind == "weights_gib":
        held = est.weights_device_bytes
        return Row(run, est, value, held / GIB if held is not None else None, "GiB")
    if kind == "buffers_mib":
        return Row(run, est, value, _buffers_mib(est), "MiB")
    if kind == "peak_gb":
        return Row(run, est, value, est.total_bytes / 1e9, "GB")
    raise ValueError(f"{run['id']}: unknown measured kind {kind!r}")


def rows() -> list[Row]:
    return [row(run) for run in load_runs()]


# -------------------------------------------------------------------------------------------- rendering
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
    if run.get("kv_cache_dtype"):
        out.append(f"KV {run['kv_cache_dtype']}")
    out += [f"{k} {str(v).lower() if isinstance(v, bool) else v}" for k, v in s.get("knobs", {}).items()]
    return ", ".join(out)


def _link(run: dict[str, Any]) -> str:
    return f"[{run['id']}]({run['source']})"


def _error_cell(r: Row) -> str:
    if r.kind == "refused":
        return "ok" if r.ok else "**fits**"
    if r.error is None:
        return "n/a"
    gib = ""
    if r.kind == "kv_pool_gib" and r.ours is not None and r.measured is not None:
        gib = f" ({r.ours - r.measured:+.2f} GiB)"
    return f"{r.error:+.1%}{gib}"


def _pools(table: list[Row], split: str) -> list[str]:
    group = [r for r in table if r.split == split and r.kind != "weights_gib"]
    lines = ["| run | engine | GPU | model | settings | measured | qcheck | error |", "|---|---|---|---|---|---|---|---|"]
    for r in group:
        run = r.run
        lines.append(f"| {_link(run)} | {run['engine']} {run['version']} | {run['gpu']} | {run['model']} | "
                     f"{_settings(run)} | {_what(r)}: {_measured_cell(r)} | {_ours_cell(r)} | {_error_cell(r)} |")
    errors = [abs(r.error) for r in group if r.error is not None and r.kind != "refused"]
    pools = [abs(r.ours - r.measured) for r in group if r.kind == "kv_pool_gib" and r.ours is not None
             and r.measured is not None]
    refused = [r for r in group if r.kind == "refused"]
    engines = sorted({r.run["engine"] for r in group})
    gpus = sorted({r.run["gpu"] for r in group})
    versions = sorted({f"{r.run['engine']} {r.run['version']}" for r in group})
    summary = (f"{len(group)} {split} runs ({', '.join(engines)}; {len(gpus)} GPU types: {', '.join(gpus)}; "
               f"{len(versions)} engine versions); largest error {max(errors, default=0.0):.1%}, mean "
               f"{sum(errors) / max(1, len(errors)):.1%}")
    if pools:
        summary += f"; KV pools within {max(pools):.2f} GiB"
    if refused:
        summary += f"; {sum(r.ok for r in refused)} of {len(refused)} runs that did not start judged \"does not fit\""
    return [*lines, "", summary + "."]


def _largest_by_split(errors: list[float | None], group: list[Row]) -> list[str]:
    """One line per split: how many runs and the largest relative error."""
    out = []
    for split in SPLITS:
        errs = [abs(e) for e, r in zip(errors, group, strict=True) if r.split == split and e is not None]
        if errs:
            out.append(f"{split}: {len(errs)} runs, largest error {max(errs):.1%}.")
    return out


def _weights(table: list[Row]) -> list[str]:
    lines = ["| run | split | engine | GPU | model | tp | measured per GPU | qcheck per GPU | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    group = [r for r in table if r.weights_measured is not None]
    for r in group:
        run = r.run
        err = f"{r.weights_error:+.1%}" if r.weights_error is not None else "n/a"
        ours = f"{r.weights_ours:.2f} GiB" if r.weights_ours is not None else "?"
        lines.append(f"| {_link(run)} | {r.split} | {run['engine']} {run['version']} | {run['gpu']} | {run['model']} | "
                     f"{run.get('settings', {}).get('tp', 1)} | {r.weights_measured:g} GiB | {ours} | {err} |")
    return [*lines, "", *_largest_by_split([r.weights_error for r in group], group)]


def _concurrency(table: list[Row]) -> list[str]:
    lines = ["| run | split | model | settings | vLLM's figure | qcheck | error |", "|---|---|---|---|---|---|---|"]
    group = [r for r in table if r.concurrency_measured is not None]
    for r in group:
        run = r.run
        err = f"{r.concurrency_error:+.1%}" if r.concurrency_error is not None else "n/a"
        ours = f"{r.concurrency_ours:.2f}x" if r.concurrency_ours is not None else "?"
        lines.append(f"| {_link(run)} | {r.split} | {run['model']} | {_settings(run)} | "
                     f"{r.concurrency_measured:g}x | {ours} | {err} |")
    return [*lines, "", *_largest_by_split([r.concurrency_error for r in group], group)]


def render(table: list[Row] | None = None) -> str:
    """The validation tables in Markdown (what docs/memory.md holds between the markers)."""
    table = rows() if table is None else table
    held = sum(r.split == "held-out" for r in table)
    out = [f"{len(table)} runs, {held} held out ({held / max(1, len(table)):.0%}); recomputed by "
           "tests/test_memory_validation.py from tests/data/memory_validation.toml.", "",
           "**Held-out runs** (no constant was chosen on them; target: the KV pool within 5 % or 0.5 GiB, whichever "
           "is larger, the rest within 5 %):", "", *_pools(table, "held-out"), "",
           "**Fitted runs** (each informed a constant named in the engine's `[memory.sources]`; target 5 %):", "",
           *_pools(table, "fitted"), "",
           "**Weights as the engine holds them** (vLLM's \"Model loading took\", per GPU; target 2 %):", "",
           *_weights(table), "",
           "**vLLM's maximum concurrency** (\"Maximum concurrency for N tokens per request\": the KV pool's tokens / "
           "the context; qcheck: `kv_available_tokens / context`):", "", *_concurrency(table)]
    return "\n".join(out) + "\n"


def docs_table(text: str) -> str | None:
    """The table docs/memory.md holds between the markers (None: no markers)."""
    if START not in text or END not in text:
        return None
    return text.split(START, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def update_docs(path: Path = DOCS) -> bool:
    """Write the rendered tables into docs/memory.md between the markers; True when it changed."""
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
