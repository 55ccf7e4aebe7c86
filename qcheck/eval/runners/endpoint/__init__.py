"""An OpenAI-compatible HTTP endpoint as an eval candidate: vLLM, SGLang, llama-cpp-python's server, llama.cpp's
llama-server, Ollama, hosted providers (docs/research/evals.md §5).

Why: the number that matters is the one from the engine a user will deploy, with its kernels. Servers return
at most the top-k log-probs per position, so KL divergence is the exact *lower bound* of the bucketed partition
{candidate's top-k} ∪ {rest} (docs/research/evals.md §5.7; computed by ``qcheck.eval.metrics``), labelled as such.

How a candidate is scored, in the order the capability probe tries them (``mode``):

``prompt_logprobs``  vLLM: ``/v1/completions`` with token ids and ``prompt_logprobs: k`` (keys are token ids).
``sglang``           SGLang's native ``/generate`` with ``input_ids``, ``logprob_start_len: 0``,
                     ``top_logprobs_num: k``.
``echo``             OpenAI legacy ``echo: true, logprobs: k`` (vLLM, Together, llama-cpp-python's server);
                     token ids when the server takes them, else text re-tokenised by the server and checked
                     token by token against the reference's ids with the server's tokenize endpoint (and the
                     echoed token count), refusing to compare at the first divergence.
``generate``         The server refuses prompt log-probs (Groq: HTTP 400 on ``logprobs``; llama-server and
                     Ollama: no echo): only generation-based metrics (greedy agreement, task accuracy, flips)
                     are reported, said in one note, and no KL divergence at all.

Requests run concurrently (``concurrency``), are retried with backoff on 429/5xx/timeouts
(``qcheck.eval.runners.http``), and every finished request is appended to a resume file of this eval run
(``RunState``: ``<cache>/eval/endpoints/<run id>/``, keyed by the candidate's configuration, each record signed), so
an interrupted run restarts where it stopped when the user asks for it (``--resume RUN``). A resumed file is used only
when the server still is what it was: the same model id, the same tokenisation of a probe text and the same answer
to the capability probe (``server_identity``); otherwise the run stops (exit 2). Nothing is kept with
``--no-cache``. The API key is read from the environment variable named by ``api_key_env`` and never printed.

Candidates are given as ``--endpoint NAME=URL`` (CLI) or ``NAME=endpoint:URL#model=M&api_key_env=VAR&...``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import numpy as np

from qcheck.errors import InputError, UsageError
from qcheck.eval.runners.base import (
    Capabilities,
    GenerateRequest,
    Generation,
    ScoreRequest,
    TokenScores,
    VocabInfo,
)
from qcheck.eval.runners.endpoint import echo, prompt_logprobs, sglang
from qcheck.eval.runners.endpoint.align import lead, realign, substitute, text_prompt
from qcheck.eval.runners.endpoint.generate import generate_one
from qcheck.eval.runners.endpoint.wire import (
    MAX_TOP_K,
    Misaligned,
    Row,
    TokenStrings,
    Unsupported,
)
from qcheck.eval.runners.http import (
    RETRY_STATUSES,
    EndpointError,
    HttpClient,
    ResumeState,
    RunState,
    env_secret,
    fan_out,
    state_path,
)

MODES = ("auto", "prompt_logprobs", "sglang", "echo", "generate")
FLAVOURS = ("auto", "vllm", "sglang", "llama-cpp-python", "llama-server", "ollama", "openai")
#: ``owned_by`` of ``GET /v1/models`` -> server flavour
OWNERS = {"vllm": "vllm", "sglang": "sglang", "me": "llama-cpp-python", "llamacpp": "llama-server",
          "library": "ollama", "ollama": "ollama"}
#: probe order of log-prob modes per flavour (the generation fallback always comes last)
MODE_ORDER = {
    "vllm": ("prompt_logprobs", "echo"),
    "sglang": ("sglang", "echo"),
    "llama-cpp-python": ("echo",),
    "llama-server": ("echo",),
    "ollama": ("echo",),
    "openai": ("echo", "prompt_logprobs"),
}
#: a 500 from a probe is usually a refusal in disguise (llama-server "Only no echo is supported",
#: llama-cpp-python's validation errors), so probes only retry what is clearly transient
PROBE_RETRY = RETRY_STATUSES - {500}
PROBE_TEXT = "The quick brown fox jumps over the lazy dog."
#: the resume record holding the server's identity when the file was started (``server_identity``)
IDENTITY = "qcheck-server-identity"
#: how far a probe log-prob may move between runs of the same server (batching changes the last digits; another
#: model or a broken server moves it by far more)
PROBE_TOLERANCE = 0.05


@dataclass
class EndpointOptions:
    """How to reach and query one endpoint candidate; every field can be set in the target's ``#fragment``."""

    url: str
    model: str | None = None
    api_key_env: str | None = None
    mode: str = "auto"
    flavour: str = "auto"
    top_k: int = 20
    concurrency: int = 4
    timeout: float = 120.0
    retries: int = 5
    backoff: float = 0.5
    resume: bool = True
    state_dir: str | None = None
    #: the URL requests go to, with its user and password (``url`` is the one shown: password masked); set by parse
    connect_url: str = field(default="", repr=False)

    @classmethod
    def parse(cls, target: str, **overrides: Any) -> EndpointOptions:
        """``URL[#key=value&...]`` plus keyword overrides (CLI flags win over the fragment)."""
        url, _, fragment = target.partition("#")
        values: dict[str, Any] = {"url": url.strip()}
        known = {f.name: f for f in fields(cls)}
        for key, raw in parse_qsl(fragment, keep_blank_values=True):
            if key not in known or key in ("url", "connect_url"):
                raise UsageError(f"endpoint option {key!r} is unknown; known: "
                                 f"{', '.join(k for k in known if k not in ('url', 'connect_url'))}")
            values[key] = raw
        values.update({k: v for k, v in overrides.items() if v is not None})
        opts = cls(**values)
        opts._coerce()
        return opts

    def _coerce(self) -> None:
        try:
            self.top_k = int(self.top_k)
            self.concurrency = int(self.concurrency)
            self.retries = int(self.retries)
            self.timeout = float(self.timeout)
            self.backoff = float(self.backoff)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"endpoint option: {exc}") from None
        if isinstance(self.resume, str):
            self.resume = self.resume.strip().lower() not in ("0", "false", "no", "off")
        if self.mode not in MODES:
            raise UsageError(f"endpoint mode {self.mode!r}; use one of {', '.join(MODES)}")
        if self.flavour not in FLAVOURS:
            raise UsageError(f"endpoint flavour {self.flavour!r}; use one of {', '.join(FLAVOURS)}")
        if not 1 <= self.top_k <= MAX_TOP_K:
            raise UsageError(f"endpoint top_k must be 1..{MAX_TOP_K}")
        if not 1 <= self.concurrency <= 256:
            raise UsageError("endpoint concurrency must be 1..256")
        if not self.url.startswith(("http://", "https://")):
            raise UsageError(f"endpoint URL {self.url!r} must start with http:// or https://")
        self.url = self.url.rstrip("/")
        if self.url.endswith("/v1"):
            self.url = self.url[:-3]
        from qcheck.net import redact

        # a password in the URL (http://user:pw@host) goes to the server, never into a message, report or cache
        self.connect_url, self.url = self.url, redact(self.url)


