"""The reference side of ``qcheck eval``: its rows come from the on-disk cache, or are computed once by the local
transformers model or an endpoint serving it, and are then read back by every candidate.

Why one module: what identifies the reference's numbers (the cache key), how they are computed and how the report
describes them belong together; the candidates only see the resulting ``ReferenceSide``.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qcheck.errors import InputError, UsageError
from qcheck.eval.cache import (
    KIND_FULL,
    KIND_TOPK,
    CacheHome,
    CacheInfo,
    CacheReader,
    CacheWriter,
    cache_key,
    committed,
    default_cache_dir,
    entry_key,
    open_entry,
    precision_note,
)
from qcheck.eval.config import EvalConfig, Plan
from qcheck.eval.fingerprint import model_fingerprint
from qcheck.eval.perf import Phase
from qcheck.eval.runners import DEFAULT_BACKEND
from qcheck.eval.runners.base import VocabInfo, score_blocks
from qcheck.eval.runners.http import RunState, check_run_id, new_run_id
from qcheck.eval.supplement import Rescorer
from qcheck.eval.workload import Workload
from qcheck.limits import Limits

#: bumps when tokenisation or scoring changes, so old cache entries are not reused
ENCODER_VERSION = 2  # 2: long text items in sliding windows instead of truncated


@dataclass
class ReferenceSide:
    """The reference as the candidates see it: cached rows, its config and token space, and its report."""

    reader: CacheReader
    #: the transformers config of the reference (None for an endpoint without config.json)
    config: Any
    vocab: VocabInfo
    #: the report's ``reference`` record
    report: dict[str, Any]
    cache: CacheInfo
    #: the reference pass (None on a cache hit)
    phase: Phase | None = None
    #: with ``--noise-floor``: the reference model cast in place to the noise floor's dtype, and its input device
    kept: tuple[Any, str] | None = None
    notes: list[str] = field(default_factory=list)
    #: scores the reference again on token ids a candidate's server chose (``qcheck.eval.supplement``)
    rescorer: Rescorer | None = None
    #: where endpoint candidates keep their results (``qcheck.eval.runners.http.RunState``)
    endpoint_run: RunState | None = None


@dataclass
class _Endpoint:
    """A connected endpoint reference: its runner, the row kind asked for, and the config from its files."""

    runner: Any
    kind: str
    config: Any
    #: what identifies the served model in the cache key (``RemoteReference.fingerprint``)
    fingerprint: str


@dataclass(frozen=True)
class _Slot:
    """Where the reference's cache entry lives and what its key is made of."""

    root: Path
    key: str
    parts: dict[str, Any]
    kind: str
    auth_key: bytes


@contextlib.contextmanager
def cache_root(config: EvalConfig) -> Iterator[CacheHome]:
    """The cache's ``eval/`` folder with this user's cache key, or with ``--no-cache`` a temporary directory (removed
    afterwards) and a key made for this run; with the folder endpoint results of this run are kept in."""
    if config.use_cache:
        root = Path(config.cache_dir) if config.cache_dir else default_cache_dir()
        key, problem = entry_key()
        yield CacheHome(root / "eval", key, problem, endpoint_run=endpoint_run(config, root / "eval", key))
        return
    if config.resume:
        raise UsageError("--resume continues a run kept in the cache: it cannot be used with --no-cache")
    import secrets

    from qcheck.cache_auth import KEY_BYTES

    key = secrets.token_bytes(KEY_BYTES)
    with tempfile.TemporaryDirectory(prefix="qcheck-eval-") as tmp:
        yield CacheHome(Path(tmp), key, persistent=False, endpoint_run=RunState(None, "", key))


