"""The unquantised reference (and any dense transformers model): full-vocabulary log-probs on CPU or GPU.

``TransformersRunner`` implements the runner protocol of ``qcheck.eval.runners.base`` for a loaded
``transformers`` causal LM; ``load_reference`` loads the reference checkpoint and its tokenizer.
torch and transformers are imported here, lazily, never on the inspect/check path.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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
    """(torch, transformers), or a DependencyError naming the extra to install."""
    torch = require("torch", "eval", "qcheck eval")
    transformers = require("transformers", "eval", "qcheck eval")
    return torch, transformers


def resolve_dtype(name: str) -> Any:
    torch, _ = torch_modules()
    if name not in DTYPES:
        raise UsageError(f"unknown dtype {name!r}; use one of {', '.join(DTYPES)}")
    return getattr(torch, name)


def resolve_device(name: str) -> tuple[str, str | None]:
    """(device for inputs, device_map for from_pretrained): cpu default; cuda / auto only when present."""
    torch, _ = torch_modules()
    if name not in DEVICES:
        raise UsageError(f"unknown device {name!r}; use one of {', '.join(DEVICES)}")
    if name == "cpu":
        return "cpu", None
    if not torch.cuda.is_available():
        if name == "cuda":
            raise UsageError("--device cuda: no CUDA device is available")
        return "cpu", None
    if name == "auto":
        try:
            import accelerate  # noqa: F401
        except ImportError:
            return "cuda", None
        return "cuda", "auto"
    return "cuda", None


class TransformersRunner:
    """A dense transformers causal LM behind the runner protocol (full rows, prompt log-probs, greedy)."""

    capabilities = Capabilities(has_full_logprobs=True, has_prompt_logprobs=True, can_generate=True)

    def __init__(self, model: Any, vocab: VocabInfo, name: str, backend: str = "transformers",
                 device: str = "cpu"):
        self.model = model
        self._vocab = vocab
        self.name = name
        self.backend = backend
        self.device = device
        #: counters for tests and benchmarks
        self.forward_calls = 0
        self.rows_scored = 0
        self.tokens_generated = 0

    def vocab(self) -> VocabInfo:
        return self._vocab

    def score(self, requests: Sequence[ScoreRequest]) -> Iterator[TokenScores]:
        torch, _ = torch_modules()
        for req in requests:
            n = req.n_rows
            if req.start < 1 or n < 1:
                raise InputError(f"request {req.key}: nothing to score (start {req.start}, {len(req.input_ids)} tokens)")
            ids = torch.tensor([req.input_ids[:-1]], dtype=torch.long, device=self.device)
            with torch.inference_mode():
                out = self.model(input_ids=ids, use_cache=False, logits_to_keep=n)
                logits = out.logits[0, -n:, :].float()
                if logits.shape[-1] != self._vocab.vocab_size:
                    raise InputError(f"model returned {logits.shape[-1]} logits per position, config says "
                                     f"{self._vocab.vocab_size}", where=self.name)
                lp = torch.log_softmax(logits, dim=-1)
                targets = torch.tensor(req.targets, dtype=torch.long, device=lp.device)
                target_lp = lp.gather(1, targets[:, None])[:, 0]
                greedy = lp.argmax(dim=-1)
            self.forward_calls += 1
            self.rows_scored += n
            yield TokenScores(target_logprobs=target_lp.cpu().numpy(), full=lp.cpu().numpy(),
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
        self.model = None
        try:
            import gc

            gc.collect()
            torch, _ = torch_modules()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except DependencyError:  # pragma: no cover
            pass


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


def load_reference(path: str, dtype: str = "float32", device: str = "cpu") -> tuple[Any, Any, str]:
    """Load the unquantised reference model (eval mode) and its tokenizer; returns (model, tokenizer, device)."""
    _, transformers = torch_modules()
    p = Path(path)
    if not p.is_dir() or not (p / "config.json").is_file():
        raise InputError("the reference must be a local model directory with config.json (an unquantised "
                         "transformers checkpoint)", path=path)
    check_reference(path)  # no custom code, safetensors weights only: before transformers reads a byte
    torch_dtype = resolve_dtype(dtype)
    input_device, device_map = resolve_device(device)
    tokenizer = load_tokenizer(path)
    kwargs: dict[str, Any] = {"dtype": torch_dtype, "use_safetensors": True, **NO_CODE}
    if device_map:
        kwargs["device_map"] = device_map
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"transformers cannot load the reference: {_first_line(exc)}", path=path) from None
    qconf = getattr(model.config, "quantization_config", None)
    if qconf:
        raise InputError("the reference is itself quantised (config.json has quantization_config); pass the "
                         "unquantised model as --reference", path=path)
    if not device_map and input_device != "cpu":
        model = model.to(input_device)
    model.eval()
    return model, tokenizer, input_device


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
