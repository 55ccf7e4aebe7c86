"""A GGUF scored by llama.cpp's own CPU/GPU kernels, in process, through llama-cpp-python.

Why: simulated dequantisation shows what the *weights* lost; llama.cpp also quantises activations for its
integer dot products (e.g. ``Q8_K``/``Q8_0`` activation blocks on CPU), fuses ops and accumulates in its own
order. This runner returns the engine's own full-vocabulary logits (``logits_all=True``, docs/research/evals.md
§1.7 item 2), so KL divergence against the reference is exact, not a top-k bound.

Install: qcheck's ``llamacpp`` extra (``pip install '.[llamacpp]'`` in a checkout). Candidates are given as ``--candidate [NAME=]llamacpp:PATH.gguf``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from qcheck.errors import InputError, require
from qcheck.eval.native import Vetted, still_vetted, vet
from qcheck.eval.runners.base import (
    Capabilities,
    GenerateRequest,
    Generation,
    ScoreRequest,
    TokenScores,
    VocabInfo,
)

PREFIX = "llamacpp:"
#: extra context beyond the longest request (the harness truncates items to --max-length)
CTX_MARGIN = 8
#: llama.cpp's --cache-type-k/-v names -> ggml type ids (ggml/include/ggml.h:390-420, llama.cpp b11312)
GGML_KV_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in float64, returned as float32 (what the reference runner returns)."""
    x = np.asarray(logits, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    z = x - m
    return (z - np.log(np.exp(z).sum(axis=-1, keepdims=True))).astype(np.float32)


def first_divergence(expected: Sequence[int], got: Sequence[int]) -> int | None:
    """Index of the first differing token (or the shorter length), None when equal."""
    for i, (a, b) in enumerate(zip(expected, got, strict=False)):
        if a != b:
            return i
    return None if len(expected) == len(got) else min(len(expected), len(got))


@contextlib.contextmanager
def without_weight_repacking() -> Iterator[None]:
    """Load with llama.cpp's extra CPU buffer types off (``use_extra_bufts``, llama.cpp's ``--no-repack``).

    Those buffers repack Q4_0/Q8_0/K-quant weights for AMX or AVX tile kernels. Virtual machines may advertise AMX
    in CPUID without enabling it, and llama.cpp then dies of SIGILL mid-eval (seen on this project's CI machines);
    the generic ggml kernels compute the same quantised dot products. llama-cpp-python has no keyword for the flag,
    so its default-parameters function is wrapped for the duration of the load."""
    try:
        import llama_cpp.llama_cpp as bindings
    except ImportError:  # pragma: no cover - the caller already required llama_cpp
        yield
        return
    defaults = bindings.llama_model_default_params

    def no_repack() -> Any:
        params = defaults()
        if hasattr(params, "use_extra_bufts"):
            params.use_extra_bufts = False
        return params

    bindings.llama_model_default_params = no_repack
    try:
        yield
    finally:
        bindings.llama_model_default_params = defaults


class LlamaCppRunner:
    """The runner protocol over a ``llama_cpp.Llama`` built with ``logits_all=True``: full rows, greedy."""

    capabilities = Capabilities(has_full_logprobs=True, has_prompt_logprobs=True, can_generate=True)

    def __init__(self, path: str | Vetted, name: str, *, n_ctx: int = 2048, n_threads: int | None = None,
                 n_gpu_layers: int = 0, seed: int = 0, cache: tuple[str, str] = ("f16", "f16"),
                 flash_attn: bool = True):
        """``path`` is inspected by qcheck first (``qcheck.eval.native.vet``, default limits; pass a ``Vetted`` for
        others): a file qcheck refuses never reaches llama.cpp. ``cache`` is the KV cache's (K, V) types (llama.cpp's ``--cache-type-k/-v`` names); ``flash_attn`` is
        llama.cpp's own default (``--flash-attn auto`` resolves to on for the CPU backend, src/llama-context.cpp:
        557-560; llama-cpp-python alone defaults to off) and a quantised V cache requires it."""
        llama_cpp = require("llama_cpp", "llamacpp", "the llama.cpp candidate backend")
        unknown = [t for t in cache if t not in GGML_KV_TYPES]
        if unknown:
            from qcheck.errors import UsageError

            raise UsageError(f"llama.cpp has no KV cache type {unknown[0]!r}; it takes {', '.join(GGML_KV_TYPES)}")
        self.cache = cache
        self.flash_attn = flash_attn
        if not isinstance(path, Vetted):
            if not Path(path).exists():
                raise InputError("no such GGUF file", path=path)
            path = vet(path)
        vetted = path
        #: what ``qcheck inspect`` says about the file (``qcheck.model.Inspection``)
        self.inspection = vetted.inspection
        self.path = vetted.path
        self.name = name
        self.backend = "llama.cpp"
        self.notes: list[str] = []
        threads = n_threads or max(1, os.cpu_count() or 1)
        try:
            with without_weight_repacking():
                self.llm = llama_cpp.Llama(model_path=still_vetted(vetted), logits_all=True, n_ctx=n_ctx,
                                           n_batch=min(n_ctx, 512), n_threads=threads, n_threads_batch=threads,
                                           n_gpu_layers=n_gpu_layers, seed=seed, verbose=False,
                                           flash_attn=flash_attn, type_k=GGML_KV_TYPES[cache[0]],
                                           type_v=GGML_KV_TYPES[cache[1]])
        except (ValueError, RuntimeError, OSError) as exc:
            raise InputError(f"llama.cpp cannot load the GGUF: {str(exc).strip().splitlines()[0] if str(exc) else exc}",
                             path=self.path) from None
        # llama.cpp may round the context up; llama-cpp-python sizes its logits buffer by the request
        self.n_ctx = min(n_ctx, int(self.llm.n_ctx()))
        meta = getattr(self.llm, "metadata", {}) or {}
        add_bos = meta.get("tokenizer.ggml.add_bos_token")
        if add_bos is None:
            model = getattr(self.llm, "_model", None)
            add_bos_flag = bool(model.add_bos_token()) if model is not None and hasattr(model, "add_bos_token") else True
        else:
            add_bos_flag = str(add_bos).lower() == "true"
        bos = int(self.llm.token_bos())
        eos = int(self.llm.token_eos())
        self._vocab = VocabInfo(vocab_size=int(self.llm.n_vocab()), bos_token_id=bos if bos >= 0 else None,
                                add_bos=add_bos_flag, eos_token_ids=(eos,) if eos >= 0 else ())
        #: counters for tests and benchmarks
        self.forward_calls = 0
        self.rows_scored = 0
        self.tokens_generated = 0

    def vocab(self) -> VocabInfo:
        return self._vocab

    def check_tokenizer(self, samples: Sequence[tuple[str, tuple[int, ...]]]) -> None:
        """Compare llama.cpp's tokenisation of a few texts with the reference's ids; mismatches become notes.

        Scoring is unaffected (the harness gives token ids), but a GGUF whose tokenizer disagrees with the
        reference will see different tokens in deployment, so the user is told where they diverge."""
        for text, ids in samples:
            got = self.llm.tokenize(text.encode("utf-8"), add_bos=self._vocab.add_bos, special=True)
            at = first_divergence(list(ids), got)
            if at is not None:
                self.notes.append(f"llama.cpp tokenises {text[:40]!r} differently from the reference from token "
                                  f"{at} on (reference {list(ids[at:at + 3])}, llama.cpp {got[at:at + 3]}); "
                                  "scores use the reference's ids")
                return

    def _eval(self, ids: Sequence[int]) -> None:
        if len(ids) > self.n_ctx:
            raise InputError(f"{len(ids)} tokens exceed the llama.cpp context of {self.n_ctx}", where=self.name)
        self.llm.reset()
        self.llm.eval(list(ids))
        self.forward_calls += 1

    def score(self, requests: Sequence[ScoreRequest]) -> Iterator[TokenScores]:
        for req in requests:
            n = req.n_rows
            if req.start < 1 or n < 1:
                raise InputError(f"request {req.key}: nothing to score (start {req.start}, "
                                 f"{len(req.input_ids)} tokens)")
            prefix = req.input_ids[:-1]
            self._eval(prefix)
            logits = np.asarray(self.llm.scores[req.start - 1:len(prefix)], dtype=np.float32)
            if logits.shape != (n, self._vocab.vocab_size):
                raise InputError(f"llama.cpp returned logits of shape {logits.shape}, expected "
                                 f"({n}, {self._vocab.vocab_size})", where=self.name)
            lp = log_softmax(logits)
            targets = np.asarray(req.targets, dtype=np.int64)
            self.rows_scored += n
            yield TokenScores(target_logprobs=lp[np.arange(n), targets].astype(np.float32), full=lp)

    def generate(self, requests: Sequence[GenerateRequest]) -> Iterator[Generation]:
        for req in requests:
            if len(req.prompt_ids) + req.max_new_tokens > self.n_ctx:
                raise InputError(f"prompt + {req.max_new_tokens} new tokens exceed the llama.cpp context of "
                                 f"{self.n_ctx}", where=self.name)
            self._eval(req.prompt_ids)
            new: list[int] = []
            while len(new) < req.max_new_tokens:
                token = int(np.argmax(self.llm.scores[self.llm.n_tokens - 1]))
                new.append(token)
                if token in req.stop_ids or len(new) >= req.max_new_tokens:
                    break
                self.llm.eval([token])
                self.forward_calls += 1
            self.tokens_generated += len(new)
            yield Generation(token_ids=new)

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            try:
                llm.close()
            except AttributeError:  # pragma: no cover - older llama-cpp-python
                pass
            self.llm = None


#: texts the GGUF's own tokenizer is checked on against the reference tokenizer (scripts, digits, code)
TOKENIZER_PROBES = (
    "The quick brown fox jumps over the lazy dog. 12 + 30 = 42.",
    "Le renard brun saute. Größe, Maß. Быстрая лиса. 敏捷的狐狸。",
    "def add(a, b):\n    return a + b  # sum",
)


#: llama.cpp's Gemma 2 / Gemma 3 graphs (src/models/gemma2.cpp, gemma3.cpp) never read ``query_pre_attn_scalar``: they
#: scale queries by 1/sqrt(head_dim), or by 1/sqrt(hidden_size / heads) for the layer count of the 27B models
LLAMA_CPP_27B_LAYERS = {"gemma2": 46, "gemma3_text": 62, "gemma3": 62}


def attention_scale_note(config: Any) -> str | None:
    """Why llama.cpp cannot match a Gemma 2/3 reference whose ``query_pre_attn_scalar`` is not what llama.cpp assumes.

    transformers scales attention scores by ``query_pre_attn_scalar ** -0.5``; llama.cpp by ``head_dim ** -0.5``
    (``(hidden/heads) ** -0.5`` when the layer count is the 27B's). The released 2B/9B/27B (and Gemma 3) configs
    agree with llama.cpp; a fine-tune or pruned model with another value runs with the wrong scale in llama.cpp,
    which no quantisation explains (a tiny Gemma 2 F32 export: KLD 0.025 instead of 4e-8)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    model_type = getattr(text, "model_type", None)
    scalar = getattr(text, "query_pre_attn_scalar", None)
    if model_type not in LLAMA_CPP_27B_LAYERS or not isinstance(scalar, (int, float)) or scalar <= 0:
        return None
    heads = int(getattr(text, "num_attention_heads", 0) or 0)
    head_dim = getattr(text, "head_dim", None) or (int(text.hidden_size) // heads if heads else None)
    if not head_dim:
        return None
    layers = int(getattr(text, "num_hidden_layers", 0) or 0)
    used = int(text.hidden_size) / heads if layers == LLAMA_CPP_27B_LAYERS[model_type] and heads else float(head_dim)
    if abs(used - float(scalar)) <= 1e-6 * float(scalar):
        return None
    return (f"llama.cpp scales {model_type} attention by 1/sqrt({used:g}), ignoring the reference's "
            f"query_pre_attn_scalar {scalar:g} (transformers uses 1/sqrt({scalar:g})): this candidate's KLD includes "
            "that implementation difference, not only quantisation loss")


def build(name: str, target: str, context: Any) -> Any:
    """The ``llamacpp`` backend (``--candidate NAME=llamacpp:PATH.gguf``): the GGUF under llama.cpp's kernels."""
    from qcheck.eval.runners import BuiltRunner, quantization_json

    max_length = int(getattr(context, "max_length", 512) or 512)
    kv = getattr(context, "kv_cache", None)
    cache = (_kv_name(kv.k if kv else None), _kv_name(kv.v if kv else None))
    if not Path(target).exists():
        raise InputError("no such GGUF file", path=target)
    runner = LlamaCppRunner(vet(target, context.limits), name, n_ctx=max(256, max_length + CTX_MARGIN), cache=cache,
                            n_gpu_layers=-1 if getattr(context, "device", "cpu") != "cpu" else 0)
    tok = getattr(context, "tokenizer", None)
    if tok is not None:
        samples = [(text, tuple(tok(text, add_special_tokens=True)["input_ids"])) for text in TOKENIZER_PROBES]
        runner.check_tokenizer(samples)
    notes = ["llama.cpp kernels in process (llama-cpp-python): full-vocabulary logits, exact KL divergence; "
             f"KV cache {cache[0] if cache[0] == cache[1] else f'K {cache[0]}, V {cache[1]}'}, flash attention "
             f"{'on' if runner.flash_attn else 'off'} (docs/engines.md)"]
    scale_note = attention_scale_note(context.reference_config) if getattr(context, "reference_config", None) \
        is not None else None
    if scale_note:
        notes.append(scale_note)
    quantization = quantization_json(runner.inspection)
    return BuiltRunner(runner=runner, notes=notes, quantization=quantization,
                       activations="quantised by llama.cpp's kernels (real engine)",
                       kv_cache={"k": cache[0], "v": cache[1], "source": "set (llama.cpp type_k/type_v)",
                                 "flash_attn": runner.flash_attn})


def _kv_name(name: str | None) -> str:
    """llama.cpp's name for a KV cache type spelling (None: its default f16)."""
    if name is None:
        return "f16"
    return {"float16": "f16", "fp16": "f16", "half": "f16", "float32": "f32", "fp32": "f32",
            "bfloat16": "bf16"}.get(name, name)
