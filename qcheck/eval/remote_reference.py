"""An OpenAI-compatible endpoint serving the unquantised model as ``--reference`` (vLLM on the cluster that serves a
70B-1T model, SGLang, llama-cpp-python, llama-server...).

Why: a model too large for the machine that runs ``qcheck eval`` is still measurable where it is served. The
endpoint runner (``qcheck.eval.runners.endpoint``) already speaks every wire protocol; here its rows become the
reference cache entry that candidates are compared with, exactly like a local reference's.

What comes back decides what the KL divergence is, and the report says which:

- **full vocabulary** (``cache.kind`` ``full-u16``, ``kld_kind`` ``exact``): qcheck asks for ``k = V`` prompt log-probs
  (vLLM serves them when started with ``--max-logprobs`` >= V or -1) and every row comes back complete, keyed by token
  id. Only when the answer is bounded: ``rows x V x FULL_ENTRY_BYTES`` of JSON must stay under the HTTP client's
  response limit (``MAX_RESPONSE_BYTES``), which a 128k vocabulary exceeds beyond a handful of positions.
- **top-k approximation** (``cache.kind`` ``topk``, ``kld_kind`` ``lower-bound``): otherwise, the server's top-k per
  position (``#top_k=K``, default 20) plus the actual token. KL divergence is the bucketed lower bound over the
  top-k sets of both sides (docs/research/evals.md §5.7); NLL, PPL ratio, Δp and top-1 stay exact.

The local side needs only the reference's small files: ``--reference-files DIR`` with its tokenizer (every request
is token ids from it, checked against the server's) and ``config.json`` (simulated candidates are dequantised into
that architecture). No weights.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import numpy as np

from qcheck.errors import InputError, UsageError
from qcheck.eval.cache import KIND_FULL, KIND_TOPK, PAD_LOGPROB
from qcheck.eval.runners.base import TokenScores, VocabInfo

#: JSON bytes per (position, token) entry of a full-vocabulary answer (vLLM: ``"123": {"logprob": -12.3456789,
#: "rank": 1234, "decoded_token": "abc"}``), used to bound the answer before asking for it
FULL_ENTRY_BYTES = 72
DEFAULT_TOP_K = 20


def is_endpoint(reference: str) -> bool:
    """Whether ``--reference`` names a server rather than a model directory."""
    return reference.startswith(("http://", "https://"))


@dataclass
class RemoteReference:
    """The parsed ``--reference URL[#model=M&top_k=K|full|auto&api_key_env=VAR&...]``."""

    target: str  # URL#fragment without top_k (what EndpointOptions parses)
    files: str  # the local directory with tokenizer (and config.json)
    top_k: int | None  # None: full vocabulary when bounded, else DEFAULT_TOP_K
    full_required: bool = False
    notes: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, reference: str, files: str | None) -> RemoteReference:
        url, _, fragment = reference.partition("#")
        pairs = parse_qsl(fragment, keep_blank_values=True)
        top_k: int | None = None
        full_required = False
        rest = []
        for key, value in pairs:
            if key != "top_k":
                rest.append((key, value))
            elif value in ("full", "auto"):
                full_required = value == "full"
            else:
                try:
                    top_k = int(value)
                except ValueError:
                    raise UsageError(f"--reference top_k {value!r}: use a number, 'full' or 'auto'") from None
                if top_k < 1:
                    raise UsageError("--reference top_k must be at least 1")
        if not files:
            raise UsageError("an endpoint --reference needs --reference-files DIR: a local folder with the reference's "
                             "tokenizer (and config.json for simulated candidates); no weights are needed")
        root = Path(files)
        if not root.is_dir():
            raise InputError("--reference-files must be a directory with the reference's tokenizer", path=files)
        target = url + ("#" + urlencode(rest) if rest else "")
        return cls(target=target, files=str(root), top_k=top_k, full_required=full_required)

    def vocab(self, tokenizer: Any, config: Any, add_bos: bool) -> VocabInfo:
        """The token space: the config's (possibly padded) vocabulary size, else the tokenizer's."""
        text = config.get_text_config() if config is not None and hasattr(config, "get_text_config") else config
        size = getattr(text, "vocab_size", None) if text is not None else None
        if not isinstance(size, int) or size <= 0:
            size = len(tokenizer)
        eos = getattr(tokenizer, "eos_token_id", None)
        return VocabInfo(vocab_size=int(size), bos_token_id=getattr(tokenizer, "bos_token_id", None),
                         add_bos=add_bos, eos_token_ids=(eos,) if isinstance(eos, int) else ())

    def fingerprint(self, runner: Any) -> str:
        """What identifies the served model for the cache key: the URL, the model the server named, how it was
        asked. The weights behind a name are not visible: ``--no-cache`` after redeploying under the same name."""
        parts = {"url": runner.opts.url, "model": runner.model, "flavour": runner.flavour, "mode": runner.mode,
                 "format": runner.prompt_format, "top_k": runner.opts.top_k}
        return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def connect(remote: RemoteReference, tokenizer: Any, vocab: VocabInfo, longest: int, limits: Any,
            run: Any = None) -> tuple[Any, str]:
    """An EndpointRunner for the reference: full vocabulary when asked or bounded and the server serves it, else
    top-k. Returns (runner, "full"|"topk")."""
    from qcheck.eval.runners.endpoint import EndpointOptions, EndpointRunner
    from qcheck.eval.runners.http import MAX_RESPONSE_BYTES

    def build(k: int) -> Any:
        opts = EndpointOptions.parse(remote.target)
        opts.top_k = k  # the reference may ask for more than a candidate's MAX_TOP_K: its answer is bounded here
        return EndpointRunner("reference", opts, tokenizer, vocab, run=run)

    full_bytes = max(1, longest) * vocab.vocab_size * FULL_ENTRY_BYTES
    if remote.top_k is None:
        if full_bytes > MAX_RESPONSE_BYTES:
            if remote.full_required:
                raise UsageError(f"--reference top_k=full: {longest} positions x {vocab.vocab_size} tokens is about "
                                 f"{full_bytes / 2**20:.0f} MB of JSON per request, over the {MAX_RESPONSE_BYTES / 2**20:g} MB "
                                 "response limit; lower --max-length or use top_k=K")
            remote.notes.append(f"full-vocabulary rows would be about {full_bytes / 2**20:.0f} MB of JSON per request "
                                f"({longest} positions x {vocab.vocab_size} tokens), over the {MAX_RESPONSE_BYTES / 2**20:g} "
                                f"MB response limit: top-{DEFAULT_TOP_K} instead")
        else:
            runner = build(vocab.vocab_size)
            if runner.mode != "generate":
                return runner, "full"
            if remote.full_required:
                raise UsageError(f"--reference top_k=full: the endpoint refuses {vocab.vocab_size} prompt log-probs "
                                 f"per position ({runner.fallback_reason}); vLLM needs --max-logprobs -1 (or >= "
                                 "the vocabulary)")
            remote.notes.append(f"the endpoint refused full-vocabulary prompt log-probs ({runner.fallback_reason}): "
                                f"top-{DEFAULT_TOP_K} instead")
    runner = build(remote.top_k or DEFAULT_TOP_K)
    if runner.mode == "generate":
        raise InputError(f"the reference endpoint returns no prompt log-probs ({runner.fallback_reason}); a reference "
                         "must score tokens: use a server that does (vLLM, SGLang, llama-cpp-python)",
                         where="reference")
    return runner, "topk"


