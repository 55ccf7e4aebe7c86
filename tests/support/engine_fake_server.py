"""An OpenAI-compatible server on 127.0.0.1 for the endpoint runner's protocol and error paths.

Its numbers are real: every log-prob comes from llama.cpp's kernels on a real GGUF (``LlamaCppRunner``), and
tokenisation from the reference's tokenizer. What it fakes is the *server behaviour* of engines we cannot start
here (vLLM's ``prompt_logprobs`` with token-id keys, SGLang's native ``/generate``, Groq's HTTP 400 on
``logprobs``, llama-server's "Only no echo is supported") and failures (429 with Retry-After, 5xx, hung
requests, a server that dies after N requests, a tokenizer that disagrees, credentials).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import numpy as np

from qcheck.eval.runners.base import GenerateRequest, ScoreRequest
from support.hubserver import LoopbackServer


@dataclass
class Behaviour:
    """What the server does; tests mutate it between runs."""

    style: str = "vllm"  # vllm | sglang | groq | llama-server | together (OpenAI legacy echo, token_id keys)
    model: str = "tiny-q8"
    api_key: str | None = None
    #: statuses returned (once each, in order) before requests are served normally
    fail_plan: list[int] = field(default_factory=list)
    #: completion requests served normally before fail_plan / hangs start (the capability probe is the first)
    fail_skip: int = 0
    retry_after: str | None = "0"
    #: sleep this long on the next N completion requests (to trip client timeouts)
    hang_seconds: float = 0.0
    hang_count: int = 0
    #: after this many successful completion/generate requests, answer 500 forever (a dying server)
    die_after: int | None = None
    #: tokenize endpoint drops this token position (a server whose tokenizer disagrees)
    tokenize_drop: int | None = None
    accept_ids: bool = True
    #: serve /tokenize and /extras/tokenize (hosted providers have neither)
    tokenize: bool = True
    #: seconds every completion request takes (to observe concurrency)
    delay: float = 0.0
    #: hostile answers to prompt_logprobs: "nan" (a NaN log-prob), "positive" (log-prob 2.0), "html" (not JSON)
    corrupt: str | None = None
    #: vLLM's --max-logprobs: prompt_logprobs above it get vLLM's HTTP 400
    max_logprobs: int | None = None
    #: prompt_logprobs above this are answered with this many, silently (a server or proxy that caps quietly)
    quiet_cap: int | None = None
    #: the answer to GET /server_info (vLLM with dev endpoints, SGLang); None: 404
    server_info: dict[str, Any] | None = None
    #: text prompts (and /tokenize) are tokenised by llama.cpp's own tokenizer of the engine's GGUF, as a real
    #: llama.cpp-based server does, instead of the reference's tokenizer
    engine_tokenizer: bool = False


class FakeEngine:
    """The numbers behind the fake server: llama.cpp logits for token ids, and the reference tokenizer."""

    def __init__(self, gguf: str, tokenizer: Any):
        from qcheck.eval.runners.llamacpp import LlamaCppRunner

        self.runner = LlamaCppRunner(gguf, "fake", n_ctx=512)
        self.tok = tokenizer
        self.lock = threading.Lock()

    def rows(self, ids: list[int]) -> np.ndarray:
        """Full log-prob rows: row p predicts ids[p] (p >= 1)."""
        with self.lock:
            scores = next(self.runner.score([ScoreRequest("x", tuple(ids), 1)]))
        return scores.full

    def tokenize(self, text: str) -> list[int]:
        """llama.cpp's tokenisation of ``text`` (BOS added as the GGUF says), as a llama.cpp-based server's."""
        with self.lock:
            return list(self.runner.llm.tokenize(text.encode("utf-8"), add_bos=self.runner.vocab().add_bos,
                                                 special=True))

    def greedy(self, ids: list[int], n: int) -> list[int]:
        with self.lock:
            eos = self.runner.vocab().eos_token_ids
            return next(self.runner.generate([GenerateRequest("x", tuple(ids), n, eos)])).token_ids

    def close(self) -> None:
        self.runner.close()


class FakeServer:
    """``with FakeServer(engine) as srv: srv.url, srv.behaviour, srv.counts``."""

    def __init__(self, engine: FakeEngine, behaviour: Behaviour | None = None):
        self.engine = engine
        self.behaviour = behaviour or Behaviour()
        self.counts: Counter[str] = Counter()
        self.served = 0
        self.inflight = 0
        #: token ids of every prompt the completions route decoded (text prompts tokenised here)
        self.prompts: list[list[int]] = []
        #: every completions request body, as received
        self.bodies: list[dict[str, Any]] = []
        self.inflight_max = 0
        self.lock = threading.Lock()
        self.httpd = LoopbackServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if exc[0] is None:  # a failing block keeps its own error
            assert not self.httpd.errors, "the fake engine failed while answering:\n" + "\n".join(self.httpd.errors)

    # ------------------------------------------------------------------ responses
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                body = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _auth(self) -> bool:
                b = server.behaviour
                if b.api_key is None:
                    return True
                got = self.headers.get("Authorization", "")
                if got == f"Bearer {b.api_key}":
                    return True
                # a careless server that echoes the credentials back: the client must redact them
                self._send(401, {"error": {"message": f"invalid api key in header '{got}'"}})
                return False

            def do_GET(self) -> None:
                server.counts["GET " + self.path] += 1
                if not self._auth():
                    return
                if self.path == "/v1/models":
                    owner = {"vllm": "vllm", "sglang": "sglang", "groq": "Meta", "llama-server": "llamacpp",
                             "together": "together"}
                    self._send(200, {"object": "list", "data": [
                        {"id": server.behaviour.model, "object": "model",
                         "owned_by": owner.get(server.behaviour.style, "x")}]})
                elif self.path.split("?")[0] == "/server_info" and server.behaviour.server_info is not None:
                    self._send(200, server.behaviour.server_info)
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.counts["POST " + self.path] += 1
                if not self._auth():
                    return
                with server.lock:
                    server.inflight += 1
                    server.inflight_max = max(server.inflight_max, server.inflight)
                try:
                    if server.behaviour.delay:
                        time.sleep(server.behaviour.delay)
                    status, obj, headers = server.respond(self.path, body)
                except _Hang as hang:
                    time.sleep(hang.seconds)
                    status, obj, headers = 200, {"late": True}, {}
                finally:
                    with server.lock:
                        server.inflight -= 1
                self._send(status, obj, headers)

        return Handler

    def respond(self, path: str, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        b = self.behaviour
        if path in ("/tokenize", "/extras/tokenize") and b.tokenize:
            text = body.get("prompt", body.get("content", body.get("input", "")))
            ids = self.engine.tokenize(text) if b.engine_tokenizer else \
                list(self.engine.tok(text, add_special_tokens=True)["input_ids"])
            if b.tokenize_drop is not None and len(ids) > b.tokenize_drop:
                del ids[b.tokenize_drop]
            return 200, {"tokens": ids, "count": len(ids)}, {}
        if path not in ("/v1/completions", "/generate"):
            return 404, {"error": {"message": f"no route {path}"}}, {}
        with self.lock:
            if b.fail_plan and self.served >= b.fail_skip:
                status = b.fail_plan.pop(0)
                headers = {"Retry-After": b.retry_after} if status == 429 and b.retry_after is not None else {}
                return status, {"error": {"message": f"injected {status}"}}, headers
            if b.hang_count > 0 and self.served >= b.fail_skip:
                b.hang_count -= 1
                raise _Hang(b.hang_seconds)
            if b.die_after is not None and self.served >= b.die_after:
                return 500, {"error": {"message": "the server is gone"}}, {}
            self.served += 1
        if path == "/generate":
            if b.style != "sglang":
                return 404, {"error": {"message": "no route /generate"}}, {}
            return self._sglang(body)
        return self._completions(body)

    def _prompt_ids(self, prompt: Any) -> list[int] | None:
        if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            return prompt if self.behaviour.accept_ids else None
        if isinstance(prompt, str):
            if self.behaviour.engine_tokenizer:
                return self.engine.tokenize(prompt)
            return list(self.engine.tok(prompt, add_special_tokens=True)["input_ids"])
        return None

    def _completions(self, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        b = self.behaviour
        if body.get("model") != b.model:
            return 404, {"error": {"message": f"model {body.get('model')!r} not found"}}, {}
        if b.style == "groq" and any(k in body for k in ("logprobs", "top_logprobs", "prompt_logprobs", "echo")):
            return 400, {"error": {"message": "logprobs is not supported", "type": "invalid_request_error"}}, {}
        if b.style == "llama-server" and body.get("echo"):
            return 500, {"error": {"code": 500, "message": "Only no echo is supported", "type": "server_error"}}, {}
        self.bodies.append(body)
        ids = self._prompt_ids(body.get("prompt"))
        if ids is not None:
            self.prompts.append(list(ids))
        if ids is None:
            return 400, {"error": {"message": "prompt must be a string"}}, {}
        k = body.get("prompt_logprobs")
        if k is not None and b.style == "vllm" and b.max_logprobs is not None and k > b.max_logprobs:
            return 400, {"object": "error", "message": f"Requested prompt logprobs of {k}, which is greater than max "
                         f"allowed: {b.max_logprobs}", "type": "BadRequestError", "code": 400}, {}
        if k is not None and b.style == "vllm":
            if b.quiet_cap is not None:
                k = min(k, b.quiet_cap)
            rows = self.engine.rows(ids)
            plp: list[Any] = [None]
            for p in range(1, len(ids)):
                row = rows[p - 1]
                order = np.argsort(-row, kind="stable")
                entry = {str(int(t)): {"logprob": float(row[t]), "rank": r + 1, "decoded_token": "x"}
                         for r, t in enumerate(order[:k])}
                rank = int(np.where(order == ids[p])[0][0]) + 1
                entry[str(ids[p])] = {"logprob": float(row[ids[p]]), "rank": rank, "decoded_token": "x"}
                plp.append(entry)
            if b.corrupt == "html":
                return 200, b"<html><body>502 Bad Gateway</body></html>", {}
            if b.corrupt in ("nan", "positive"):
                plp[-1][str(ids[-1])]["logprob"] = math.nan if b.corrupt == "nan" else 2.0
            return 200, {"choices": [{"index": 0, "text": "", "prompt_logprobs": plp, "prompt_token_ids": ids,
                                      "finish_reason": "length"}], "usage": {"completion_tokens": 1}}, {}
        if body.get("echo") and body.get("logprobs") is not None and b.style == "together":
            return self._echo(ids, int(body["logprobs"]))
        n = int(body.get("max_tokens") or 16)
        new = self.engine.greedy(ids, n)
        eos = set(self.engine.runner.vocab().eos_token_ids)
        stopped = bool(new) and new[-1] in eos
        text = self.engine.tok.decode([t for t in new if t not in eos], skip_special_tokens=True)
        choice: dict[str, Any] = {"index": 0, "text": text, "finish_reason": "stop" if stopped else "length",
                                  "logprobs": None}
        if body.get("return_token_ids"):
            choice["token_ids"] = new
        return 200, {"choices": [choice], "usage": {"completion_tokens": len(new)}}, {}

    def _echo(self, ids: list[int], k: int) -> tuple[int, Any, dict[str, str]]:
        """OpenAI legacy echo over prompt + 1 generated token, keys as vLLM's --return-tokens-as-token-ids."""
        new = self.engine.greedy(ids, 1)
        rows = self.engine.rows(ids + new)
        seq = ids + new
        tokens, lps, tops = [f"token_id:{seq[0]}"], [None], [None]
        for p in range(1, len(seq)):
            row = rows[p - 1]
            order = np.argsort(-row, kind="stable")[:k]
            top = {f"token_id:{int(t)}": float(row[t]) for t in order}
            top[f"token_id:{seq[p]}"] = float(row[seq[p]])
            tokens.append(f"token_id:{seq[p]}")
            lps.append(float(row[seq[p]]))
            tops.append(top)
        choice = {"index": 0, "text": "", "finish_reason": "length",
                  "logprobs": {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": []}}
        return 200, {"choices": [choice], "usage": {"prompt_tokens": len(ids), "completion_tokens": 1}}, {}

    def _sglang(self, body: dict[str, Any]) -> tuple[int, Any, dict[str, str]]:
        ids = body.get("input_ids")
        k = int(body.get("top_logprobs_num") or 0)
        rows = self.engine.rows(ids)
        tok_lp: list[Any] = [[None, ids[0], None]]
        top_lp: list[Any] = [None]
        for p in range(1, len(ids)):
            row = rows[p - 1]
            tok_lp.append([float(row[ids[p]]), ids[p], None])
            order = np.argsort(-row, kind="stable")[:k]
            top_lp.append([[float(row[t]), int(t), None] for t in order])
        return 200, {"text": "", "meta_info": {"input_token_logprobs": tok_lp, "input_top_logprobs": top_lp,
                                               "output_token_logprobs": []}}, {}


class _Hang(Exception):
    def __init__(self, seconds: float):
        super().__init__(seconds)
        self.seconds = seconds
