"""A quantised checkpoint simulated in transformers: its dequantised weights loaded into the reference
architecture.

Why: on a CPU-only machine this is the faithful way to measure *weight* quantisation error for every
format (GGUF, FP8, NVFP4, MXFP4, AWQ, GPTQ, compressed-tensors, MLX): the weights equal what the real
kernels multiply with. It does not reproduce activation quantisation unless ``--activation-quant`` asks for
fake-quant, nor the engines' accumulation order (docs/research/evals.md §6.1, §6.2). The dequantisation itself
is ``qcheck.eval.simulate`` (the dequantiser engineer's module).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qcheck.errors import InputError, UsageError
from qcheck.eval.runners import BuiltRunner, RunnerContext, quantization_json
from qcheck.eval.runners.base import VocabInfo
from qcheck.eval.runners.reference import TransformersRunner, resolve_dtype, torch_modules
from qcheck.limits import DEFAULT_LIMITS, Limits
from qcheck.request import KVCacheTypes

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

    #: fake-quantise activations as the format does at run time (``--activation-quant``; with engine "weights")
    activation_quant: bool = False
    limits: Limits = DEFAULT_LIMITS
    #: whose arithmetic around the weights (``--simulate-engine``): "weights" (the dequantised weights alone),
    #: "auto" (llama.cpp for GGUF, vLLM otherwise), "llama.cpp", "vllm", "sglang"
    engine: str = "weights"
    #: the KV cache's types (None or unset sides: the engine's default)
    kv_cache: KVCacheTypes | None = None


@dataclass
class _Emulated:
    """What the engine emulation put on a model: how to take it off, and what the report says."""

    activations: str
    cleanups: list[Callable[[], None]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    kv: dict[str, Any] | None = None


def load_simulated(name: str, path: str, reference_config: Any, reference_vocab: VocabInfo, *, dtype: str,
                   device: str, inspection: Any = None,
                   options: SimulationOptions = SimulationOptions()) -> tuple[TransformersRunner, list[str], str]:
    """Dequantise ``path`` (via ``qcheck.eval.simulate``) into the reference architecture and apply the engine's
    arithmetic around it (``qcheck.eval.emulation``).

    Returns (runner, notes, what was done about activations: the report's ``activations`` field); the runner's
    ``simulation`` is the report's ``simulation`` record (None for weights alone)."""
    from qcheck.eval import simulate
    from qcheck.eval.emulation import engine_for

    is_gguf = Path(path).suffix == ".gguf" or (Path(path).is_dir() and any(Path(path).glob("*.gguf")))
    engine = engine_for(options.engine, is_gguf)
    weight_types: dict[str, str] = {}
    state_dict, notes = simulate.simulated_state_dict(path, reference_config, limits=options.limits,
                                                      weight_types=weight_types)
    model = build_dense_model(reference_config, state_dict, dtype, device, where=f"candidate {name}")
    del state_dict
    notes = list(notes)
    if engine == "weights":
        if options.kv_cache is not None and options.kv_cache.given:
            raise UsageError("a KV cache type is emulated as an engine stores it: choose the engine with "
                             "--simulate-engine llama.cpp|vllm|sglang (or auto), not weights")
        emulated = _weights_only(model, inspection, options, notes)
    else:
        emulated = _engine(engine, model, path, weight_types, inspection, options, dtype)
        notes.extend(emulated.notes)
    method = getattr(getattr(inspection, "quantization", None), "method", None) or "dequantised"
    runner = TransformersRunner(model, candidate_vocab(path, model, reference_vocab, options.limits), name=name,
                                backend=f"simulated:{method}", device=device)
    if engine != "weights":
        from qcheck.eval.emulation import EmulationRecord

        runner.simulation = EmulationRecord(engine=engine, activations=emulated.activations, kv_cache=emulated.kv,
                                            effects_left_out=emulated.left_out)
    cleanups = emulated.cleanups

    def close(m: Any) -> None:
        for undo in cleanups:
            undo()
        release_model(m, reference_config, dtype, device)

    runner.on_close = close  # every hook is removed first: the next candidate reuses the model
    return runner, notes, emulated.activations


def _weights_only(model: Any, inspection: Any, options: SimulationOptions, notes: list[str]) -> _Emulated:
    """The dequantised weights alone; the format's activation fake-quant only with ``--activation-quant``."""
    from qcheck.eval import simulate

    act_dtype = getattr(getattr(inspection, "quantization", None), "activation_dtype", None)
    handles: list[Any] = []
    if not act_dtype:
        activations = "not quantised by the format" if inspection is not None else "unknown (not inspected)"
        if options.activation_quant:
            notes.append("activation fake-quant requested: the format quantises weights only, nothing to apply")
    elif options.activation_quant:
        done = simulate.apply_activation_fake_quant(model, inspection, limits=options.limits, handles=handles)
        activations = f"fake-quantised: {done}" if done else f"{act_dtype} in the format, but fake-quant was not applied"
        notes.append(f"activation fake-quant: {done}" if done else
                     f"activation fake-quant requested but nothing was applied for {act_dtype}")
    else:
        activations = f"not simulated (the format quantises activations to {act_dtype}; use --activation-quant)"
        notes.append(f"the checkpoint quantises activations to {act_dtype}, which this simulation does not "
                     "reproduce (weights only; the loss is under-estimated); use --activation-quant or "
                     "--simulate-engine auto")
    return _Emulated(activations=activations, cleanups=[_remover(handles)])


def _remover(handles: list[Any]) -> Callable[[], None]:
    def remove() -> None:
        for handle in handles:
            handle.remove()
        handles.clear()

    return remove


def _engine(engine: str, model: Any, path: str, weight_types: dict[str, str], inspection: Any,
            options: SimulationOptions, dtype: str) -> _Emulated:
    """The named engine's activation handling and KV cache on the dequantised model."""
    from qcheck.eval.emulation import kv
    from qcheck.eval.emulation.scales import checkpoint_kv_scales

    if engine == "llama.cpp":
        if not weight_types:
            raise UsageError(f"--simulate-engine llama.cpp emulates llama.cpp running a GGUF file; {path} is not one "
                             "(auto picks vllm for safetensors checkpoints)")
        emulated = _llama_cpp_activations(model, weight_types)
    else:
        if weight_types:
            raise UsageError(f"--simulate-engine {engine}: qcheck emulates {engine} on safetensors checkpoints; a GGUF "
                             "file is emulated as llama.cpp runs it (--simulate-engine auto or llama.cpp)")
        emulated = _format_activations(engine, model, inspection, options, dtype)
    types = options.kv_cache
    scales = checkpoint_kv_scales(path, options.limits) if engine != "llama.cpp" else None
    emulation = kv.resolve(engine, types.k if types else None, types.v if types else None, scales)
    if emulation.changes_anything:
        applied = kv.apply(model, emulation)
        emulated.cleanups.append(applied.remove)
        emulated.notes.extend(applied.notes)
        emulated.left_out.extend(emulation.effects_left_out())
    emulated.kv = {"k": emulation.k, "v": emulation.v, "engine_default": not (types and types.given),
                   "description": emulation.describe() if emulation.changes_anything else
                   f"the model's own dtype ({engine}'s default: no KV cache quantisation)",
                   "scales": "checkpoint" if scales is not None and scales.shipped else
                   ("1.0 (none in the checkpoint)" if "fp8" in emulation.k + emulation.v else None)}
    return emulated


def _llama_cpp_activations(model: Any, weight_types: dict[str, str]) -> _Emulated:
    from qcheck.eval.emulation.activations import apply_llama_cpp_activations

    hooks = apply_llama_cpp_activations(model, weight_types)
    left_out = ["llama.cpp's summation order (integer sums per block, float sums across blocks)",
                "llama.cpp's CUDA kernels (MMQ/MMVQ quantise activations to Q8_1 for every quantised type): this "
                "emulates its CPU kernels"]
    if any(t in ("Q4_1", "Q5_1") for t in weight_types.values()):
        left_out.append("the fp16 rounding of Q8_1's block sums in Q4_1/Q5_1 dot products")
    if hooks.uncovered:
        left_out.append(f"activation quantisation before {len(hooks.uncovered)} matrix multiplication(s) that are not "
                        f"Linear layers in transformers (e.g. {hooks.uncovered[0]}: stacked MoE experts)")
    return _Emulated(activations=hooks.describe(), cleanups=[hooks.remove], left_out=left_out)


def _format_activations(engine: str, model: Any, inspection: Any, options: SimulationOptions, dtype: str) -> _Emulated:
    """vLLM / SGLang: the activations the checkpoint's format quantises (W8A8, W4A4), as their kernels do."""
    from qcheck.eval import simulate

    act_dtype = getattr(getattr(inspection, "quantization", None), "activation_dtype", None)
    handles: list[Any] = []
    left_out = []
    if dtype == "float32":
        left_out.append(f"{engine}'s bfloat16/float16 computation outside the quantised matrix multiplications (the "
                        "simulation computes in float32; --reference-dtype bfloat16 computes it in bfloat16)")
    if not act_dtype:
        method = getattr(getattr(inspection, "quantization", None), "method", None)
        kind = "unquantised weights" if method in (None, "none") else "weight-only"
        return _Emulated(activations=f"not quantised by the format ({kind}: {engine} multiplies in the model's "
                                     "dtype)", left_out=left_out)
    done = simulate.apply_activation_fake_quant(model, inspection, limits=options.limits, handles=handles)
    activations = f"fake-quantised as {engine} runs the format: {done}" if done else \
        f"{act_dtype} in the format, but qcheck has no emulation of it"
    if not done:
        left_out.append(f"the {act_dtype} activation quantisation of the format")
    elif act_dtype == "float8_e4m3" and "dynamic" in done:
        # vllm 0.34.0 model_executor/layers/quantization/fp8.py:263-284: per token with CUTLASS FP8 (sm89+), else
        # one dynamic scale per tensor
        left_out.append("dynamic FP8 activations scaled per tensor, as vLLM does on GPUs without CUTLASS FP8 "
                        "(before sm89): per token here, as on sm89+")
    return _Emulated(activations=activations, cleanups=[_remover(handles)],
                     left_out=[*left_out, "the engine's GEMM accumulation order and precision"])


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
    from qcheck.eval.runners.reference import adapter_files

    adapter = adapter_files(target)
    if adapter:
        notes.append(f"the candidate folder holds a PEFT adapter ({', '.join(adapter)}): not applied, the candidate is "
                     "the checkpoint's own weights")
    quantization = None
    if inspection is not None:
        quantization = quantization_json(inspection)
    runner, sim_notes, activations = load_simulated(
        name, target, context.reference_config, context.reference_vocab, dtype=context.dtype, device=context.device,
        inspection=inspection, options=SimulationOptions(activation_quant=context.activation_quant,
                                                         limits=context.limits, engine=context.simulate_engine,
                                                         kv_cache=context.kv_cache))
    return BuiltRunner(runner=runner, notes=notes + sim_notes, quantization=quantization, activations=activations,
                       simulation=runner.simulation)
