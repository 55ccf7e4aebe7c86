"""The simulated candidate: a quantised checkpoint dequantised into the reference architecture's parameters.

On a CPU the faithful way to measure *weight* quantisation loss for every format is to run the reference
architecture with exactly the weights the real kernels multiply with. ``simulated_state_dict`` reads the
candidate (qcheck's bounded readers list and classify it; tensor data comes from safetensors ``safe_open``
or, for GGUF, a read at each tensor's offset dequantised by ``gguf.quants``), picks a dequantiser per module
from the tensors actually stored (names, dtypes, shapes; the config only supplies what shapes cannot: bit
widths of MLX/compressed-tensors packs, GPTQ v1 vs v2, FP8 block size), and returns float32 tensors under the reference's parameter names. ``apply_activation_fake_quant``
adds the activation side of W8A8 / W4A4 formats as forward pre-hooks on the quantised Linear layers.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from qcheck.errors import InputError
from qcheck.formats import REGISTRY
from qcheck.limits import DEFAULT_LIMITS, Limits

#: tensors that only matter to real kernels (activation / KV-cache scales): dropped from the state dict
SIDE_LEAVES = frozenset({
    "input_scale", "input_global_scale", "input_zero_point", "output_scale", "output_zero_point",
    "k_scale", "v_scale", "kv_scale",
})
FLOAT_DTYPES = frozenset({"F32", "F16", "BF16", "F64"})
#: canonical methods whose weights this module can dequantise (``Format.simulated``); "unknown" is attempted too
SIMULATED_METHODS = REGISTRY.simulated()

__all__ = [
    "apply_activation_fake_quant",
    "expected_parameters",
    "fake_quant_fp8",
    "fake_quant_int8",
    "fake_quant_mxfp4",
    "fake_quant_mxfp8",
    "fake_quant_nvfp4",
    "round_to_e2m1",
    "simulated_state_dict",
]


# ------------------------------------------------------------------------------------------ reference

def _as_config(reference_config: Any) -> Any:
    from transformers import AutoConfig

    from qcheck.eval.safe_load import NO_CODE

    if isinstance(reference_config, (str, Path)):
        return AutoConfig.from_pretrained(str(reference_config), **NO_CODE)
    if isinstance(reference_config, dict):
        data = dict(reference_config)
        model_type = data.pop("model_type", None)
        if not model_type:
            raise InputError("the reference config has no model_type")
        return AutoConfig.for_model(model_type, **data)  # a known model_type only: no code
    return reference_config


def expected_parameters(reference_config: Any) -> tuple[dict[str, tuple[int, ...]], bool]:
    """(parameter name -> shape, tied output head) of the reference architecture, built on the meta device."""
    import torch
    from transformers import AutoModelForCausalLM

    from qcheck.eval.safe_load import NO_CODE

    config = _as_config(reference_config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, **NO_CODE)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    tied = bool(getattr(config, "tie_word_embeddings", False) or getattr(text, "tie_word_embeddings", False))
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}, tied


# ------------------------------------------------------------------------------------------ entry point

def simulated_state_dict(candidate: str, reference_config: Any, limits: Limits = DEFAULT_LIMITS,
                         weight_types: dict[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Dequantise every weight of ``candidate`` (a local GGUF file, safetensors file or model directory) to
    float32 under the reference architecture's parameter names; returns (state dict, notes).

    Raises ``InputError`` naming them when the candidate lacks parameters of the reference, has tensors the
    reference does not know, or a tensor's shape differs. gpt-oss MXFP4 expert blocks (stored [E, out, in])
    are transposed to the HF parameter layout [E, in, out], as transformers' own decoder does. For a GGUF,
    ``weight_types`` (when given) receives each parameter's GGUF tensor type (what llama.cpp multiplies with).
    """

    from qcheck.classify import classify_weights
    from qcheck.readers import load_checkpoint

    path = Path(candidate)
    if not path.exists():
        raise InputError("a simulated candidate must be a local file or directory (download it first)",
                         path=candidate)
    expected, tied = expected_parameters(reference_config)
    checkpoint = load_checkpoint(str(path), limits)
    if checkpoint.container == "pickle":
        raise InputError("pickle checkpoints are never loaded; convert the candidate to safetensors",
                         path=candidate)
    inspection, weights = classify_weights(checkpoint)
    method = inspection.quantization.method
    if method not in SIMULATED_METHODS:
        raise InputError(f"qcheck cannot dequantise {method} checkpoints for simulation (it can: "
                         f"{', '.join(sorted(SIMULATED_METHODS - {'unknown', 'none'}))}); run the real engine "
                         "through an OpenAI-compatible endpoint instead", path=candidate)
    if checkpoint.container == "gguf":
        ggufs = [f.name for f in checkpoint.files if f.kind == "gguf"]
        if len(ggufs) != 1:
            raise InputError(f"a split GGUF ({len(ggufs)} files) must be merged with llama-gguf-split --merge "
                             "before it can be simulated", path=candidate)
        gguf_file = path if path.is_file() else path / ggufs[0]
        state, notes = gguf_state(gguf_file, checkpoint, reference_config, weight_types)
    else:
        root = path if path.is_dir() else path.parent
        state, notes = _safetensors_state(root, checkpoint, weights, inspection)
    _check_against(state, expected, tied, candidate)
    return state, notes