def endpoint_run(config: EvalConfig, root: Path, key: bytes) -> RunState:
    """Where this run keeps endpoint results: a new run folder, or with ``--resume RUN`` that run's (it must exist)."""
    if not config.resume:
        return RunState(root / "endpoints", check_run_id(config.run_id or new_run_id()), key)
    if not config.run_id:
        raise UsageError("--resume needs the id of the run to continue")
    state = RunState(root / "endpoints", check_run_id(config.run_id), key, resumed=True)
    assert state.folder is not None
    if not state.folder.is_dir():
        raise UsageError(f"--resume {config.run_id}: no such run in {state.folder.parent}")
    return state


def open_reference(config: EvalConfig, plan: Plan, work: Workload, home: CacheHome) -> ReferenceSide:
    """The reference's rows from the cache, computed first when the cache has no usable entry for them."""
    from qcheck.eval.runners.reference import torch_modules
    from qcheck.eval.safe_load import NO_CODE

    torch, transformers = torch_modules()
    endpoint = _connect(plan, work, config.limits, transformers, home.endpoint_run) if plan.remote is not None \
        else None
    slot = _slot(config, work, endpoint, home, (torch, transformers))
    notes: list[str] = [home.problem] if home.problem else []
    reader = open_entry(home, slot.key, notes)
    hit = reader is not None
    report: dict[str, Any] = {"path": config.reference, "dtype": config.reference_dtype, "device": config.device,
                              "fingerprint": slot.parts["model"][:16], "tokenizer": slot.parts["tokenizer"][:16]}
    if endpoint is None:
        ref_config = transformers.AutoConfig.from_pretrained(config.reference, **NO_CODE)
        from qcheck.eval.runners.reference import adapter_files, adapter_note

        adapter = adapter_note(config.reference, config.reference_adapter)
        if adapter:
            notes.append(adapter)
            report["adapter"] = {"files": adapter_files(config.reference), "applied": config.reference_adapter}
    else:
        assert plan.remote is not None
        ref_config = endpoint.config
        report.update(_remote_json(plan.remote, endpoint.runner, plan.ref_dir))
        notes.extend(plan.remote.notes)
    report["architecture"] = (getattr(ref_config, "architectures", None) or [None])[0]
    report["model_type"] = getattr(ref_config, "model_type", None)
    written, phase, kept = 0, None, None
    if reader is None:
        work.log("computing the reference")
        final, written, phase, kept = _compute(config, work, slot, endpoint, report)
        if endpoint is not None:
            from qcheck.eval.remote_reference import runner_notes

            notes.extend(runner_notes(endpoint.runner))
        reader = committed(final, home.auth_key)
    if endpoint is not None:
        notes.append(_endpoint_label(report, reader, endpoint.runner))
        notes.extend(_follow(work, reader))
    if reader.meta.get("placement"):
        report["placement"] = reader.meta["placement"]  # device_map="auto": modules per device
    vocab = _vocab_from_meta(reader)
    report["vocab_size"] = vocab.vocab_size
    report["bos_token_id"] = vocab.bos_token_id
    cache = CacheInfo(hit=hit, kind=reader.kind, path=str(reader.dir), key=slot.key, topk=reader.topk,
                      persistent=config.use_cache, requests_written=written, bytes=reader.size,
                      precision=precision_note(reader.kind, reader.topk))
    rescorer = Rescorer(home=home, base_key=slot.key, kind=reader.kind, topk=reader.topk, vocab=vocab,
                        local=None if endpoint is not None else (config.reference, config.reference_dtype,
                                                                 config.device, config.max_memory,
                                                                 config.reference_adapter),
                        endpoint=endpoint.runner if endpoint is not None else None)
    return ReferenceSide(reader=reader, config=ref_config, vocab=vocab, report=report, cache=cache, phase=phase,
                         kept=kept, notes=notes, rescorer=rescorer, endpoint_run=home.endpoint_run)


