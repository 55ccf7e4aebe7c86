"""The unquantised reference (and any dense transformers model): full-vocabulary log-probs on CPU or GPU.

``TransformersRunner`` implements the runner protocol of ``qcheck.eval.runners.base`` for a loaded
``transformers`` causal LM; ``load_reference`` loads the reference checkpoint and its tokenizer.
torch and transformers are imported here, lazily, never on the inspect/check path.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from qcheck.errors import DependencyError, InputError, UsageError, require
from qcheck.eval.runners.base import (
    Capabilities,
    GenerateRequest,
    Generation,
    ScoreRequest,
    TokenScores,
    VocabInfo,
)
from qcheck.eval.safe_load import NO_CODE, check_reference

DTYPES = ("float32", "bfloat16", "float16")
DEVICES = ("cpu", "cuda", "auto")


def torch_modules() -> tuple[Any, Any]:
    """(torch, transformers), or a DependencyError naming the extra to install.

    Before torch's first import, OpenMP threads are told to sleep rather than spin between parallel regions
    (``OMP_WAIT_POLICY=PASSIVE`` unless set): on a machine shared with other jobs (CI runners) spinning
    threads made a tiny model's forward 20-100x slower (0.3-0.6 s instead of 6 ms measured here)."""
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    torch = require("torch", "eval", "qcheck eval")
    transformers = require("transformers", "eval", "qcheck eval")
    return torch, transformers


def resolve_dtype(name: str) -> Any:
    torch, _ = torch_modules()
    if name not in DTYPES:
        raise UsageError(f"unknown dtype {name!r}; use one of {', '.join(DTYPES)}")
    return getattr(torch, name)


def cuda_available() -> bool:
    torch, _ = torch_modules()
    return bool(torch.cuda.is_available())


def resolve_device(name: str) -> tuple[str, str | None]:
    """(device for inputs, device_map for from_pretrained): cpu default; ``cuda`` needs a CUDA device; ``auto`` is
    accelerate's ``device_map="auto"`` (GPUs, then CPU, then disk offload within ``--max-memory``) when accelerate
    is installed, whether or not a GPU is present, else the GPU or the CPU whole."""
    if name not in DEVICES:
        raise UsageError(f"unknown device {name!r}; use one of {', '.join(DEVICES)}")
    if name == "cpu":
        return "cpu", None
    cuda = cuda_available()
    if name == "cuda":
        if not cuda:
            raise UsageError("--device cuda: no CUDA device is available (torch.cuda.is_available() is False); "
                             "use --device cpu, or --device auto to use a GPU when there is one")
        return "cuda", None
    try:
        import accelerate  # noqa: F401
    except ImportError:
        return ("cuda" if cuda else "cpu"), None
    return ("cuda" if cuda else "cpu"), "auto"


_MEMORY_KEY = re.compile(r"^(cpu|mps|[0-9]{1,3})$")
_MEMORY_SIZE = re.compile(r"^\d+(\.\d+)?\s*([KMGT]i?B|B)$", re.IGNORECASE)


def parse_max_memory(values: Sequence[str]) -> dict[str | int, str]:
    """``--max-memory DEVICE=SIZE`` values (``0=20GiB``, ``cpu=64GiB``) as accelerate's ``max_memory`` mapping."""
    out: dict[str | int, str] = {}
    for value in values:
        key, sep, size = value.partition("=")
        key, size = key.strip().lower(), size.strip()
        if not sep or not _MEMORY_KEY.match(key) or not _MEMORY_SIZE.match(size):
            raise UsageError(f"--max-memory {value!r}: use DEVICE=SIZE, DEVICE a GPU index, cpu or mps, SIZE like "
                             "20GiB or 512MB")
        out[int(key) if key.isascii() and key.isdigit() else key] = size.replace(" ", "")
    return out


def placement(model: Any) -> dict[str, int] | None:
    """How many modules accelerate put on each device (``{"cpu": 3, "disk": 2}``), None without a device map."""
    device_map = getattr(model, "hf_device_map", None)
    if not isinstance(device_map, dict):
        return None
    counts: dict[str, int] = {}
    for where in device_map.values():
        name = f"cuda:{where}" if isinstance(where, int) else str(where)
        counts[name] = counts.get(name, 0) + 1
    return counts