def _check_against(state: dict[str, Any], expected: dict[str, tuple[int, ...]], tied: bool, where: str) -> None:
    extra = sorted(k for k in state if k not in expected)
    if extra:
        raise InputError(f"{len(extra)} tensor(s) are not parameters of the reference architecture: "
                         f"{', '.join(extra[:8])}" + (" ..." if len(extra) > 8 else ""), path=where)
    missing = sorted(k for k in expected if k not in state and not (tied and k == "lm_head.weight"))
    if missing:
        raise InputError(f"{len(missing)} parameter(s) of the reference architecture are missing from the "
                         f"candidate: {', '.join(missing[:8])}" + (" ..." if len(missing) > 8 else ""), path=where)
    import torch

    for name, tensor in state.items():
        if tuple(tensor.shape) != expected[name]:
            raise InputError(f"tensor {name}: dequantised shape {tuple(tensor.shape)} differs from the reference's "
                             f"{expected[name]}", path=where)
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise InputError(f"tensor {name}: {bad} value(s) are NaN or infinite after dequantisation (NaN codes or "
                             "scales in the file)", path=where)


# ------------------------------------------------------------------------------------------ GGUF

def gguf_state(gguf_file: Path, checkpoint: Any, reference_config: Any,
               weight_types: dict[str, str] | None = None) -> tuple[dict[str, Any], list[str]]:
    """Every parameter tensor of a single-file GGUF dequantised to float32 under the reference's parameter names,
    converted back exactly as transformers' own GGUF loader converts it (``qcheck.eval.gguf_convert``).

    The tensor list, offsets and sizes come from qcheck's bounded header reader (already in ``checkpoint``,
    checked against the file size); each tensor's bytes are read at its offset and dequantised with
    ``gguf.quants.dequantize``.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from qcheck.eval.gguf_convert import gguf_state_dict

    config = _as_config(reference_config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return gguf_state_dict(gguf_file, checkpoint, model,
                           lambda fh, info: _gguf_tensor(fh, info, str(gguf_file)), weight_types)


def _gguf_tensor(fh: Any, info: Any, path: str) -> Any:
    """One GGUF tensor -> float32 numpy array in row-major (HF) order, reading exactly its ``nbytes`` at its
    absolute ``offset`` (both validated against the file by the header reader)."""
    import numpy as np
    from gguf import GGMLQuantizationType, quants

    where = f"tensor {info.name}"
    qtype = GGMLQuantizationType.__members__.get(info.dtype)
    if qtype is None or info.nbytes is None or info.offset is None:
        raise InputError(f"gguf-py cannot dequantise tensor type {info.dtype}", where=where)
    raw = np.empty(info.nbytes, dtype=np.uint8)
    fh.seek(info.offset)
    got = fh.readinto(raw.data)  # the array's own buffer
    if got != info.nbytes:
        raise InputError(f"file ends after {got} of the tensor's {info.nbytes} bytes (truncated?)", where=where,
                         path=path)
    try:
        values = quants.dequantize(raw, qtype)
    except NotImplementedError:
        raise InputError(f"gguf-py cannot dequantise tensor type {qtype.name}", where=where) from None
    values = np.asarray(values, dtype=np.float32)
    if values.size != info.numel:
        raise InputError(f"{values.size} dequantised values for shape {info.shape}", where=where)
    return values.reshape(info.shape)


# ------------------------------------------------------------------------------------------ safetensors

class _Loader:
    """Reads tensors by name from the checkpoint's shards with safetensors ``safe_open`` (PyTorch tensors)."""

    def __init__(self, root: Path, checkpoint: Any):
        self.root = root
        self.infos = checkpoint.tensors
        self._handles: dict[str, Any] = {}

    def get(self, name: str) -> Any:
        from safetensors import safe_open

        info = self.infos[name]
        file = info.file or ""
        handle = self._handles.get(file)
        if handle is None:
            target = (self.root / file).resolve()
            if self.root.resolve() not in target.parents and target != self.root.resolve():
                raise InputError("shard path leaves the model directory", where=f"tensor {name}")
            try:
                handle = safe_open(str(target), framework="pt")
            except Exception as exc:  # safetensors raises its own error types
                raise InputError(f"safetensors cannot open the shard: {exc}", path=str(target)) from None
            self._handles[file] = handle
        try:
            return handle.get_tensor(name)
        except Exception as exc:
            raise InputError(f"cannot read tensor data: {exc}", where=f"tensor {name}") from None


