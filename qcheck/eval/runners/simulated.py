"""A quantised checkpoint simulated in transformers: its dequantised weights loaded into the reference
architecture.

Why: on a CPU-only machine this is the faithful way to measure *weight* quantisation error for every
format (GGUF, FP8, NVFP4, MXFP4, AWQ, GPTQ, compressed-tensors, MLX): the weights equal what the real
kernels multiply with. It does not reproduce activation quantisation unless ``--activation-quant`` asks for
fake-quant, nor the engines' accumulation order (docs/research/evals.md §6.1, §6.2). The dequantisation itself
is ``qcheck.eval.simulate`` (the dequantiser engineer's module).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from qcheck.errors import InputError
from qcheck.eval.runners import BuiltRunner, RunnerContext
from qcheck.eval.runners.base import VocabInfo
from qcheck.eval.runners.reference import TransformersRunner, resolve_dtype, torch_modules
from qcheck.limits import DEFAULT_LIMITS, Limits

#: a closed simulated candidate's model, kept for the next candidate of the same architecture, dtype and device:
#: (key, model). Candidates run one after another, so at most one skeleton is ever kept.
_SKELETON: list[tuple[tuple[int, str, str], Any]] = []


def release_model(model: Any, config: Any, dtype: str, device: str) -> None:
    """Keep ``model`` (whose weights are about to be overwritten) for the next ``build_dense_model`` call with the
    same ``config`` object, dtype and device; any older skeleton is dropped."""
    _SKELETON.clear()
    _SKELETON.append(((id(config), dtype, device), model))


def drop_skeleton() -> None:
    """Free the kept model (before a candidate of another backend, and at the end of a run)."""
    _SKELETON.clear()


def _skeleton(config: Any, dtype: str, device: str) -> Any:
    if _SKELETON and _SKELETON[0][0] == (id(config), dtype, device):
        return _SKELETON.pop()[1]
    _SKELETON.clear()
    return None


def build_dense_model(config: Any, state_dict: dict[str, Any], dtype: str, device: str, where: str) -> Any:
    """Instantiate the reference architecture from ``config`` and load ``state_dict`` into it, strictly.

    Missing parameters (other than a tied output head) and unexpected names are errors naming them: a
    silently random-initialised layer would make every metric meaningless. The model of the previous simulated
    candidate of the same reference (``release_model``) is reused when there is one: loading new weights into
    it costs a copy, building the architecture again costs its construction and allocation.
    """
    torch, transformers = torch_modules()
    torch_dtype = resolve_dtype(dtype)
    reused = _skeleton(config, dtype, device)
    if reused is not None:
        model = reused
    else:
        try:
            from transformers.initialization import no_init_weights
        except ImportError:  # pragma: no cover - older transformers
            from contextlib import nullcontext as no_init_weights  # type: ignore[assignment]
        with no_init_weights():
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    expected = model.state_dict()
    tied = bool(getattr(config, "tie_word_embeddings", False) or
                getattr(config.get_text_config() if hasattr(config, "get_text_config") else config,
                        "tie_word_embeddings", False))
    unexpected = sorted(k for k in state_dict if k not in expected)
    if unexpected:
        raise InputError(f"{len(unexpected)} dequantised tensor(s) do not exist in the reference architecture, "
                         f"e.g. {', '.join(unexpected[:5])}", where=where)
    missing = sorted(k for k in expected if k not in state_dict)
    if tied:
        missing = [k for k in missing if k != "lm_head.weight"]
    if missing:
        raise InputError(f"{len(missing)} parameter(s) of the reference architecture are missing from the "
                         f"candidate, e.g. {', '.join(missing[:5])}", where=where)
    for key, tensor in state_dict.items():
        if tuple(tensor.shape) != tuple(expected[key].shape):
            raise InputError(f"tensor {key}: shape {tuple(tensor.shape)} differs from the reference's "
                             f"{tuple(expected[key].shape)}", where=where)
    if reused is not None:  # same dtype and device: copy each tensor in, rounding once as .to() would
        with torch.no_grad():
            for key, tensor in state_dict.items():
                expected[key].copy_(tensor.to(torch.float32))
    else:
        model.load_state_dict({k: v.to(torch.float32) for k, v in state_dict.items()}, strict=False)
    if tied:
        model.tie_weights()
    model = model.to(dtype=torch_dtype, device=device)
    model.eval()
    return model


def candidate_vocab(path: str, model: Any, reference: VocabInfo, limits: Limits = DEFAULT_LIMITS) -> VocabInfo:
    """The candidate's token space as its own files declare it (GGUF tokenizer metadata, read with qcheck's
    bounded header reader), else the dequantised output head's rows with the reference's BOS."""
    rows = int(model.get_output_embeddings().weight.shape[0])
    bos, add_bos = reference.bos_token_id, reference.add_bos
    p = Path(path)
    if p.suffix == ".gguf" and p.is_file():
        from qcheck.readers import load_checkpoint

        meta = load_checkpoint(str(p), limits).metadata
        if isinstance(meta.get("tokenizer.ggml.bos_token_id"), int):
            bos = int(meta["tokenizer.ggml.bos_token_id"])
        if isinstance(meta.get("tokenizer.ggml.add_bos_token"), bool):
            add_bos = bool(meta["tokenizer.ggml.add_bos_token"])
        tokens = meta.get("tokenizer.ggml.tokens")
        count = getattr(tokens, "count", None) if not isinstance(tokens, list) else len(tokens)
        if isinstance(count, int):
            rows = count
    return VocabInfo(vocab_size=rows, bos_token_id=bos, add_bos=add_bos, eos_token_ids=reference.eos_token_ids)


@dataclass(frozen=True)
class SimulationOptions:
    """How a simulated candidate is computed beyond its dequantised weights."""

    #: fake-quantise activations as the format does at run time (``--activation-quant``)
    activation_quant: bool = False
    limits: Limits = DEFAULT_LIMITS


def load_simulated(name: str, path: str, reference_config: Any, reference_vocab: VocabInfo, *, dtype: str,
                   device: str, inspection: Any = None,
                   options: SimulationOptions = SimulationOptions()) -> tuple[TransformersRunner, list[str], str]:
    """Dequantise ``path`` (via ``qcheck.eval.simulate``) into the reference architecture.

    Returns (runner, notes, what was done about activations: the report's ``activations`` field)."""
    activation_quant, limits = options.activation_quant, options.limits
    try:
        from qcheck.eval import simulate
    except ImportError as exc:  # pragma: no cover - until the dequantiser module is installed
        raise InputError(f"simulated candidates need qcheck.eval.simulate ({exc})", path=path) from None
    state_dict, notes = simulate.simulated_state_dict(path, reference_config, limits=limits)
    model = build_dense_model(reference_config, state_dict, dtype, device, where=f"candidate {name}")
    del state_dict
    notes = list(notes)
    act_dtype = getattr(getattr(inspection, "quantization", None), "activation_dtype", None)
    if not act_dtype:
        activations = "not quantised by the format" if inspection is not None else "unknown (not inspected)"
        if activation_quant:
            notes.append("activation fake-quant requested: the format quantises weights only, nothing to apply")
    elif activation_quant:
        done = simulate.apply_activation_fake_quant(model, inspection, limits=limits)
        activations = f"fake-quantised: {done}" if done else f"{act_dtype} in the format, but fake-quant was not applied"
        notes.append(f"activation fake-quant: {done}" if done else
                     f"activation fake-quant requested but nothing was applied for {act_dtype}")
    else:
        activations = f"not simulated (the format quantises activations to {act_dtype}; use --activation-quant)"
        notes.append(f"the checkpoint quantises activations to {act_dtype}, which this simulation does not "
                     "reproduce (weights only; the loss is under-estimated); use --activation-quant")
    method = getattr(getattr(inspection, "quantization", None), "method", None) or "dequantised"
    runner = TransformersRunner(model, candidate_vocab(path, model, reference_vocab, limits), name=name,
                                backend=f"simulated:{method}", device=device)
    if not (act_dtype and activation_quant):  # fake-quant changes the modules: such a model is not reused
        runner.on_close = lambda m: release_model(m, reference_config, dtype, device)
    return runner, notes, activations


def _inspect(path: str, limits: Limits) -> tuple[Any, str | None]:
    """Classify the candidate with ``qcheck.inspect`` (format, method, activation dtype for the notes)."""
    try:
        from qcheck.inspect import inspect_path
    except ImportError as exc:  # pragma: no cover - the inspect module ships with qcheck
        return None, f"qcheck.inspect unavailable ({exc}); format-specific notes skipped"
    return inspect_path(path, limits=limits), None


def build(name: str, target: str, context: RunnerContext) -> BuiltRunner:
    """The ``simulated`` backend: inspect ``target``, dequantise it into the reference architecture."""
    from qcheck.errors import InputError as _InputError

    if not Path(target).exists():
        raise _InputError("no such file or directory", path=target)
    inspection, note = _inspect(target, context.limits)
    notes = [note] if note else []
    quantization = None
    if inspection is not None:
        q = inspection.quantization
        quantization = {"method": q.method, "producer": q.producer, "weight_bits": q.weight_bits,
                        "bits_per_weight": q.bits_per_weight, "gguf_file_type": q.gguf_file_type,
                        "activation_dtype": q.activation_dtype}
    runner, sim_notes, activations = load_simulated(
        name, target, context.reference_config, context.reference_vocab, dtype=context.dtype, device=context.device,
        inspection=inspection, options=SimulationOptions(activation_quant=context.activation_quant,
                                                         limits=context.limits))
    return BuiltRunner(runner=runner, notes=notes + sim_notes, quantization=quantization, activations=activations)