#: float32 bytes of one vocabulary-wide temporary (logits, log-probs) per block of rows: rows per block =
#: BLOCK_BYTES / (4 x vocab), so the output layer's memory is the same at a 32k and a 262k vocabulary
BLOCK_BYTES = 16 << 20
#: padded tokens per batched forward, and at most this many requests in one batch
BATCH_TOKENS = 4096
MAX_BATCH = 32


def rows_per_block(vocab_size: int, block_bytes: int = BLOCK_BYTES) -> int:
    """Rows of ``vocab_size`` float32 values that fit in ``block_bytes`` (at least 1)."""
    return max(1, block_bytes // (4 * max(1, vocab_size)))


def batches(requests: Sequence[ScoreRequest], max_tokens: int = BATCH_TOKENS,
            max_batch: int = MAX_BATCH) -> Iterator[list[int]]:
    """Consecutive runs of request indices whose padded size (count x longest) stays within ``max_tokens``."""
    group: list[int] = []
    longest = 0
    for i, req in enumerate(requests):
        size = len(req.input_ids) - 1
        if group and (max(longest, size) * (len(group) + 1) > max_tokens or len(group) >= max_batch):
            yield group
            group, longest = [], 0
        group.append(i)
        longest = max(longest, size)
    if group:
        yield group


class TransformersRunner:
    """A dense transformers causal LM behind the runner protocol (full rows, prompt log-probs, greedy).

    Scoring runs the decoder once per batch of requests (right-padded, with an attention mask) and applies
    the output layer to blocks of rows (``rows_per_block``): ``tokens x vocab`` logits are never held at once,
    which matters at a 262k vocabulary. The output layer is the model's own ``lm_head`` plus its final logit
    processing (Gemma 2/3 soft-capping, Cohere's ``logit_scale``, Granite's ``logits_scaling``); the first
    request checks it against the model's own forward and falls back to whole-request logits if they differ.
    """

    capabilities = Capabilities(has_full_logprobs=True, has_prompt_logprobs=True, can_generate=True)

    def __init__(self, model: Any, vocab: VocabInfo, name: str, backend: str = "transformers",
                 device: str = "cpu", *, block_bytes: int = BLOCK_BYTES, batch_tokens: int = BATCH_TOKENS):
        self.model = model
        self._vocab = vocab
        self.name = name
        self.backend = backend
        self.device = device
        self.block_bytes = block_bytes
        self.batch_tokens = batch_tokens
        #: None until the first request checked the blocked output layer against the model's own logits
        self.blocked_head: bool | None = None
        self._whole: tuple[ScoreRequest, Any] | None = None
        #: called with the model when the runner closes (the simulated backend keeps it for the next candidate)
        self.on_close: Callable[[Any], None] | None = None
        #: a simulated candidate's engine emulation (``qcheck.eval.emulation.EmulationRecord``), None otherwise
        self.simulation: Any = None
        self.notes: list[str] = []
        #: counters for tests and benchmarks
        self.forward_calls = 0
        self.rows_scored = 0
        self.tokens_generated = 0

    def vocab(self) -> VocabInfo:
        return self._vocab

    def score(self, requests: Sequence[ScoreRequest]) -> Iterator[TokenScores]:
        """Whole-request rows (the protocol's form); the harness uses ``score_blocks``."""
        import numpy as np

        parts: list[TokenScores] = []
        for _index, start, block in self.score_blocks(requests):
            if start == 0 and parts:
                yield _concat(parts, np)
                parts = []
            parts.append(block)
        if parts:
            yield _concat(parts, np)

    def score_blocks(self, requests: Sequence[ScoreRequest]) -> Iterator[tuple[int, int, TokenScores]]:
        """(request index, first row, rows) in request order, each block at most ``rows_per_block`` rows."""
        torch, _ = torch_modules()
        for req in requests:
            if req.start < 1 or req.n_rows < 1:
                raise InputError(f"request {req.key}: nothing to score (start {req.start}, {len(req.input_ids)} tokens)")
        step = rows_per_block(self._vocab.vocab_size, self.block_bytes)
        for group in batches(requests, self.batch_tokens):
            with torch.inference_mode():
                hidden = self._hidden(group, requests, torch)
            for b, index in enumerate(group):
                req = requests[index]
                targets = torch.tensor(req.targets, dtype=torch.long, device=self.device)
                for a in range(0, req.n_rows, step):
                    with torch.inference_mode():
                        if hidden is not None:
                            logits = self._head(hidden[b][a:a + step], torch)
                        else:
                            logits = self._whole_logits(req)[a:a + step]
                        yield index, a, self._rows(logits, targets[a:a + step], torch, req.key)
                self.rows_scored += req.n_rows

    # ------------------------------------------------------------------ internals
    def _hidden(self, group: list[int], requests: Sequence[ScoreRequest], torch: Any) -> list[Any] | None:
        """Final hidden states at each request's scored positions (None: the blocked head is not usable)."""
        if self.blocked_head is None:
            self.blocked_head = self._check_head(requests[group[0]], torch)
        if not self.blocked_head:
            return None
        reqs = [requests[i] for i in group]
        lengths = [len(r.input_ids) - 1 for r in reqs]
        width = max(lengths)
        ids = torch.zeros((len(reqs), width), dtype=torch.long)
        for b, r in enumerate(reqs):
            ids[b, :lengths[b]] = torch.tensor(r.input_ids[:-1], dtype=torch.long)
        mask = None
        if min(lengths) != width:  # right padding: real positions never attend to the pads after them
            mask = torch.zeros((len(reqs), width), dtype=torch.long)
            for b, n in enumerate(lengths):
                mask[b, :n] = 1
            mask = mask.to(self.device)
        out = self._decoder()(input_ids=ids.to(self.device), attention_mask=mask, use_cache=False)
        self.forward_calls += 1
        h = out[0]
        return [h[b, r.start - 1:lengths[b]] for b, r in enumerate(reqs)]

    def _decoder(self) -> Any:
        decoder = self.model.get_decoder() if hasattr(self.model, "get_decoder") else None
        return decoder if decoder is not None and decoder is not self.model else self.model.model

    def _head(self, h: Any, torch: Any) -> Any:
        """The model's output layer and final logit processing on a block of hidden states, as float32."""
        logits = self.model.get_output_embeddings()(h)
        cfg = self.model.config
        cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        cap = getattr(cfg, "final_logit_softcapping", None)
        if cap:
            logits = torch.tanh(logits / cap) * cap
        scale = getattr(cfg, "logit_scale", None)  # Cohere
        if isinstance(scale, (int, float)) and getattr(cfg, "model_type", "").startswith("cohere"):
            logits = logits * scale
        divisor = getattr(cfg, "logits_scaling", None)  # Granite
        if isinstance(divisor, (int, float)) and divisor:
            logits = logits / divisor
        return logits.float()

    def _check_head(self, req: ScoreRequest, torch: Any) -> bool:
        """Whether ``_head`` on the decoder's last hidden state reproduces the model's own last logits."""
        try:
            with torch.inference_mode():
                ids = torch.tensor([req.input_ids[:-1]], dtype=torch.long, device=self.device)
                own = self.model(input_ids=ids, use_cache=False, logits_to_keep=1).logits[0, -1].float()
                h = self._decoder()(input_ids=ids, use_cache=False)[0][0, -1:]
                mine = self._head(h, torch)[0]
            self.forward_calls += 2
        except (AttributeError, TypeError, ValueError, RuntimeError):
            mine, own = None, None
        tol = 1e-4 if self.model.dtype == torch.float32 else 2e-2
        ok = mine is not None and own is not None and mine.shape == own.shape and bool(
            (mine - own).abs().max() <= tol * max(1.0, float(own.abs().max())))
        if not ok:
            self.notes.append("the output layer could not be applied in row blocks for this architecture (its "
                              "logits differ from the model's own); whole-request logits were used")
        return ok

    def _whole_logits(self, req: ScoreRequest) -> Any:
        """Fallback: the model's own forward for one request's rows (``n x vocab`` logits at once)."""
        torch, _ = torch_modules()
        if self._whole is not None and self._whole[0] is req:
            return self._whole[1]
        ids = torch.tensor([req.input_ids[:-1]], dtype=torch.long, device=self.device)
        logits = self.model(input_ids=ids, use_cache=False, logits_to_keep=req.n_rows).logits[0, -req.n_rows:].float()
        self.forward_calls += 1
        self._whole = (req, logits)
        return logits

    def _rows(self, logits: Any, targets: Any, torch: Any, key: str) -> TokenScores:
        if logits.shape[-1] != self._vocab.vocab_size:
            raise InputError(f"model returned {logits.shape[-1]} logits per position, config says "
                             f"{self._vocab.vocab_size}", where=self.name)
        lp = torch.log_softmax(logits, dim=-1)
        target_lp = lp.gather(1, targets[:, None])[:, 0]
        greedy = lp.argmax(dim=-1)
        return TokenScores(target_logprobs=target_lp.cpu().numpy(), full=lp.cpu().numpy(),
                           greedy_ids=greedy.cpu().numpy())

    def generate(self, requests: Sequence[GenerateRequest]) -> Iterator[Generation]:
        torch, _ = torch_modules()
        for req in requests:
            ids = torch.tensor([req.prompt_ids], dtype=torch.long, device=self.device)
            new: list[int] = []
            cache_arg = self._cache_arg()
            with torch.inference_mode():
                out = self.model(input_ids=ids, use_cache=True, logits_to_keep=1)
                self.forward_calls += 1
                past = getattr(out, cache_arg)
                for _ in range(req.max_new_tokens):
                    token = int(out.logits[0, -1].float().argmax())
                    new.append(token)
                    if token in req.stop_ids or len(new) >= req.max_new_tokens:
                        break
                    step = torch.tensor([[token]], dtype=torch.long, device=self.device)
                    out = self.model(input_ids=step, use_cache=True, logits_to_keep=1, **{cache_arg: past})
                    self.forward_calls += 1
                    past = getattr(out, cache_arg)
            self.tokens_generated += len(new)
            yield Generation(token_ids=new)

    def _cache_arg(self) -> str:
        """``cache`` (transformers >= 5.2x) or ``past_key_values`` (older): the KV-cache argument's name."""
        import inspect

        params = inspect.signature(self.model.forward).parameters
        return "cache" if "cache" in params else "past_key_values"

    def close(self) -> None:
        if self.on_close is not None and self.model is not None:
            self.on_close(self.model)
        self.model = None
        self._whole = None
        try:
            import gc

            gc.collect()
            torch, _ = torch_modules()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except DependencyError:  # pragma: no cover
            pass


def _concat(parts: list[TokenScores], np: Any) -> TokenScores:
    if len(parts) == 1:
        return parts[0]
    return TokenScores(target_logprobs=np.concatenate([p.target_logprobs for p in parts]),
                       full=np.concatenate([p.full for p in parts]),
                       greedy_ids=np.concatenate([p.greedy_ids for p in parts]))


def vocab_info(model: Any, tokenizer: Any, add_bos: bool) -> VocabInfo:
    """The token space of a loaded model: logits width (config vocab_size, may be padded) and BOS."""
    size = model.get_output_embeddings().weight.shape[0] if model.get_output_embeddings() is not None else \
        int(model.config.vocab_size)
    eos = getattr(tokenizer, "eos_token_id", None)
    return VocabInfo(vocab_size=int(size), bos_token_id=getattr(tokenizer, "bos_token_id", None), add_bos=add_bos,
                     eos_token_ids=(eos,) if isinstance(eos, int) else ())


def load_tokenizer(path: str) -> Any:
    _, transformers = torch_modules()
    try:
        return transformers.AutoTokenizer.from_pretrained(path, **NO_CODE)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot load the tokenizer: {_first_line(exc)}", path=path) from None


#: a PEFT adapter's files in a model folder (transformers merges them into the model when peft is installed)
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_FILES = (ADAPTER_CONFIG, "adapter_model.safetensors", "adapter_model.bin")


def adapter_files(path: str) -> list[str]:
    """The PEFT adapter files in the folder ``path`` (empty when there is none)."""
    root = Path(path)
    return [name for name in ADAPTER_FILES if os.path.lexists(root / name)] if root.is_dir() else []


def adapter_note(path: str, apply: bool) -> str | None:
    """What the report says about an adapter in the reference folder (None when there is none)."""
    found = adapter_files(path)
    if not found:
        return None
    if apply:
        return f"the reference is the base model with the PEFT adapter in its folder merged ({', '.join(found)})"
    return (f"the reference folder holds a PEFT adapter ({', '.join(found)}): not applied, the reference is the base "
            "model alone (--reference-adapter evaluates against base + adapter)")


def _base_view(path: Path) -> Any:
    """A temporary folder of links to everything in ``path`` but the adapter's files: transformers loads the base
    alone from it whether or not peft is installed (it merges an adapter it finds into the model)."""
    import tempfile

    view = tempfile.TemporaryDirectory(prefix="qcheck-base-")
    for child in path.iterdir():
        if child.name not in ADAPTER_FILES:
            os.symlink(child.resolve(), Path(view.name) / child.name, target_is_directory=child.is_dir())
    return view


def _merge_adapter(model: Any, path: str) -> Any:
    """Base + the folder's PEFT adapter, merged (``--reference-adapter``); safetensors adapter weights only."""
    root = Path(path)
    if not (root / ADAPTER_CONFIG).is_file() or not (root / "adapter_model.safetensors").is_file():
        raise InputError("--reference-adapter needs adapter_config.json and adapter_model.safetensors in the reference "
                         "folder (an adapter_model.bin is a pickle: never loaded)", path=path)
    try:
        import peft
    except ImportError:
        raise UsageError("--reference-adapter applies the adapter with peft: pip install 'peft>=0.13'") from None
    import warnings

    try:
        with warnings.catch_warnings():  # peft calls transformers APIs transformers deprecates: not the user's concern
            warnings.simplefilter("ignore", FutureWarning)
            merged = peft.PeftModel.from_pretrained(model, path, is_trainable=False).merge_and_unload()
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise InputError(f"peft cannot apply the reference's adapter: {_first_line(exc)}", path=path) from None
    return merged


def load_reference(path: str, dtype: str = "float32", device: str = "cpu",
                   max_memory: dict[str | int, str] | None = None, adapter: bool = False) -> tuple[Any, Any, str]:
    """Load the unquantised reference model (eval mode) and its tokenizer; returns (model, tokenizer, input device).

    ``device="auto"`` places it with accelerate's ``device_map="auto"`` within ``max_memory``; what does not fit
    is offloaded to a temporary folder on disk (deleted with the model) and streamed in layer by layer. A PEFT
    adapter in the folder is left out unless ``adapter`` (``--reference-adapter``): then it is merged."""
    _, transformers = torch_modules()
    p = Path(path)
    if not p.is_dir() or not (p / "config.json").is_file():
        raise InputError("the reference must be a local model directory with config.json (an unquantised "
                         "transformers checkpoint)", path=path)
    check_reference(path)  # no custom code, safetensors weights only: before transformers reads a byte
    view = _base_view(p) if adapter_files(path) else None
    torch_dtype = resolve_dtype(dtype)
    input_device, device_map = resolve_device(device)
    tokenizer = load_tokenizer(path)
    kwargs: dict[str, Any] = {"dtype": torch_dtype, "use_safetensors": True, **NO_CODE}
    offload = None
    if max_memory and not device_map:
        raise UsageError("--max-memory places the model with accelerate: use --device auto (and install accelerate)")
    if device_map:
        import tempfile

        offload = tempfile.TemporaryDirectory(prefix="qcheck-offload-")
        kwargs.update(device_map=device_map, offload_folder=offload.name)
        if max_memory:
            kwargs["max_memory"] = max_memory
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(view.name if view else path, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"transformers cannot load the reference: {_first_line(exc)}", path=path) from None
    if adapter:
        model = _merge_adapter(model, path)
    model.qcheck_base_view = view  # lives (and is deleted) with the model: offloaded weights may be read through it
    qconf = getattr(model.config, "quantization_config", None)
    if qconf:
        raise InputError("the reference is itself quantised (config.json has quantization_config); pass the "
                         "unquantised model as --reference", path=path)
    if not device_map and input_device != "cpu":
        model = model.to(input_device)
    if device_map:
        model.qcheck_offload_folder = offload  # lives (and is deleted) with the model
        first = model.get_input_embeddings().weight.device
        input_device = "cpu" if first.type in ("meta", "cpu") else str(first)  # meta: offloaded to disk
    model.eval()
    return model, tokenizer, input_device


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