def read_tensor(root: Path, checkpoint: Any, name: str) -> Any:
    """One tensor of a safetensors checkpoint under ``root`` (its shard resolved inside the model directory)."""
    return _Loader(root, checkpoint).get(name)


def _safetensors_state(root: Path, checkpoint: Any, weights: list[Any], inspection: Any
                       ) -> tuple[dict[str, Any], list[str]]:
    """Every quantised weight the classifier found (``weights``) dequantised by its layout's dequantiser
    (``qcheck.formats`` ``Layout.dequantiser``); every other tensor copied as float32, dropped when it is a
    run-time scale, or refused when it is in a dtype no dequantiser consumed."""
    import torch

    from qcheck.eval.dequant.layouts import WeightSource, quant_config

    load = _Loader(root, checkpoint)
    src = WeightSource(load=load.get, infos=checkpoint.tensors, configs=checkpoint.configs,
                       qcfg=quant_config(checkpoint.configs))
    state: dict[str, Any] = {}
    layouts: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    consumed: set[str] = set()
    for q in weights:
        layout = REGISTRY.layout(q.layout, q.method)
        if layout is None or layout.dequantiser is None:
            continue  # not simulated: its tensors are refused below by name and dtype
        done = layout.dequantiser(src, q)
        if done is None:
            continue
        consumed |= done.consumed()
        for name, tensor in done.tensors.items():
            state[name] = tensor.to(torch.float32)
        layouts[done.label] += 1
    for name, info in checkpoint.tensors.items():
        if name in consumed:
            continue
        leaf = name.rpartition(".")[2]
        if leaf in SIDE_LEAVES:
            dropped[leaf] += 1
        elif info.dtype in FLOAT_DTYPES:
            state[name] = load.get(name).to(torch.float32)
        else:
            raise InputError(f"tensor of dtype {info.dtype} matches no quantisation layout qcheck can "
                             f"dequantise", where=f"tensor {name}")
    notes = [_summary(inspection, layouts)]
    if dropped:
        notes.append("run-time scales not used by dequantised weights were dropped: "
                     + ", ".join(f"{k} x{v}" for k, v in sorted(dropped.items())))
    return state, notes


def _summary(inspection: Any, layouts: Counter[str]) -> str:
    q = getattr(inspection, "quantization", None)
    method = getattr(q, "method", None) or "unknown"
    producer = getattr(q, "producer", None)
    head = method.upper() if method not in ("none", "unknown") else "unquantised"
    if producer:
        head += f" ({producer})"
    if layouts:
        what = ", ".join(f"{k} x{v}" for k, v in sorted(layouts.items()))
        body = f"{sum(layouts.values())} weights dequantised to float32 [{what}]"
    else:
        body = "no quantised weights found; tensors copied as float32"
    act = getattr(q, "activation_dtype", None)
    tail = (f"; activations ({act}) are not quantised by the weights alone" if act else "")
    return f"{head}: {body}{tail}"


# ------------------------------------------------------------------------------------------ activations