#: scoring mode -> the module that speaks its wire protocol (``request`` and ``parse``); ``generate`` is separate
PROTOCOLS: dict[str, Any] = {"prompt_logprobs": prompt_logprobs, "sglang": sglang, "echo": echo}

#: names tests and callers import from here
_Unsupported = Unsupported


class EndpointRunner:
    """The runner protocol over an HTTP endpoint (see the module docstring)."""

    def __init__(self, name: str, options: EndpointOptions, tokenizer: Any, reference: VocabInfo,
                 client: HttpClient | None = None, run: RunState | None = None):
        """``run``: where this eval run keeps endpoint results (None: nowhere, unless ``options.state_dir``)."""
        self.name = name
        self.run = run
        #: what the server answered to the capability probe and its tokenisation of ``PROBE_TEXT`` (identity)
        self._probe_answer: Any = None
        self._probe_tokens: list[int] | None = None
        self.opts = options
        self.tok = tokenizer
        self.reference = reference
        self._notes: list[str] = []
        self.client = client or HttpClient(options.connect_url or options.url, api_key=env_secret(options.api_key_env),
                                           timeout=options.timeout, retries=options.retries,
                                           backoff=options.backoff)
        self._strings: TokenStrings | None = None
        self._text_keys: set[str] = set()
        self._verified: set[tuple[int, ...]] = set()
        self.missing_rows = 0
        #: scored positions of text items without a log-prob, beyond llama-cpp-python's first echoed token
        self.other_missing = 0
        #: generation prompts the server tokenised differently (text prompts)
        self.retokenised_prompts = 0
        #: the key of a request the server scored in its own token ids -> the original request
        self._scored: dict[str, ScoreRequest] = {}
        self.unresolved_top1 = 0
        self.lossy_generations = 0
        self.string_mismatches = 0
        #: llama-cpp-python echo of a model without BOS: rows re-aligned, and rows whose token was not returned
        self.shifted_echo = False
        self.shifted_missing = 0
        self.flavour, self.model = self._discover()
        self.tokenize_path, self.server_adds_bos = self._find_tokenizer()
        self.mode, self.prompt_format, self.fallback_reason = self._probe()
        has_lp = self.mode != "generate"
        self.capabilities = Capabilities(has_full_logprobs=False, has_prompt_logprobs=has_lp, can_generate=True,
                                         top_k=options.top_k if has_lp else None)
        self.backend = f"openai:{self.flavour}" + ("" if has_lp else " (generation only)")
        self.state = ResumeState(self._state_file(), None if run is None or options.state_dir else run.key)
        self._check_identity()
        if has_lp:
            self._notes.append(f"endpoint {self.flavour} at {options.url}, model {self.model!r}: prompt log-probs via "
                              f"{self.mode} ({self.prompt_format} prompts), top-{options.top_k}; KL divergence is "
                              "the bucketed lower bound")
        else:
            self._notes.append(f"endpoint {self.flavour} at {options.url} returns no prompt log-probs "
                              f"({self.fallback_reason}); only generation metrics (greedy agreement, task accuracy, "
                              "flips) are reported, no KL divergence")
        if len(self.state) > 1:
            self._notes.append(f"resumed: {len(self.state) - 1} request(s) reused from {self.state.path}")

    # ------------------------------------------------------------------ discovery
    def _discover(self) -> tuple[str, str]:
        flavour = self.opts.flavour
        model = self.opts.model
        listed: list[dict[str, Any]] = []
        try:
            data = self.client.get("/v1/models", retry_statuses=PROBE_RETRY)
            listed = [m for m in (data.get("data") or []) if isinstance(m, dict)] if isinstance(data, dict) else []
        except EndpointError as exc:
            if exc.status in (401, 403):
                raise EndpointError(f"endpoint {self.opts.url} refused the credentials (HTTP {exc.status}); "
                                    f"set --api-key-env to the variable holding the key", status=exc.status) from None
            if exc.status is None:
                raise
        if flavour == "auto":
            owner = str(listed[0].get("owned_by", "")).lower() if listed else ""
            flavour = OWNERS.get(owner, "openai")
        if not model:
            if not listed:
                raise UsageError(f"endpoint {self.opts.url} lists no models; pass --endpoint-model")
            model = str(listed[0].get("id"))
        elif listed and model not in {str(m.get("id")) for m in listed}:
            ids = ", ".join(str(m.get("id")) for m in listed[:5])
            raise UsageError(f"endpoint {self.opts.url} does not serve model {model!r} (it lists: {ids})")
        return flavour, model

    def _find_tokenizer(self) -> tuple[str | None, bool | None]:
        """The server's tokenize endpoint (path) and whether it prepends BOS, if it has one."""
        candidates = {
            "llama-cpp-python": ["/extras/tokenize"],
            "vllm": ["/tokenize"],
            "llama-server": ["/tokenize"],
        }.get(self.flavour, ["/tokenize", "/extras/tokenize"])
        for path in candidates:
            try:
                tokens = self._tokenize_at(path, PROBE_TEXT)
            except (EndpointError, Unsupported):
                continue
            self._probe_tokens = tokens
            bos = self.reference.bos_token_id
            return path, bool(tokens and bos is not None and tokens[0] == bos)
        return None, None

    def _tokenize_at(self, path: str, text: str) -> list[int]:
        if path == "/extras/tokenize":
            body: dict[str, Any] = {"input": text, "model": self.model}
        elif self.flavour == "llama-server":
            body = {"content": text, "add_special": True, "parse_special": True}
        else:
            body = {"model": self.model, "prompt": text, "add_special_tokens": True}
        data = self.client.post(path, body, retry_statuses=PROBE_RETRY)
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise Unsupported(f"{path} returned no token ids")
        return tokens

    def _probe(self) -> tuple[str, str, str | None]:
        """(mode, prompt format "ids"|"text", why log-probs are unavailable) from real requests."""
        probe_ids = tuple(self.tok(PROBE_TEXT, add_special_tokens=True)["input_ids"])
        req = ScoreRequest(key="qcheck-probe", input_ids=probe_ids, start=max(1, len(probe_ids) // 2))
        order = MODE_ORDER.get(self.flavour, MODE_ORDER["openai"]) if self.opts.mode == "auto" else \
            ((self.opts.mode,) if self.opts.mode != "generate" else ())
        reasons: list[str] = []
        for mode in order:
            formats = ["ids"] if not PROTOCOLS[mode].TEXT_PROMPTS else ["ids", "text"]  # token ids wherever taken
            for fmt in formats:
                try:
                    rows = self._score_one(req, mode, fmt, probe=True)
                except Unsupported as exc:
                    reasons.append(f"{mode}/{fmt}: {exc}")
                    continue
                except EndpointError as exc:
                    if exc.status is None or exc.status in (401, 403) or exc.status in PROBE_RETRY:
                        raise  # unreachable, unauthorised or failing after retries: not a refusal of this mode
                    reasons.append(f"{mode}/{fmt}: HTTP {exc.status}: {exc.body[:160]}")
                    continue
                if any(not math.isnan(r.target) for r in rows):
                    self._probe_answer = {"greedy": [r.greedy for r in rows],
                                          "target": [None if math.isnan(r.target) else r.target for r in rows]}
                    return mode, fmt, None
                reasons.append(f"{mode}/{fmt}: no log-probs in the response")
        if self.opts.mode not in ("auto", "generate"):
            raise EndpointError(f"endpoint {self.opts.url} cannot do mode {self.opts.mode}: {'; '.join(reasons)}")
        fmt = "ids"  # token ids wherever the server takes them (vLLM, SGLang, llama-server), else text
        gen = GenerateRequest(key="qcheck-probe", prompt_ids=probe_ids, max_new_tokens=1)
        try:
            try:
                probe, _ = generate_one(self, gen, fmt)
            except (EndpointError, Unsupported) as exc:
                if isinstance(exc, EndpointError) and (exc.status is None or exc.status in (401, 403)):
                    raise
                fmt = "text"
                probe, _ = generate_one(self, gen, fmt)
            self._probe_answer = {"generated": list(probe.token_ids)}
        except Unsupported as exc:
            raise EndpointError(f"endpoint {self.opts.url}: no usable completion ({exc}); "
                                f"log-probs: {'; '.join(reasons)}") from None
        reason = "; ".join(reasons) if reasons else "mode generate requested"
        if fmt == "text" and self.tokenize_path is None:
            self._notes.append("prompts are sent as text and the server has no tokenize endpoint, so its tokens "
                               "could not be checked against the reference's; generation metrics compare text")
        return "generate", fmt, reason

    def _state_file(self) -> Path | None:
        """This endpoint's resume file in the run's folder (or ``options.state_dir``); None when nothing is kept."""
        if not self.opts.resume:
            return None
        root = Path(self.opts.state_dir) if self.opts.state_dir else (self.run.folder if self.run else None)
        if root is None:
            return None
        config = {"url": self.opts.url, "model": self.model, "mode": self.mode, "format": self.prompt_format,
                  "top_k": self.opts.top_k, "flavour": self.flavour, "state": 2}
        return state_path(root, config)

    def server_identity(self) -> dict[str, Any]:
        """What the server is now: its model id and flavour, a hash of its tokenisation of ``PROBE_TEXT`` (None without
        a tokenize endpoint) and its answer to the capability probe."""
        tokens = None if self._probe_tokens is None else \
            hashlib.sha256(json.dumps(self._probe_tokens).encode()).hexdigest()
        return {"model": self.model, "flavour": self.flavour, "tokenizer": tokens, "probe": self._probe_answer}

    def _check_identity(self) -> None:
        """A resume file is used only for the server that wrote it (see the module docstring); a new one records it."""
        now = self.server_identity()
        if len(self.state) == 0:
            if self.state.path is not None or self.state.key is not None:
                self.state.put(IDENTITY, now)
            return
        changed = identity_change(self.state.get(IDENTITY), now)
        if changed:
            run = self.run.run_id if self.run is not None else str(self.state.path)
            raise InputError(f"--resume {run}: endpoint {self.opts.url} is not the server these results were recorded "
                             f"from ({changed}); start a new run (without --resume)", where=f"candidate {self.name}")

    @property
    def top_k(self) -> int:
        return self.opts.top_k

    @property
    def url(self) -> str:
        return self.opts.url

    # ------------------------------------------------------------------ prompts and alignment
    def strings(self) -> TokenStrings:
        if self._strings is None:
            self._strings = TokenStrings(self.tok, self.reference.vocab_size)
        return self._strings

    def prompt_text(self, ids: tuple[int, ...]) -> str:
        """The text sent for the token ids ``ids`` (a leading BOS the server adds itself left out)."""
        return text_prompt(ids, len(ids), self.tok, self.reference.bos_token_id, self.server_adds_bos).text

    def note_prompt(self, ids: tuple[int, ...], text: str) -> None:
        """Count a generation prompt the server tokenises differently from the reference (its output is compared
        as text all the same); needs the server's tokenize endpoint."""
        if self.tokenize_path is None:
            return
        got = self._tokenize_at(self.tokenize_path, text)
        skip = lead(ids, self.reference.bos_token_id, self.server_adds_bos)
        if got != list(ids) and got != list(ids[skip:]):
            self.retokenised_prompts += 1

    # ------------------------------------------------------------------ scoring
    def _score_one(self, req: ScoreRequest, mode: str, fmt: str, probe: bool = False) -> list[Row]:
        """One scoring request in the wire protocol of ``mode``, as token ids or as text (``_score_text``)."""
        protocol = PROTOCOLS[mode]
        if protocol.TEXT_PROMPTS and fmt == "text":
            scored, rows = self._score_text(req, mode, probe)
            if isinstance(scored, str):
                raise Unsupported(scored) if probe else Misaligned(scored, where=f"candidate {self.name}, "
                                                                                 f"request {req.key}")
            return rows
        path, body = protocol.request(self, list(req.input_ids))
        data = self.client.post(path, body, retry_statuses=PROBE_RETRY if probe else RETRY_STATUSES)
        return protocol.parse(self, data, req)

    def _score_text(self, req: ScoreRequest, mode: str, probe: bool = False) -> tuple[ScoreRequest | str, list[Row]]:
        """Send ``req`` as text and read the rows of the token ids the server made of it: from its tokenize
        endpoint first, else from its answer (vLLM's ``prompt_token_ids``, the echoed tokens). Returns the request
        as the server scored it (``align.realign``) with its rows, or why it cannot be compared."""
        protocol = PROTOCOLS[mode]
        prompt = text_prompt(req.input_ids, req.start, self.tok, self.reference.bos_token_id, self.server_adds_bos)
        scored: ScoreRequest | str | None = None
        if self.tokenize_path is not None:
            scored = realign(req, prompt, self._tokenize_at(self.tokenize_path, prompt.text), self.tok,
                             self.reference.bos_token_id, self.reference.vocab_size)
            if isinstance(scored, str):
                return scored, []
        path, body = protocol.request(self, prompt.text)
        data = self.client.post(path, body, retry_statuses=PROBE_RETRY if probe else RETRY_STATUSES)
        if scored is None:
            ids = protocol.prompt_ids(self, data)
            if ids is None:
                return ("the server has no tokenize endpoint and its answer does not name the prompt's token ids, "
                        "so its tokens cannot be paired with the reference's"), []
            scored = realign(req, prompt, ids, self.tok, self.reference.bos_token_id, self.reference.vocab_size)
            if isinstance(scored, str):
                return scored, []
        return scored, protocol.parse(self, data, scored)

    def _to_scores(self, req: ScoreRequest, rows: list[Row]) -> TokenScores:
        n = req.n_rows
        if len(rows) != n:
            raise InputError(f"the endpoint returned {len(rows)} rows for {n} positions",
                             where=f"candidate {self.name}, request {req.key}")
        # one width for the request: rows keep their most likely entries (a smaller set keeps a lower bound)
        width = min((len(r.topk) for r in rows if not math.isnan(r.target)), default=0)
        ids = np.zeros((n, width), dtype=np.int64)
        lps = np.zeros((n, width), dtype=np.float32)
        for i, r in enumerate(rows):
            for j, (tid, v) in enumerate(r.topk[:width]):
                ids[i, j], lps[i, j] = tid, v
        target = np.array([r.target for r in rows], dtype=np.float32)
        greedy = np.array([r.greedy for r in rows], dtype=np.int64)
        return TokenScores(target_logprobs=target, topk_ids=ids, topk_logprobs=lps, greedy_ids=greedy)

    # ------------------------------------------------------------------ generation
    # ------------------------------------------------------------------ protocol
    def vocab(self) -> VocabInfo:
        """The reference's token space: endpoints do not publish theirs; token alignment is checked per request."""
        return self.reference

    def _score_rid(self, req: ScoreRequest) -> str:
        return ResumeState.record_id("score", req.key, tuple(req.input_ids), str(req.start))

    def _gen_rid(self, req: GenerateRequest) -> str:
        return ResumeState.record_id("gen", req.key, tuple(req.prompt_ids), str(req.max_new_tokens))

    def _fetch_score(self, req: ScoreRequest) -> dict[str, Any]:
        """One request's rows as a resume record; with the token ids the server scored (``ids``, ``s``) when they
        are not the request's, or only why it cannot be compared (``x``)."""
        scored: ScoreRequest | str = req
        try:
            if self.prompt_format == "text" and PROTOCOLS[self.mode].TEXT_PROMPTS:
                scored, rows = self._score_text(req, self.mode)
            else:
                rows = self._score_one(req, self.mode, self.prompt_format)
        except Unsupported as exc:  # worked for the probe, not for this request: a malformed answer
            raise InputError(f"malformed response: {exc}", where=f"candidate {self.name}, request {req.key}") from None
        except Misaligned as exc:
            scored = exc.detail
        if isinstance(scored, str):
            return {"x": scored}
        record: dict[str, Any] = {"t": [None if math.isnan(r.target) else r.target for r in rows],
                                  "k": [[[t, v] for t, v in r.topk] for r in rows], "g": [r.greedy for r in rows]}
        if scored is not req:
            record.update(ids=list(scored.input_ids), s=scored.start)
        return record

    def _record(self, req: ScoreRequest) -> tuple[str, dict[str, Any]]:
        """(resume id, record) of an original request, fetched now if the prefetch did not."""
        rid = self._score_rid(req)
        rec = self.state.get(rid)
        if rec is None:
            rec = self._fetch_score(req)
            self.state.put(rid, rec)
        return rid, rec

    def scored_as(self, req: ScoreRequest) -> ScoreRequest | str:
        """The request as this server scored it: ``req`` itself, the same text in the server's own token ids (the
        reference must then be scored on exactly those), or why it cannot be compared (it is left out and counted
        in the coverage). Called by the harness after ``prefetch``."""
        _, rec = self._record(req)
        if "x" in rec:
            return str(rec["x"])
        scored = req
        if "ids" in rec:
            scored = substitute(req, rec["ids"], rec["s"])
            self._scored[scored.key] = req
        missing = [i for i, t in enumerate(rec["t"]) if t is None]
        if missing and req.key not in self._text_keys:
            return (f"the endpoint returned no log-prob for {len(missing)} scored position(s) of this choice (first: "
                    f"token {scored.start + missing[0]})" + (
                        f"; the echo of a model without BOS lists a token only when it is among the top-"
                        f"{self.opts.top_k} (raise --endpoint-top-k)" if self.shifted_echo else ""))
        return scored

    def _fetch_gen(self, req: GenerateRequest) -> dict[str, Any]:
        try:
            gen, lossy = generate_one(self, req, self.prompt_format)
        except Unsupported as exc:
            raise InputError(f"malformed response: {exc}", where=f"candidate {self.name}, request {req.key}") from None
        return {"ids": gen.token_ids, "text": gen.text, "lossy": lossy}

    def prefetch(self, encoded: Sequence[Any]) -> None:
        """Send every request of the run not already in the resume state, ``concurrency`` at a time."""
        jobs: list[tuple[str, str, Any]] = []
        for enc in encoded:
            if enc.item.kind == "text":
                self._text_keys.update(r.key for r in enc.score)
            if self.capabilities.has_prompt_logprobs:
                jobs.extend(("score", self._score_rid(r), r) for r in enc.score)
            if enc.generate is not None:
                jobs.append(("gen", self._gen_rid(enc.generate), enc.generate))
        self._fetch_all(jobs)

    def prefetch_scores(self, requests: Sequence[ScoreRequest], text_keys: set[str]) -> None:
        """``prefetch`` for bare scoring requests (the reference scored again on a candidate server's ids);
        ``text_keys`` are those of text items (a position without a log-prob is left out of them, not fatal)."""
        self._text_keys.update(text_keys)
        self._fetch_all([("score", self._score_rid(r), r) for r in requests])

    def _fetch_all(self, jobs: list[tuple[str, str, Any]]) -> None:
        todo = [j for j in jobs if j[1] not in self.state]

        def work(job: tuple[str, str, Any]) -> Any:
            kind, _, req = job
            return self._fetch_score(req) if kind == "score" else self._fetch_gen(req)

        fan_out(work, todo, self.opts.concurrency, lambda job, value: self.state.put(job[1], value))

    def score(self, requests: Sequence[ScoreRequest]) -> Iterator[TokenScores]:
        if not self.capabilities.has_prompt_logprobs:
            raise EndpointError(f"endpoint {self.opts.url} returns no prompt log-probs")
        for req in requests:
            original = self._scored.get(req.key, req)
            _, rec = self._record(original)
            if "x" in rec or self.scored_as(original) != req:
                raise InputError(f"this request cannot be compared: {rec.get('x') or 'the server scored other ids'}",
                                 where=f"candidate {self.name}, request {original.key}")
            rows = [Row(math.nan if t is None else float(t), [(int(a), float(b)) for a, b in k], int(g))
                    for t, k, g in zip(rec["t"], rec["k"], rec["g"], strict=True)]
            missing = [i for i, r in enumerate(rows) if math.isnan(r.target)]
            if missing and self.shifted_echo:
                self.shifted_missing += len(missing)  # not in the returned top-k: left out, said in a note
            elif missing == [0] and req.start == 1:
                self.missing_rows += 1  # llama-cpp-python nulls the first echoed token
            elif missing:
                self.other_missing += len(missing)
            self.unresolved_top1 += sum(1 for i, r in enumerate(rows) if r.greedy < 0 and i not in missing)
            yield self._to_scores(req, rows)

    def generate(self, requests: Sequence[GenerateRequest]) -> Iterator[Generation]:
        for req in requests:
            rid = self._gen_rid(req)
            rec = self.state.get(rid)
            if rec is None:
                rec = self._fetch_gen(req)
                self.state.put(rid, rec)
            if rec.get("lossy"):
                self.lossy_generations += 1
            yield Generation(token_ids=[int(t) for t in rec["ids"]], text=rec.get("text"))

    @property
    def notes(self) -> list[str]:
        """What the report should say about this candidate (probe outcome, resume, excluded rows, retries)."""
        out = list(self._notes)
        if self.missing_rows:
            out.append(f"{self.missing_rows} position(s), the first token after BOS of text items, are not "
                              "returned by this server's echo (llama-cpp-python nulls the first echoed token) and "
                              "are left out of this candidate's token metrics")
        if self.shifted_echo:
            out.append("the model adds no BOS, and llama-cpp-python's echo then pairs each prompt token with the "
                       "logits after it (its echo assumes a leading BOS): qcheck re-aligned the rows, position p "
                       "from entry p-1's top-k"
                       + (f"; {self.shifted_missing} position(s) whose token was not in the returned top-"
                          f"{self.opts.top_k} are left out of this candidate's token metrics (raise "
                          "--endpoint-top-k to keep more)" if self.shifted_missing else ""))
        if self.other_missing:
            out.append(f"{self.other_missing} scored position(s) of text items came back without a log-prob and are "
                       "left out of this candidate's token metrics")
        if self.retokenised_prompts:
            out.append(f"{self.retokenised_prompts} generation prompt(s) were tokenised by the server differently "
                       "from the reference's tokenizer (text prompts); their outputs are compared as text")
        if self.unresolved_top1:
            out.append("the server names some top-1 tokens only by an ambiguous string (e.g. a partial UTF-8 "
                       "byte); top-1 agreement covers the other positions (metrics.top1_positions)")
        if self.string_mismatches:
            out.append(f"{self.string_mismatches} position(s): the server printed the actual token as a different "
                       "token's string, so its top-k there was not used (only the actual token's log-prob)")
        if self.lossy_generations:
            out.append(f"{self.lossy_generations} generation(s) came back as text that does not re-tokenise to the "
                       "number of tokens the server generated (a partial UTF-8 character was dropped); their greedy "
                       "agreement is counted as a disagreement and may understate the engine")
        if self.client.retried:
            out.append(f"{self.client.retried} request(s) were retried (429/5xx/timeouts)")
        return out

    def close(self) -> None:
        """Nothing to free: the resume file is appended and flushed as each request finishes."""


def identity_change(recorded: Any, now: dict[str, Any]) -> str | None:
    """What differs between the server identity a resume file recorded and the server's now (None: nothing)."""
    if not isinstance(recorded, dict):
        return "the file has no record of the server (written by an older qcheck)"
    for key, what in (("model", "model id"), ("flavour", "server kind"), ("tokenizer", "tokenisation of a probe text")):
        if recorded.get(key) != now.get(key):
            return f"its {what} changed"
    old, new = recorded.get("probe"), now.get("probe")
    if not isinstance(old, dict) or not isinstance(new, dict) or set(old) != set(new):
        return "it answers the capability probe differently"
    if "generated" in new:
        return None if old["generated"] == new["generated"] else "its greedy answer to the probe changed"
    if old.get("greedy") != new.get("greedy"):
        return "its most likely tokens for the probe changed"
    before, after = old.get("target") or [], new.get("target") or []
    if len(before) != len(after) or any(
            (a is None) != (b is None) or (a is not None and b is not None and not abs(a - b) <= PROBE_TOLERANCE)
            for a, b in zip(before, after, strict=False)):
        return f"its log-probs for the probe moved by more than {PROBE_TOLERANCE} nats"
    return None


def present_rows(ref: Any, cand: TokenScores, targets: Sequence[int]) -> tuple[Any, TokenScores, np.ndarray]:
    """Drop positions either side could not return (NaN target log-prob) from both sides, paired.

    Only endpoints produce such rows (llama-cpp-python's echo omits the first token after BOS), as a candidate or as
    the reference; for every other runner this returns its inputs unchanged."""
    y = np.asarray(targets, dtype=np.int64)
    keep = ~np.isnan(cand.target_logprobs) & ~np.isnan(np.asarray(ref.target_logprobs, dtype=np.float32))
    if keep.all():
        return ref, cand, y
    from dataclasses import replace

    ref_kept = replace(ref, target_logprobs=ref.target_logprobs[keep], argmax=np.asarray(ref.argmax)[keep],
                       full=None if ref.full is None else ref.full[keep],
                       topk_ids=None if ref.topk_ids is None else ref.topk_ids[keep],
                       topk_logprobs=None if ref.topk_logprobs is None else ref.topk_logprobs[keep])
    cand_kept = TokenScores(target_logprobs=cand.target_logprobs[keep],
                            full=None if cand.full is None else cand.full[keep],
                            topk_ids=None if cand.topk_ids is None else cand.topk_ids[keep],
                            topk_logprobs=None if cand.topk_logprobs is None else cand.topk_logprobs[keep],
                            greedy_ids=None if cand.greedy_ids is None else np.asarray(cand.greedy_ids)[keep])
    return ref_kept, cand_kept, y[keep]


def build(name: str, target: str, context: Any) -> Any:
    """The ``endpoint`` backend: ``--candidate NAME=endpoint:URL[#model=M&api_key_env=VAR&top_k=20&...]``."""
    from qcheck.eval.runners import BuiltRunner

    options = EndpointOptions.parse(target)
    runner = EndpointRunner(name, options, context.tokenizer, context.reference_vocab,
                            run=getattr(context, "endpoint_run", None))
    return BuiltRunner(runner=runner, notes=[], quantization=None,
                       activations="as the serving engine computes them (real engine)")