def _connect(plan: Plan, work: Workload, limits: Limits, transformers: Any, run: RunState | None) -> _Endpoint:
    """Connect to the endpoint serving the reference (``qcheck.eval.remote_reference``)."""
    from qcheck.eval.remote_reference import connect
    from qcheck.eval.safe_load import NO_CODE

    remote, ref_dir = plan.remote, plan.ref_dir
    assert remote is not None
    ref_config = transformers.AutoConfig.from_pretrained(ref_dir, **NO_CODE) \
        if (Path(ref_dir) / "config.json").is_file() else None
    if ref_config is None and any(s.runner is None and s.backend == DEFAULT_BACKEND for s in plan.specs):
        raise UsageError("simulated candidates are dequantised into the reference's architecture: put its "
                         "config.json into --reference-files")
    longest = max((len(r.input_ids) for e in work.encoded for r in e.score), default=1)
    tokenizer = work.encoder.tok
    runner, kind = connect(remote, tokenizer, remote.vocab(tokenizer, ref_config, work.encoder.add_bos), longest,
                           limits, run)
    return _Endpoint(runner=runner, kind=kind, config=ref_config, fingerprint=remote.fingerprint(runner))


def _slot(config: EvalConfig, work: Workload, endpoint: _Endpoint | None, home: CacheHome,
          modules: tuple[Any, Any]) -> _Slot:
    """The cache key: everything that could change the reference's numbers."""
    torch, transformers = modules
    kind = "endpoint" if endpoint is not None else (KIND_TOPK if config.cache_topk else KIND_FULL)
    parts = {
        "model": endpoint.fingerprint if endpoint is not None else model_fingerprint(config.reference, config.limits), "tasks": work.tasks.sha256,
        "max_items": config.max_items, "tokenizer": work.encoder.fingerprint(), "dtype": config.reference_dtype,
        "device": config.device, "max_length": config.max_length, "stride": work.encoder.stride,
        **({"windows": config.windows} if config.windows != "sliding" else {}), "kind": kind, "topk": config.cache_topk,
        **({"adapter": True} if config.reference_adapter and endpoint is None else {}),
        "encoder": ENCODER_VERSION, "torch": torch.__version__.split("+")[0].rsplit(".", 1)[0],
        "transformers": transformers.__version__.rsplit(".", 1)[0],
    }
    return _Slot(root=home.root, key=cache_key(parts), parts=parts, kind=kind, auth_key=home.auth_key)


def _compute(config: EvalConfig, work: Workload, slot: _Slot, endpoint: _Endpoint | None,
             report: dict[str, Any]) -> tuple[Path, int, Phase, tuple[Any, str] | None]:
    """Compute the reference's rows into a new cache entry; returns (entry, requests written, the pass, the model
    kept for the noise floor)."""
    phase = Phase()
    kept = None
    if endpoint is not None:
        final, written = _compute_remote(endpoint, work, slot)
        report["requests"] = written
        phase.tokens = sum(len(r.input_ids) for e in work.encoded for r in e.score)
    else:
        final, written, report["forward_calls"], phase.tokens, kept = _compute_local(config, work, slot, phase)
    phase.scored_tokens = sum(r.n_rows for e in work.encoded for r in e.score)
    phase.done()
    return final, written, phase, kept


def _compute_local(config: EvalConfig, work: Workload, slot: _Slot,
                   phase: Phase) -> tuple[Path, int, int, int, tuple[Any, str] | None]:
    """Run the reference over every request, streaming its rows into a new cache entry.

    Returns (the committed entry's directory, requests written, forward calls, tokens through the model, and with
    ``--noise-floor`` the same model cast in place to the noise floor's dtype with its input device, so the
    noise floor does not load it again; else None). Otherwise the model is freed before returning, so
    candidates never share memory with it.
    """
    from qcheck.eval.runners.reference import TransformersRunner, load_reference, placement, vocab_info

    encoded, encoder, progress = work.encoded, work.encoder, work.progress
    model, _, device = load_reference(config.reference, config.reference_dtype, config.device, config.max_memory,
                                      config.reference_adapter)
    where = placement(model)
    phase.loaded()
    ref_vocab = vocab_info(model, encoder.tok, encoder.add_bos)
    runner = TransformersRunner(model, ref_vocab, name="reference", device=device)
    del model
    meta = {"reference": config.reference, "created_by": "qcheck eval", "parts": slot.parts, "placement": where,
            "vocab": _vocab_json(ref_vocab)}
    writer = CacheWriter(slot.root, slot.key, slot.kind, ref_vocab.vocab_size, config.cache_topk, meta,
                         auth_key=slot.auth_key)
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