_E2M1_BOUNDS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
#: midpoints where round-half-to-even goes *up* (the upper neighbour has the even code)
_E2M1_TIES_UP = (0.75, 1.75, 3.5)


def round_to_e2m1(x: Any) -> Any:
    """Round to the FP4 E2M1 grid, half to even, saturating at +-6 (the rounding NVFP4/MXFP4 producers use)."""
    import torch

    mag = x.abs().clamp(max=6.0)
    bounds = torch.tensor(_E2M1_BOUNDS, dtype=mag.dtype, device=mag.device)
    idx = torch.bucketize(mag, bounds, right=False)
    for b in _E2M1_TIES_UP:
        idx = idx + (mag == b).to(idx.dtype)
    grid = torch.tensor(_E2M1_GRID, dtype=mag.dtype, device=mag.device)
    return torch.copysign(grid[idx], x)


def _blocks(x: Any, size: int) -> Any:
    """[..., n] -> [..., ceil(n/size), size], zero-padding a partial last block (zeros change no block amax)."""
    import torch

    pad = -x.shape[-1] % size
    if pad:
        x = torch.nn.functional.pad(x, (0, pad))
    return x.reshape(*x.shape[:-1], x.shape[-1] // size, size)


def _unblock(v: Any, shape: Any) -> Any:
    return v.reshape(*shape[:-1], -1)[..., : shape[-1]]


def fake_quant_fp8(x: Any, scale: float | None = None, group: int | None = None) -> Any:
    """FP8 E4M3 quantise-dequantise: static per-tensor with ``scale`` (x / scale, saturate, round), else
    dynamic per token (per ``group`` channels of a token when given: DeepSeek's per-token-per-128)."""
    import torch

    xf = x.to(torch.float32)
    if scale is not None:
        y = (xf / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).to(torch.float32) * scale
        return y.to(x.dtype)
    v = _blocks(xf, group) if group else xf.unsqueeze(-2)
    s = (v.abs().amax(dim=-1, keepdim=True) / 448.0).clamp(min=1e-12)
    y = (v / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).to(torch.float32) * s
    return _unblock(y, x.shape).to(x.dtype)


def fake_quant_nvfp4(x: Any, global_scale: float | None = None) -> Any:
    """NVFP4 activations: per 16 values an E4M3 scale (block amax / 6 / global), E2M1 elements.
    ``global_scale`` is the dequant multiplier (ModelOpt ``input_scale``, 1 / compressed-tensors
    ``input_global_scale``); dynamic (amax / (6 * 448) of the tensor) when absent."""
    import torch

    xf = x.to(torch.float32)
    g = global_scale if global_scale else float(xf.abs().amax().clamp(min=1e-12)) / (6.0 * 448.0)
    v = _blocks(xf, 16)
    per_block = v.abs().amax(dim=-1, keepdim=True) / 6.0 / g
    per_block = torch.where(per_block == 0, torch.ones_like(per_block), per_block).clamp(2.0**-9, 448.0)
    bs = per_block.to(torch.float8_e4m3fn).to(torch.float32)
    eff = bs * g
    q = round_to_e2m1(v / torch.where(eff == 0, torch.ones_like(eff), eff))
    return _unblock(q * eff, x.shape).to(x.dtype)


def _mx_scale(v: Any, elem_emax: int) -> Any:
    """Per-block power-of-two scale 2**(e - emax), e = floor(log2 amax) bumped by one when amax's mantissa
    rounds up past 1.75 (compressed-tensors ``generate_mx_scales``; same rule as ``packing.mx_scale_exponent``)."""
    import torch

    amax = v.abs().amax(dim=-1, keepdim=True)
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    e = torch.floor(torch.log2(safe))
    e = e + (safe / torch.exp2(e) + 0.25 >= 2.0).to(e.dtype)
    exp = torch.where(amax > 0, e - elem_emax, torch.full_like(amax, -127.0))
    return torch.exp2(exp.clamp(-127, 127))


def fake_quant_mxfp4(x: Any) -> Any:
    """MXFP4 activations: an E8M0 scale per 32 values (``_mx_scale``, E2M1 emax 2), E2M1 elements."""
    import torch

    v = _blocks(x.to(torch.float32), 32)
    s = _mx_scale(v, 2)
    return _unblock(round_to_e2m1(v / s) * s, x.shape).to(x.dtype)


def fake_quant_mxfp8(x: Any) -> Any:
    """MXFP8 activations: an E8M0 scale per 32 values (``_mx_scale``, E4M3 emax 8), E4M3 elements."""
    import torch

    v = _blocks(x.to(torch.float32), 32)
    s = _mx_scale(v, 8)
    q = (v / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).to(torch.float32)
    return _unblock(q * s, x.shape).to(x.dtype)


def fake_quant_int8(x: Any, scale: float | None = None) -> Any:
    """INT8 symmetric: static per-tensor with ``scale``, else dynamic per token (amax / 127)."""
    import torch

    xf = x.to(torch.float32)
    s = torch.tensor(scale) if scale is not None else (xf.abs().amax(dim=-1, keepdim=True) / 127.0).clamp(min=1e-12)
    return (torch.round(xf / s).clamp(-128, 127) * s).to(x.dtype)


def _activation_scales(inspection: Any, limits: Limits) -> tuple[set[str], dict[str, tuple[str, float]]]:
    """(quantised module prefixes, prefix -> (scale tensor leaf, value)) read from the candidate's files; the
    quantised modules are the weights the classifier found."""
    from qcheck.classify import classify_weights
    from qcheck.readers import load_checkpoint

    path = Path(inspection.path)
    if not path.exists() or path.suffix == ".gguf":
        return set(), {}
    checkpoint = load_checkpoint(str(path), limits)
    root = path if path.is_dir() else path.parent
    load = _Loader(root, checkpoint)
    quantised = {q.name for q in classify_weights(checkpoint)[1]}
    static: dict[str, tuple[str, float]] = {}
    for name in checkpoint.tensors:
        prefix, _, leaf = name.rpartition(".")
        if leaf in ("input_scale", "input_global_scale"):
            t = load.get(name)
            if t.numel() == 1:
                static[prefix] = (leaf, float(t.float().reshape(())))
    return quantised, static


def apply_activation_fake_quant(model: Any, inspection: Any, limits: Limits = DEFAULT_LIMITS,
                                handles: list[Any] | None = None) -> str | None:
    """Fake-quantise the inputs of the candidate's quantised Linear layers the way its format does at run
    time (forward pre-hooks, appended to ``handles`` when given so they can be removed). Returns what was applied,
    or None when the format quantises weights only.

    FP8 W8A8: static per-tensor with the stored ``input_scale``, else dynamic per token (per token and 128
    channels for 2-D block FP8). NVFP4 W4A4: E4M3 scales per 16 with the stored global input scale. MXFP4 /
    MXFP8: E8M0 scales per 32. INT8 W8A8: static with ``input_scale``, else dynamic per token.
    """
    import torch

    q = inspection.quantization
    act = q.activation_dtype
    if not act:
        return None
    quantised, static = _activation_scales(inspection, limits)
    method = q.method

    def make_hook(prefix: str):
        leaf, value = static.get(prefix, (None, None))
        if act == "float8_e4m3" and method == "mxfp8":
            return fake_quant_mxfp8
        if act == "float8_e4m3":
            group = 128 if q.block_size else None
            return lambda x: fake_quant_fp8(x, scale=value, group=None if value else group)
        if act == "fp4_e2m1" and method == "mxfp4":
            return fake_quant_mxfp4
        if act == "fp4_e2m1":
            g = (1.0 / value if leaf == "input_global_scale" else value) if value else None
            return lambda x: fake_quant_nvfp4(x, g)
        if act == "int8":
            return lambda x: fake_quant_int8(x, value)
        return None

    hooked = 0
    statics = 0
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or name not in quantised:
            continue
        fn = make_hook(name)
        if fn is None:
            return f"activation dtype {act} has no fake-quant in qcheck; not applied"
        handle = module.register_forward_pre_hook(lambda _m, args, fn=fn: (fn(args[0]), *args[1:]))
        if handles is not None:
            handles.append(handle)
        hooked += 1
        statics += name in static
    if not hooked:
        return f"{act} activations: no quantised Linear layer of the model matched the checkpoint; not applied"
    mode = "static scales from the checkpoint" if statics == hooked else (
        "dynamic scales" if statics == 0 else f"static scales on {statics}, dynamic on {hooked - statics}")
    return f"{act} activations fake-quantised on {hooked} Linear layers ({mode})"