def full_rows(scores: TokenScores, vocab_size: int, where: str) -> TokenScores | None:
    """The same rows as full-vocabulary log-prob rows when every position lists every token id, else None."""
    if scores.topk_ids is None or scores.topk_logprobs is None:
        return scores
    n = scores.n_rows
    if scores.topk_ids.shape[1] < vocab_size or np.isnan(scores.target_logprobs).any():
        return None
    full = np.full((n, vocab_size), np.float32(PAD_LOGPROB), dtype=np.float32)
    for i in range(n):
        ids = scores.topk_ids[i]
        if np.unique(ids[ids >= 0]).size < vocab_size:
            return None
        full[i, ids] = scores.topk_logprobs[i]
    if not np.isfinite(full).all():
        raise InputError("the endpoint returned a non-finite log-prob", where=where)
    return TokenScores(target_logprobs=scores.target_logprobs, full=full, greedy_ids=scores.greedy_ids)


def label(kind: str, top_k: int | None) -> str:
    """How the report names the reference's log-probs."""
    if kind == "full":
        return "full vocabulary from the endpoint (exact KL divergence)"
    return (f"top-{top_k} approximation from the endpoint: KL divergence is the bucketed lower bound over the top-{top_k} "
            "sets (NLL, PPL ratio, Δp and top-1 are exact)")