def _compute_remote(endpoint: _Endpoint, work: Workload, slot: _Slot) -> tuple[Path, int]:
    """The endpoint reference's rows into a new cache entry (``qcheck.eval.remote_reference``)."""
    from qcheck.eval.remote_reference import write_reference

    runner, progress = endpoint.runner, work.progress
    meta = {"reference": runner.opts.url, "created_by": "qcheck eval", "parts": slot.parts,
            "vocab": _vocab_json(runner.reference)}

    def make_writer(cache_kind: str, topk: int | None) -> CacheWriter:
        return CacheWriter(slot.root, slot.key, cache_kind, runner.reference.vocab_size, topk, meta,
                           auth_key=slot.auth_key)

    progress.start("reference (endpoint)", work.units())
    try:
        writer, _, written = write_reference(runner, endpoint.kind, work.encoded, work.encoder, make_writer, progress)
    finally:
        progress.stop()
    return writer.commit(), written


def _follow(work: Workload, reader: CacheReader) -> list[str]:
    """Make every candidate score what the endpoint reference scored (its own tokenisation of text prompts); the
    notes saying how many requests that changed or left out."""
    redirects = reader.meta.get("redirects") or {}
    excluded = reader.meta.get("excluded") or {}
    if not isinstance(redirects, dict) or not isinstance(excluded, dict):
        raise InputError("reference cache entry has an unknown layout; delete it", path=str(reader.dir))
    work.follow_reference(redirects, excluded)
    notes = []
    if redirects:
        notes.append(f"{len(redirects)} request(s) were tokenised by the reference endpoint differently from the "
                     "reference's tokenizer; every candidate scores the endpoint's own token ids for them")
    if excluded:
        key, why = next(iter(excluded.items()))
        notes.append(f"{len(excluded)} request(s) could not be scored by the reference endpoint and are left out of "
                     f"every candidate (first: {key}: {why})")
    return notes


def _vocab_json(vocab: VocabInfo) -> dict[str, Any]:
    return {"vocab_size": vocab.vocab_size, "bos_token_id": vocab.bos_token_id, "add_bos": vocab.add_bos,
            "eos_token_ids": list(vocab.eos_token_ids)}


def _vocab_from_meta(reader: CacheReader) -> VocabInfo:
    vocab_meta = reader.meta.get("vocab", {})
    return VocabInfo(vocab_size=int(vocab_meta.get("vocab_size", reader.vocab_size)),
                     bos_token_id=vocab_meta.get("bos_token_id"), add_bos=bool(vocab_meta.get("add_bos")),
                     eos_token_ids=tuple(vocab_meta.get("eos_token_ids") or ()))


def _remote_json(remote: Any, runner: Any, files: str) -> dict[str, Any]:
    """What the report says about an endpoint reference (``reference.endpoint``); its dtype is the server's."""
    from qcheck.net import redact

    return {"path": redact(remote.target.split("#", 1)[0]), "files": files, "dtype": None, "device": None,
            "endpoint": {"flavour": runner.flavour, "model": runner.model, "mode": runner.mode,
                         "prompt_format": runner.prompt_format}}


def _endpoint_label(report: dict[str, Any], reader: CacheReader, runner: Any) -> str:
    """Record whether the endpoint's rows are full or top-k; returns the note saying so."""
    from qcheck.eval.remote_reference import label

    logprobs = "full" if reader.kind == KIND_FULL else "top-k"
    report["endpoint"]["logprobs"] = logprobs
    report["endpoint"]["top_k"] = None if logprobs == "full" else runner.opts.top_k
    return "reference log-probs: " + label("full" if logprobs == "full" else "topk", runner.opts.top_k)
