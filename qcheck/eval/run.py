"""Orchestration of ``qcheck eval``: tasks -> reference (cached) -> candidates -> metrics -> gate -> EvalResult.

Why this shape (docs/design.md "eval" data flow): the reference is computed once per (model, tasks, tokenizer,
settings) and cached on disk; each candidate is then streamed item by item against the cached rows, one
candidate loaded at a time, so N candidates cost N candidate passes and memory stays bounded by one item.

Public API (also used by ``qcheck gate``)::

    from qcheck.eval.run import EvalConfig, CandidateSpec, run_eval
    from qcheck.eval.gate import Thresholds
    result = run_eval(EvalConfig(reference="./bf16", candidates=["q4=./m.Q4_0.gguf"],
                                 thresholds=Thresholds.from_mapping({"tier": "good"})))
    result.exit_code, result.to_json()
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qcheck.errors import InputError, UsageError
from qcheck.eval import stats
from qcheck.eval.cache import (
    KIND_FULL,
    KIND_TOPK,
    CacheInfo,
    CacheReader,
    CacheWriter,
    cache_key,
    default_cache_dir,
    precision_note,
)
from qcheck.eval.gate import GateOutcome, Thresholds, evaluate, resolution_warnings
from qcheck.eval.runners import BACKENDS, DEFAULT_BACKEND, RunnerContext, build_runner
from qcheck.eval.runners.base import CandidateRunner, VocabInfo, check_same_vocab
from qcheck.eval.tasks import TaskSet, load_tasks
from qcheck.limits import DEFAULT_LIMITS, Limits

EVAL_SCHEMA = "qcheck.eval/1"
#: bumps when tokenisation or scoring changes, so old cache entries are not reused
ENCODER_VERSION = 2  # 2: long text items in sliding windows instead of truncated
#: per-token KLD histogram bin edges (log-spaced, nats) for the report plots
HIST_EDGES = [0.0, *[10 ** (e / 4) for e in range(-24, 5)]]
#: dtypes ``--noise-floor`` can load the reference in
NOISE_FLOOR_DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class CandidateSpec:
    """A candidate: ``target`` built by a named backend (default ``simulated``: a checkpoint path dequantised
    into the reference architecture), or a ready ``runner`` (engine backends built by the caller, tests)."""

    name: str
    path: str | None = None
    runner: CandidateRunner | None = None
    backend: str = DEFAULT_BACKEND

    @classmethod
    def parse(cls, text: str) -> CandidateSpec:
        """``PATH``, ``NAME=PATH``, ``BACKEND:TARGET`` or ``NAME=BACKEND:TARGET``.

        ``BACKEND`` is recognised only when it names a registered backend (``qcheck.eval.runners.BACKENDS``);
        a ``=`` or ``:`` inside an existing path is kept as part of the path.
        """
        name: str | None = None
        target = text
        if "=" in text and not os.path.exists(text):
            name, _, target = text.partition("=")
            name, target = name.strip(), target.strip()
            if not name or not target:
                raise UsageError(f"--candidate {text!r}: use PATH, NAME=PATH or NAME=BACKEND:TARGET")
        backend = DEFAULT_BACKEND
        head, sep, rest = target.partition(":")
        if sep and head in BACKENDS and not os.path.exists(target):
            backend, target = head, rest
        if name is None:
            p = Path(target.rstrip("/"))
            name = (p.stem if p.suffix in (".gguf", ".safetensors") else p.name) or target
        return cls(name=name, path=target, backend=backend)


@dataclass
class EvalConfig:
    reference: str
    candidates: list[CandidateSpec | str]
    tasks: list[str] = field(default_factory=list)
    reference_dtype: str = "float32"
    device: str = "cpu"
    cache_dir: str | None = None
    use_cache: bool = True
    cache_topk: int | None = None
    max_length: int = 512
    #: sliding-window step for text items longer than ``max_length`` (default ``max_length // 2``)
    stride: int | None = None
    #: "sliding" (every token scored once) or "chunks" (llama-perplexity's non-overlapping windows)
    windows: str = "sliding"
    thresholds: Thresholds = field(default_factory=Thresholds)
    activation_quant: bool = False
    choice_metric: str = "acc"
    bootstrap: int = stats.DEFAULT_BOOTSTRAP
    seed: int = stats.DEFAULT_SEED
    max_items: int | None = None
    limits: Limits = DEFAULT_LIMITS
    progress: bool = False
    #: also score the reference itself in this dtype against the cached reference (``--noise-floor``); never gated
    noise_floor: str | None = None
    #: with an endpoint ``reference`` (http(s)://...): the local folder with its tokenizer and config.json
    reference_files: str | None = None
    #: ``--max-memory``: accelerate's per-device budget for ``device="auto"`` (``{0: "20GiB", "cpu": "64GiB"}``)
    max_memory: dict[str | int, str] | None = None


@dataclass
class CandidateResult:
    name: str
    backend: str
    path: str | None
    metrics: dict[str, Any]
    intervals: dict[str, Any]
    gate: GateOutcome
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    per_task: dict[str, dict[str, Any]] = field(default_factory=dict)
    distribution: dict[str, Any] = field(default_factory=dict)
    flipped: list[dict[str, Any]] = field(default_factory=list)
    quantization: dict[str, Any] | None = None
    #: simulated candidates: what was done about activation quantisation (None for engine backends)
    activations: str | None = None
    #: wall time, tokens/s and peak RSS of this candidate (``qcheck.eval.perf.Phase.to_json``)
    performance: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "backend": self.backend, "path": self.path, "quantization": self.quantization,
                "activations": self.activations,
                "metrics": self.metrics, "intervals": self.intervals, "gate": self.gate.to_json(),
                "per_task": self.per_task, "distribution": self.distribution, "flipped": self.flipped,
                "notes": self.notes, "warnings": self.warnings, "performance": self.performance}


@dataclass
class EvalResult:
    """The ``qcheck.eval/1`` record; exit code 0 when every candidate passes its gate, else 1."""

    reference: dict[str, Any]
    tasks: dict[str, Any]
    candidates: list[CandidateResult]
    cache: CacheInfo
    thresholds: Thresholds
    settings: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    kind: str = "eval"
    #: ``--noise-floor``: the reference in another dtype, scored like a candidate; not part of the gate
    noise_floor: dict[str, Any] | None = None
    #: the whole run: wall time, the reference pass (None on a cache hit), peak RSS
    performance: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return 0 if all(c.gate.passed for c in self.candidates) else 1

    def to_json(self) -> dict[str, Any]:
        return _finite_json(self._to_json())

    def _to_json(self) -> dict[str, Any]:
        return {"schema": EVAL_SCHEMA, "reference": self.reference, "tasks": self.tasks,
                "thresholds": self.thresholds.to_json(), "settings": self.settings,
                "cache": self.cache.to_json(), "candidates": [c.to_json() for c in self.candidates],
                "noise_floor": self.noise_floor, "performance": self.performance, "notes": self.notes,
                "exit_code": self.exit_code}


# ---------------------------------------------------------------------------------------------- helpers
def _finite_json(value: Any) -> Any:
    """Strict JSON: NaN and infinities (a broken candidate's metrics) become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def model_fingerprint(path: str, limits: Limits = DEFAULT_LIMITS) -> str:
    """Hash of config.json, generation_config.json and each weight file (safetensors header + size + mtime,
    name/size/mtime for other formats): cheap, and any change to the weights files invalidates the cache."""
    root = Path(path)
    h = hashlib.sha256()
    try:
        h.update((root / "config.json").read_bytes())
        for f in sorted(root.iterdir()):
            if not f.is_file():
                continue
            if f.suffix == ".safetensors":
                with open(f, "rb") as fh:
                    raw = fh.read(8)
                    n = int.from_bytes(raw, "little") if len(raw) == 8 else 0
                    if not 0 < n <= limits.max_safetensors_header:
                        raise InputError(f"safetensors header length {n} is out of bounds", path=str(f))
                    h.update(f.name.encode() + b"\0" + fh.read(n))
                st = f.stat()  # same header, retrained weights: size/mtime still tell them apart
                h.update(f"{st.st_size}\0{st.st_mtime_ns}".encode())
            elif f.name == "generation_config.json":
                h.update(f.read_bytes())
            elif f.suffix in (".bin", ".pt", ".pth", ".gguf", ".npz", ".ckpt"):
                st = f.stat()
                h.update(f"{f.name}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    except OSError as exc:
        raise InputError(f"cannot read the reference model files: {exc.strerror or exc}", path=path) from None
    return h.hexdigest()


class _Progress:
    """A rich progress bar on stderr when it is a terminal; periodic lines otherwise (``eval/progress.py``)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and sys.stderr.isatty()
        self._p: Any = None  # a rich Progress while shown (rich is imported only then)
        self._task = None
        self._lines = None
        if enabled and not self.enabled:
            from qcheck.eval.progress import LineProgress

            self._lines = LineProgress()

    def start(self, label: str, total: int) -> None:
        if self._lines is not None:
            self._lines.start(label, total)
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.stop()
        self._p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                           console=Console(stderr=True), transient=True)
        self._p.start()
        self._task = self._p.add_task(label, total=total)

    def advance(self, n: int = 1) -> None:
        if self._lines is not None:
            self._lines.advance(n)
        if self._p is not None:
            self._p.advance(self._task, n)

    def stop(self) -> None:
        if self._lines is not None:
            self._lines.stop()
        if self._p is not None:
            self._p.stop()
            self._p = None


def _quiet_transformers(transformers: Any) -> None:
    """No weight-loading progress bars or advisory warnings from transformers on our stderr."""
    try:
        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except AttributeError:  # pragma: no cover - very old transformers
        pass


def _histogram(values: Any) -> dict[str, Any]:
    import numpy as np

    v = np.asarray(values, dtype=np.float64)
    edges = np.array([*HIST_EDGES, math.inf])
    clipped = np.maximum(v, 0.0)
    counts, _ = np.histogram(clipped, bins=edges)
    return {"edges": [float(e) for e in HIST_EDGES], "counts": [int(c) for c in counts],
            "negative": int((v < 0).sum()), "unit": "nats"}


# ---------------------------------------------------------------------------------------------- the run
def run_eval(config: EvalConfig, *, on_event: Callable[[str], None] | None = None) -> EvalResult:
    """Run a whole evaluation; QcheckErrors (exit 2) for bad input, otherwise an EvalResult."""
    from qcheck.eval.encode import Encoder, chunk_scored
    from qcheck.eval.runners.reference import load_tokenizer, torch_modules
    from qcheck.eval.safe_load import NO_CODE

    if not config.candidates:
        raise UsageError("give at least one --candidate")
    if config.choice_metric not in ("acc", "acc_norm", "acc_bytes"):
        raise UsageError(f"unknown choice metric {config.choice_metric!r}")
    if config.cache_topk is not None and config.cache_topk < 1:
        raise UsageError("--cache-topk must be at least 1")
    if config.bootstrap < 100:
        raise UsageError("--bootstrap needs at least 100 replicates")
    if config.noise_floor is not None and config.noise_floor not in NOISE_FLOOR_DTYPES:
        raise UsageError(f"--noise-floor-dtype must be one of {', '.join(NOISE_FLOOR_DTYPES)}")
    if config.device == "cuda":
        from qcheck.eval.runners.reference import resolve_device

        resolve_device("cuda")  # before any work, even when the reference is cached: one line, exit 2
    if config.max_memory and config.device != "auto":
        raise UsageError("--max-memory places the model with accelerate's device_map: use --device auto")
    if config.noise_floor == config.reference_dtype:
        raise UsageError(f"--noise-floor-dtype {config.noise_floor} is the reference's own dtype: pick another "
                         "(the noise floor compares the reference with itself in a different precision)")
    specs = [CandidateSpec.parse(c) if isinstance(c, str) else c for c in config.candidates]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise UsageError(f"candidate names must be unique: {', '.join(names)}")
    for s in specs:
        if s.runner is None and s.backend == DEFAULT_BACKEND and (not s.path or not os.path.exists(s.path)):
            raise InputError("no such file or directory", path=s.path or s.name)
    from qcheck.eval.remote_reference import RemoteReference, is_endpoint
    from qcheck.eval.safe_load import check_reference, refuse_custom_code

    remote = RemoteReference.parse(config.reference, config.reference_files) if is_endpoint(config.reference) \
        else None
    if remote is None and config.reference_files:
        raise UsageError("--reference-files is for an endpoint --reference (http(s)://...); a local reference "
                         "directory has its own files")
    if remote is not None and config.noise_floor:
        raise UsageError("--noise-floor loads the reference's weights in another dtype: it needs a local reference "
                         "directory, not an endpoint")
    ref_dir = remote.files if remote is not None else config.reference
    if remote is not None:
        refuse_custom_code(ref_dir, "reference", config.limits)
    else:
        check_reference(config.reference, config.limits)  # before transformers reads anything
    for s in specs:
        if s.runner is None and s.path and os.path.isdir(s.path):
            refuse_custom_code(s.path, f"candidate {s.name}", config.limits)

    from qcheck.eval.perf import Phase

    run_phase = Phase()
    tasks: TaskSet = load_tasks(config.tasks)
    if config.max_items is not None:
        tasks.items = tasks.items[: config.max_items]
    torch, transformers = torch_modules()
    _quiet_transformers(transformers)
    log = on_event or (lambda _msg: None)
    progress = _Progress(config.progress)

    tokenizer = load_tokenizer(ref_dir)
    encoder = Encoder(tokenizer, max_length=config.max_length, stride=config.stride, windows=config.windows)
    encoded = [encoder.encode_item(item) for item in tasks.items]
    truncated = sum(1 for e in encoded if e.truncated)
    windowed = [e.windows for e in encoded if e.windowed]
    notes: list[str] = []
    if truncated:
        notes.append(f"{truncated} choice/generate item(s) were left-truncated to the {config.max_length}-token "
                     "limit")
    if windowed and config.windows == "chunks":
        notes.append(f"{len(windowed)} text item(s) longer than {config.max_length} tokens were scored in "
                     f"{sum(windowed)} llama-perplexity chunks (non-overlapping, each scoring its last "
                     f"{chunk_scored(config.max_length)} tokens; {encoder.unscored_tokens} token(s) after "
                     "the last whole chunk not scored)")
    elif windowed:
        notes.append(f"{len(windowed)} text item(s) longer than {config.max_length} tokens were scored in "
                     f"{sum(windowed)} sliding windows (stride {encoder.stride}: each window scores only its last "
                     f"{encoder.stride} tokens, with at least {config.max_length - encoder.stride} tokens of context)")

    kind = KIND_TOPK if config.cache_topk else KIND_FULL
    ref_runner: Any = None
    remote_kind = ""
    if remote is not None:
        from qcheck.eval.remote_reference import connect

        ref_config = transformers.AutoConfig.from_pretrained(ref_dir, **NO_CODE) \
            if (Path(ref_dir) / "config.json").is_file() else None
        if ref_config is None and any(s.runner is None and s.backend == DEFAULT_BACKEND for s in specs):
            raise UsageError("simulated candidates are dequantised into the reference's architecture: put its "
                             "config.json into --reference-files")
        longest = max((len(r.input_ids) for e in encoded for r in e.score), default=1)
        ref_runner, remote_kind = connect(remote, tokenizer, remote.vocab(tokenizer, ref_config, encoder.add_bos),
                                          longest, config.limits)
        kind = "endpoint"
    key_parts = {
        "model": remote.fingerprint(ref_runner) if remote is not None
        else model_fingerprint(config.reference, config.limits), "tasks": tasks.sha256,
        "max_items": config.max_items, "tokenizer": encoder.fingerprint(), "dtype": config.reference_dtype,
        "device": config.device, "max_length": config.max_length, "stride": encoder.stride,
        **({"windows": config.windows} if config.windows != "sliding" else {}), "kind": kind, "topk": config.cache_topk,
        "encoder": ENCODER_VERSION, "torch": torch.__version__.split("+")[0].rsplit(".", 1)[0],
        "transformers": transformers.__version__.rsplit(".", 1)[0],
    }
    key = cache_key(key_parts)
    tmp_root: tempfile.TemporaryDirectory[str] | None = None
    if config.use_cache:
        root = Path(config.cache_dir) if config.cache_dir else default_cache_dir()
        root = root / "eval"
    else:
        tmp_root = tempfile.TemporaryDirectory(prefix="qcheck-eval-")
        root = Path(tmp_root.name)
    try:
        reader = CacheReader.open_if_complete(root, key) if config.use_cache else None
        hit = reader is not None
        ref_json: dict[str, Any] = {"path": config.reference, "dtype": config.reference_dtype, "device": config.device,
                                    "fingerprint": key_parts["model"][:16], "tokenizer": key_parts["tokenizer"][:16]}
        if remote is None:
            ref_config = transformers.AutoConfig.from_pretrained(config.reference, **NO_CODE)
        else:
            ref_json.update(_remote_json(remote, ref_runner, ref_dir))
            notes.extend(remote.notes)
        ref_json["architecture"] = (getattr(ref_config, "architectures", None) or [None])[0]
        ref_json["model_type"] = getattr(ref_config, "model_type", None)
        written = 0
        ref_phase: Phase | None = None
        kept: tuple[Any, str] | None = None  # the reference model, cast for the noise floor
        if reader is None:
            log("computing the reference")
            ref_phase = Phase()
            if remote is not None:
                final, written = _compute_remote_reference(ref_runner, remote_kind, encoded, encoder, root, key,
                                                           key_parts, progress)
                ref_json["requests"] = written
                ref_phase.tokens = sum(len(r.input_ids) for e in encoded for r in e.score)
                from qcheck.eval.remote_reference import runner_notes

                notes.extend(runner_notes(ref_runner))
            else:
                final, written, ref_json["forward_calls"], ref_phase.tokens, kept = _compute_reference(
                    config, encoded, encoder, tokenizer, root, key, kind, key_parts, progress, ref_phase)
            ref_phase.scored_tokens = sum(r.n_rows for e in encoded for r in e.score)
            ref_phase.done()
            reader = CacheReader(final)
        if remote is not None:
            from qcheck.eval.remote_reference import label

            logprobs = "full" if reader.kind == KIND_FULL else "top-k"
            ref_json["endpoint"]["logprobs"] = logprobs
            ref_json["endpoint"]["top_k"] = None if logprobs == "full" else ref_runner.opts.top_k
            notes.append("reference log-probs: " + label("full" if logprobs == "full" else "topk",
                                                         ref_runner.opts.top_k))
        if reader.meta.get("placement"):
            ref_json["placement"] = reader.meta["placement"]  # device_map="auto": modules per device
        vocab_meta = reader.meta.get("vocab", {})
        ref_vocab = VocabInfo(vocab_size=int(vocab_meta.get("vocab_size", reader.vocab_size)),
                              bos_token_id=vocab_meta.get("bos_token_id"), add_bos=bool(vocab_meta.get("add_bos")),
                              eos_token_ids=tuple(vocab_meta.get("eos_token_ids") or ()))
        ref_json["vocab_size"] = ref_vocab.vocab_size
        ref_json["bos_token_id"] = ref_vocab.bos_token_id
        cache_info = CacheInfo(hit=hit, kind=reader.kind, path=str(reader.dir), key=key, topk=reader.topk,
                               persistent=config.use_cache, requests_written=written, bytes=reader.size,
                               precision=precision_note(reader.kind, reader.topk))

        results: list[CandidateResult] = []
        noise: dict[str, Any] | None = None
        try:
            if config.noise_floor and kept is not None:  # the reference model is still loaded: reuse it now
                log(f"noise floor: the reference in {config.noise_floor}")
                noise = _noise_floor(config, encoded, encoder, reader, ref_config, ref_vocab, progress, log, kept)
                kept = None
            for spec in specs:
                results.append(_run_candidate(spec, config, encoded, encoder, reader, ref_config, ref_vocab,
                                              progress, log))
            if config.noise_floor and noise is None:
                from qcheck.eval.runners.simulated import drop_skeleton

                drop_skeleton()  # the last simulated candidate's model: never two models at once
                log(f"noise floor: the reference in {config.noise_floor}")
                noise = _noise_floor(config, encoded, encoder, reader, ref_config, ref_vocab, progress, log)
        finally:
            cache_info.requests_read = reader.reads
            reader.close()
            from qcheck.eval.runners.simulated import drop_skeleton

            drop_skeleton()
    finally:
        if tmp_root is not None:
            tmp_root.cleanup()

    settings = {"max_length": config.max_length, "stride": encoder.stride, "windows": config.windows,
                "choice_metric": config.choice_metric,
                "bootstrap": config.bootstrap, "seed": config.seed, "activation_quant": config.activation_quant,
                "max_items": config.max_items, "candidate_dtype": config.reference_dtype}
    run_phase.done()
    performance = {"wall_seconds": run_phase.seconds,
                   "reference": ref_phase.to_json() if ref_phase is not None else None,
                   "peak_rss_bytes": max([p for p in (run_phase.peak_rss, ref_phase and ref_phase.peak_rss,
                                                      *(c.performance.get("peak_rss_bytes") for c in results))
                                          if isinstance(p, int)], default=None)}
    return EvalResult(reference=ref_json, tasks=tasks.to_json() | {"tokens_per_item_limit": config.max_length,
                                                         "windowed_items": len(windowed),
                                                         "windows": sum(windowed),
                                                         "unscored_tokens": encoder.unscored_tokens,
                                                         "truncated_items": truncated},
                      candidates=results, cache=cache_info, thresholds=config.thresholds, settings=settings,
                      notes=notes, noise_floor=noise, performance=performance)


def _compute_reference(config: EvalConfig, encoded: list[Any], encoder: Any, tokenizer: Any, root: Path, key: str,
                       kind: str, key_parts: dict[str, Any], progress: _Progress,
                       phase: Any) -> tuple[Path, int, int, int, tuple[Any, str] | None]:
    """Run the reference over every request, streaming its rows into a new cache entry.

    Returns (the committed entry's directory, requests written, forward calls, tokens through the model, and with
    ``--noise-floor`` the same model cast in place to the noise floor's dtype with its input device, so the
    noise floor does not load it again; else None). Otherwise the model is freed before returning, so
    candidates never share memory with it.
    """

    from qcheck.eval.runners.reference import TransformersRunner, load_reference, placement, vocab_info

    model, _, device = load_reference(config.reference, config.reference_dtype, config.device, config.max_memory)
    where = placement(model)
    phase.loaded()
    ref_vocab = vocab_info(model, tokenizer, encoder.add_bos)
    runner = TransformersRunner(model, ref_vocab, name="reference", device=device)
    del model
    meta = {"reference": config.reference, "created_by": "qcheck eval", "parts": key_parts, "placement": where,
            "vocab": {"vocab_size": ref_vocab.vocab_size, "bos_token_id": ref_vocab.bos_token_id,
                      "add_bos": ref_vocab.add_bos, "eos_token_ids": list(ref_vocab.eos_token_ids)}}
    writer = CacheWriter(root, key, kind, ref_vocab.vocab_size, config.cache_topk, meta)
    written = 0
    requests = [r for e in encoded for r in e.score]
    tokens = sum(len(r.input_ids) - 1 for r in requests)
    progress.start("reference", len(requests) + sum(1 for e in encoded if e.generate))
    try:
        for index, start, scores in score_blocks(runner, requests):
            writer.add_scores(requests[index].key, scores)
            if start + scores.n_rows == requests[index].n_rows:
                written += 1
                progress.advance()
        for enc in encoded:
            if enc.generate is not None:
                gen = next(iter(runner.generate([enc.generate])))
                gen.text = encoder.decode(gen.token_ids)
                tokens += len(enc.generate.prompt_ids) + len(gen.token_ids)
                writer.add_generation(enc.generate.key, gen)
                written += 1
                progress.advance()
        final = writer.commit()
    except BaseException:
        writer.abort()
        raise
    finally:
        progress.stop()
        calls = runner.forward_calls
        model = runner.model
        runner.close()
    kept = None
    # reused only when it holds the checkpoint's exact values: a float32 load casts to the noise dtype as a fresh
    # load in that dtype would; a model already rounded to fp16/bf16 would not (not accelerate-dispatched either)
    if config.noise_floor and config.reference_dtype == "float32" and not getattr(model, "hf_device_map", None):
        from qcheck.eval.runners.reference import resolve_dtype

        kept = (model.to(dtype=resolve_dtype(config.noise_floor)), device)
    del model
    return final, written, calls, tokens, kept


def _remote_json(remote: Any, runner: Any, files: str) -> dict[str, Any]:
    """What the report says about an endpoint reference (``reference.endpoint``); its dtype is the server's."""
    return {"path": remote.target.split("#", 1)[0], "files": files, "dtype": None, "device": None,
            "endpoint": {"flavour": runner.flavour, "model": runner.model, "mode": runner.mode,
                         "prompt_format": runner.prompt_format}}


def _compute_remote_reference(runner: Any, kind: str, encoded: list[Any], encoder: Any, root: Path, key: str,
                              key_parts: dict[str, Any], progress: _Progress) -> tuple[Path, int]:
    """The endpoint reference's rows into a new cache entry (``qcheck.eval.remote_reference``)."""
    from qcheck.eval.remote_reference import write_reference

    vocab = runner.reference
    meta = {"reference": runner.opts.url, "created_by": "qcheck eval", "parts": key_parts,
            "vocab": {"vocab_size": vocab.vocab_size, "bos_token_id": vocab.bos_token_id, "add_bos": vocab.add_bos,
                      "eos_token_ids": list(vocab.eos_token_ids)}}

    def make_writer(cache_kind: str, topk: int | None) -> CacheWriter:
        return CacheWriter(root, key, cache_kind, vocab.vocab_size, topk, meta)

    progress.start("reference (endpoint)", sum(len(e.score) + (1 if e.generate else 0) for e in encoded))
    try:
        writer, _, written = write_reference(runner, kind, encoded, encoder, make_writer, progress)
    finally:
        progress.stop()
    return writer.commit(), written


def _run_candidate(spec: CandidateSpec, config: EvalConfig, encoded: list[Any], encoder: Any, reader: CacheReader,
                   ref_config: Any, ref_vocab: VocabInfo, progress: _Progress,
                   log: Callable[[str], None]) -> CandidateResult:

    import numpy as np

    from qcheck.eval.metrics import CandidateMetrics
    from qcheck.eval.perf import Phase
    from qcheck.eval.plausibility import (
        implausibility,
        is_unquantised,
        refuse,
        tensor_errors,
        uniform_error,
    )

    phase = Phase()
    notes: list[str] = []
    quantization: dict[str, Any] | None = None
    activations: str | None = None
    runner = spec.runner
    if spec.backend != DEFAULT_BACKEND or runner is not None:
        from qcheck.eval.runners.simulated import drop_skeleton

        drop_skeleton()  # a kept simulated model is not needed for this one: free it first
    if runner is None:
        log(f"loading candidate {spec.name}")
        device = "cuda" if config.device in ("cuda", "auto") and _cuda() else "cpu"
        context = RunnerContext(reference_path=config.reference, reference_config=ref_config,
                                reference_vocab=ref_vocab, tokenizer=encoder.tok, dtype=config.reference_dtype,
                                device=device, activation_quant=config.activation_quant, limits=config.limits,
                                max_length=config.max_length)
        built = build_runner(spec.backend, spec.name, spec.path or "", context)
        runner = built.runner
        notes.extend(built.notes)
        quantization, activations = built.quantization, built.activations
        phase.loaded()
    try:
        check_same_vocab(ref_vocab, runner.vocab(), spec.name)
        if hasattr(runner, "prefetch"):  # endpoint runners: all requests concurrently, resumable
            runner.prefetch(encoded)
        acc = CandidateMetrics(choice_metric=config.choice_metric, n_boot=config.bootstrap, seed=config.seed)
        skipped = {"text": 0, "choice": 0, "generate": 0}
        confidence: list[np.ndarray] = []
        progress.start(f"candidate {spec.name}", sum(len(e.score) + (1 if e.generate else 0) for e in encoded))
        try:
            phase.tokens = _score_candidate(spec.name, runner, encoded, encoder, reader, acc, skipped, confidence,
                                            progress)
        finally:
            progress.stop()
        notes.extend(getattr(runner, "notes", None) or [])
        for kind_name, count in skipped.items():
            if count:
                notes.append(f"{count} {kind_name} item(s) skipped: the {runner.backend} backend cannot "
                             + ("return prompt log-probs" if kind_name != "generate" else "generate"))
        phase.done()
        metrics, intervals = acc.summary()
        phase.scored_tokens = int(metrics.get("tokens_scored") or 0)
        positions = np.concatenate(confidence) if confidence else np.zeros(0)
        reference_confidence = float(positions.mean()) if positions.size else None
        metrics["reference_top1_probability"] = reference_confidence
        reasons = implausibility(metrics, reference_confidence, is_unquantised(quantization))
        extreme_warning = None
        if reasons:
            model = getattr(runner, "model", None)
            errors = tensor_errors(config.reference_files or config.reference, model) \
                if model is not None and spec.backend == "simulated" \
                else []
            median = uniform_error(errors) if not is_unquantised(quantization) else None
            if median is None:
                raise refuse(spec.name, reasons, errors[:3])
            extreme_warning = (f"extreme loss ({'; '.join(reasons)}), but every tensor is about equally far from the "
                               f"reference (median relative RMS error {median:.3g}): this is what the format does to "
                               "these weights, not a loading error")
        if metrics.get("kld_kind") == "lower-bound":
            notes.append("KL divergence is the bucketed lower bound over top-k sets (docs/research/evals.md §5.7)")
        gate = evaluate(config.thresholds, metrics, intervals)
        warnings = resolution_warnings(config.thresholds, metrics, intervals)
        if extreme_warning:
            warnings.append(extreme_warning)
        flipped = [{"id": o.id, "task": o.task, "direction": "C->I" if o.ref_correct else "I->C",
                    "reference": o.ref_output, "candidate": o.cand_output}
                   for o in acc.items if o.ref_correct != o.cand_correct][:200]
        distribution = _histogram(acc.token_arrays()["kld"]) if metrics.get("tokens_scored") else {}
        return CandidateResult(name=spec.name, backend=runner.backend, path=spec.path, metrics=metrics,
                               intervals=intervals, gate=gate, notes=notes, warnings=warnings,
                               per_task=acc.per_task(), distribution=distribution, flipped=flipped,
                               quantization=quantization, activations=activations, performance=phase.to_json())
    finally:
        if spec.runner is None:
            runner.close()


def score_blocks(runner: Any, requests: list[Any]) -> Iterator[tuple[int, int, Any]]:
    """(request index, first row, TokenScores) blocks: the runner's own ``score_blocks`` when it has one (rows
    of a long request in bounded blocks), else each request's whole rows from ``score``."""
    if hasattr(runner, "score_blocks"):
        yield from runner.score_blocks(requests)
        return
    for index, scores in enumerate(runner.score(requests)):
        yield index, 0, scores


def _score_candidate(name: str, runner: CandidateRunner, encoded: list[Any], encoder: Any, reader: CacheReader,
                     acc: Any, skipped: dict[str, int], confidence: list[Any], progress: _Progress) -> int:
    """Stream the candidate's rows block by block against the cached reference rows; then the items' own
    outcomes (choice, generate) in task order, so the statistics do not depend on how requests were batched.
    Returns the tokens that went through the candidate (scored requests' inputs, prompts and generations)."""
    import numpy as np

    from qcheck.eval.metrics import compare_rows
    from qcheck.eval.plausibility import reference_top1_probability
    from qcheck.eval.runners.endpoint import present_rows

    caps = runner.capabilities
    owners: list[tuple[Any, int]] = []
    requests: list[Any] = []
    for enc in encoded:
        if enc.score and not caps.has_prompt_logprobs:
            skipped[enc.item.kind] += 1
            progress.advance(len(enc.score))
            continue
        for index, req in enumerate(enc.score):
            owners.append((enc, index))
            requests.append(req)
    tokens = sum(len(r.input_ids) - 1 for r in requests)
    ll_ref = np.zeros(len(requests))
    ll_cand = np.zeros(len(requests))
    for i, start, cand in score_blocks(runner, requests) if requests else ():
        enc, index = owners[i]
        req, item = requests[i], enc.item
        stop = start + cand.n_rows
        if stop > req.n_rows:
            raise InputError(f"candidate returned {stop} rows, the reference has {req.n_rows}",
                             where=f"candidate {name}, item {item.id}")
        ref = reader.rows(req.key, start, stop)
        if item.kind == "text" or index == item.answer:
            ref_p, cand_p, targets_p = present_rows(ref, cand, req.targets[start:stop])
            acc.add_rows(item.doc, compare_rows(ref_p, cand_p, targets_p, f"candidate {name}, item {item.id}"))
            confidence.append(reference_top1_probability(ref_p))
        ll_ref[i] += float(ref.target_logprobs.astype(np.float64).sum())
        ll_cand[i] += float(cand.target_logprobs.astype(np.float64).sum())
        if stop == req.n_rows:
            progress.advance()
    first = 0
    for enc in encoded:
        item = enc.item
        if enc.score and caps.has_prompt_logprobs:
            count = len(enc.score)
            if item.kind == "choice":
                acc.add_choice(item, ll_ref[first:first + count], ll_cand[first:first + count])
            first += count
        if enc.generate is not None:
            if not caps.can_generate:
                skipped["generate"] += 1
                progress.advance()
                continue
            ref_gen = reader.generation(enc.generate.key)
            cand_gen = next(iter(runner.generate([enc.generate])))
            tokens += len(enc.generate.prompt_ids) + len(cand_gen.token_ids)
            cand_text = cand_gen.text if cand_gen.text is not None else encoder.decode(cand_gen.token_ids)
            ref_text = ref_gen.text if ref_gen.text is not None else encoder.decode(ref_gen.token_ids)
            acc.add_generation(item, ref_gen, cand_gen, ref_text, cand_text)
            progress.advance()
    return tokens


def default_noise_floor_dtype(reference_dtype: str) -> str:
    """bfloat16 beside a float32 (or float16) reference, float16 beside a bfloat16 one."""
    return "float16" if reference_dtype == "bfloat16" else "bfloat16"


def _noise_floor(config: EvalConfig, encoded: list[Any], encoder: Any, reader: CacheReader, ref_config: Any,
                 ref_vocab: VocabInfo, progress: _Progress, log: Callable[[str], None],
                 loaded: tuple[Any, str] | None = None) -> dict[str, Any]:
    """The reference model itself, loaded in ``config.noise_floor`` (or ``loaded``: the reference model that
    computed the cache, cast to that dtype: the same weights, no second load), scored against the cached reference.

    Why: a KLD means little without the loss that mere precision causes on the same tasks; this row is that
    scale. It is measured with no thresholds and never changes the gate or the exit code.
    """
    from dataclasses import replace

    from qcheck.errors import QcheckError
    from qcheck.eval.runners.reference import TransformersRunner, load_reference, vocab_info

    dtype = config.noise_floor or default_noise_floor_dtype(config.reference_dtype)
    name = f"noise floor ({dtype})"
    if loaded is not None:
        model, device = loaded
    else:
        model, _, device = load_reference(config.reference, dtype, config.device, config.max_memory)
    runner = TransformersRunner(model, vocab_info(model, encoder.tok, encoder.add_bos), name=name, device=device)
    del model
    record: dict[str, Any] = {"name": name, "dtype": dtype, "reference_dtype": config.reference_dtype,
                              "backend": runner.backend,
                              "description": f"the reference model computing in {dtype}, scored against the "
                                             f"{config.reference_dtype} reference like a candidate; not gated"}
    try:
        quiet = replace(config, thresholds=Thresholds())
        result = _run_candidate(CandidateSpec(name=name, runner=runner), quiet, encoded, encoder, reader, ref_config,
                                ref_vocab, progress, log)
    except QcheckError as exc:  # the noise floor never fails the run: say why it is missing
        record["error"] = str(exc)
        return record
    finally:
        runner.close()
    data = result.to_json()
    for key in ("metrics", "intervals", "per_task", "distribution", "notes", "warnings", "performance"):
        record[key] = data[key]
    return record


def _cuda() -> bool:
    from qcheck.eval.runners.reference import torch_modules

    torch, _ = torch_modules()
    return bool(torch.cuda.is_available())