def write_reference(runner: Any, kind: str, encoded: list[Any], encoder: Any, make_writer: Any,
                    progress: Any) -> tuple[Any, str, int]:
    """Score every request on the endpoint and stream its rows into a new cache entry.

    ``kind`` is what ``connect`` asked for; "full" holds only when the first request's rows list every token (a
    server keying its top-k by strings cannot name every token), otherwise the entry is top-k. ``make_writer(kind,
    topk)`` opens the entry. Returns (the writer, the kind written, requests written)."""
    vocab_size = runner.reference.vocab_size
    runner.prefetch(encoded)  # concurrent, retried, resumable: the cluster does the work
    writer = None
    written = 0
    redirects: dict[str, dict[str, Any]] = {}
    excluded: dict[str, str] = {}
    try:
        for enc in encoded:
            requests = []
            for original in enc.score:  # a text-prompt server scores its own tokenisation: candidates follow it
                scored = runner.scored_as(original)
                if isinstance(scored, str):
                    excluded[original.key] = scored
                    progress.advance()
                    continue
                if scored is not original:
                    redirects[original.key] = {"key": scored.key, "ids": list(scored.input_ids), "start": scored.start}
                requests.append(scored)
            for req, scores in zip(requests, runner.score(requests), strict=True):
                where = f"reference endpoint, request {req.key}"
                full = full_rows(scores, vocab_size, where) if kind == "full" else None
                if writer is None:
                    k = min(runner.opts.top_k + 1, vocab_size)
                    if kind == "full" and full is None:  # asked for every token, given fewer: keep what came
                        kind = "topk"
                        k = min(scores.topk_ids.shape[1] if scores.topk_ids is not None else DEFAULT_TOP_K + 1, k)
                    writer = make_writer(KIND_FULL if kind == "full" else KIND_TOPK, None if kind == "full" else k)
                if kind == "full":
                    if full is None:
                        raise InputError("the endpoint returned full-vocabulary rows for the first request but not "
                                         "for this one; use --reference URL#top_k=K", where=where)
                    writer.add_scores(req.key, full)
                else:
                    writer.add_topk(req.key, scores)
                written += 1
                progress.advance()
            if enc.generate is not None:
                if writer is None:
                    writer = make_writer(KIND_FULL if kind == "full" else KIND_TOPK,
                                         None if kind == "full" else min(runner.opts.top_k + 1, vocab_size))
                gen = next(iter(runner.generate([enc.generate])))
                # decoded here as a local reference's are: servers detokenise spaces and specials their own way
                gen.text = encoder.decode(gen.token_ids)
                writer.add_generation(enc.generate.key, gen)
                written += 1
                progress.advance()
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    if writer is None:
        raise InputError("no requests to send to the reference endpoint")
    writer.meta.update(redirects=redirects, excluded=excluded)
    return writer, kind, written


def runner_notes(runner: Any) -> list[str]:
    """What the report should say about the reference endpoint's answers beyond the log-prob kind."""
    out = []
    if runner.lossy_generations:
        out.append(f"{runner.lossy_generations} reference generation(s) came back as text that does not re-tokenise "
                   "to the number of tokens the server generated (a partial UTF-8 character was dropped); greedy "
                   "agreement on them understates the candidates")
    if runner.missing_rows or runner.shifted_missing:
        out.append(f"{runner.missing_rows + runner.shifted_missing} reference position(s) the endpoint did not "
                   "return (llama-cpp-python's echo) are left out of every candidate's token metrics")
    if runner.client.retried:
        out.append(f"{runner.client.retried} reference request(s) were retried (429/5xx/timeouts)")
    return out
