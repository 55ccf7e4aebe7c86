"""``qcheck probe URL`` against local servers on 127.0.0.1: fakes that refuse ``logprobs``, cap ``n`` at 1, accept
``json_schema`` but answer invalid JSON, drip bytes; and a real llama-cpp-python server.

The fake's answers follow the OpenAI chat/completions shapes; what differs between the fakes is exactly the behaviour
named (a provider that 400s logprobs, one that silently caps n, ...)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from support.contract import validate
from support.hubserver import LoopbackServer

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SECRET = "sk-probe-secret-0123456789"


class Fake(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "good"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def send(self, status: int, body: object, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self.send(200, {"object": "list", "data": [
                {"id": "base", "object": "model", "max_model_len": 4096, "parent": None, "root": "base"},
                {"id": "sql-lora", "object": "model", "parent": "base", "root": "/adapters/sql"}]})
        else:
            self.send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        req = json.loads(self.rfile.read(length) or b"{}")
        mode = type(self).mode
        if mode == "drip":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                for _ in range(400):
                    self.wfile.write(b" ")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:
                pass
            return
        if self.path == "/tokenize":
            self.send(200, {"tokens": [7]})
            return
        if mode == "no_logprobs" and ("logprobs" in req or "logit_bias" in req):
            self.send(400, {"error": {"message": "logprobs is not supported with this model", "type": "invalid"}})
            return
        if req.get("stream"):
            body = b'data: {"choices":[{"delta":{"content":"Paris"}}]}\n\ndata: [DONE]\n\n'
            self.send(200, body, "text/event-stream")
            return
        self.send(200, self.answer(req, mode))

    def answer(self, req: dict, mode: str) -> dict:
        text = "Paris is big"
        fmt = (req.get("response_format") or {}).get("type")
        if fmt == "json_object":
            text = '{"city": "Paris"}'
        elif fmt == "json_schema":
            text = '{"city": "Paris", "population": "many"' if mode == "bad_schema" else \
                '{"city": "Paris", "population": 2100000}'
        if "7" in (req.get("logit_bias") or {}):
            text = "Lyon"
        stop = req.get("stop") or []
        for s in stop:
            text = text.split(s)[0]
        n = 1 if mode == "n_cap" else int(req.get("n") or 1)
        message: dict = {"role": "assistant", "content": text}
        if req.get("tools") and isinstance(req.get("tool_choice"), dict):
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
        choice: dict = {"index": 0, "message": message, "finish_reason": "stop", "text": text}
        if req.get("logprobs") is True:
            top = [{"token": t, "logprob": -0.1 * i} for i, t in enumerate(["Paris", "Lyon", "Nice", "A", "The"])]
            choice["logprobs"] = {"content": [{"token": "Paris", "logprob": -0.1, "top_logprobs": top}]}
        if req.get("echo"):
            choice["logprobs"] = {"tokens": ["The", " capital", " of", " France"],
                                  "token_logprobs": [None, -3.0, -1.0, -0.5]}
        return {"choices": [{**choice, "index": i} for i in range(n)]}


def serve(mode: str):
    handler = type(f"Fake_{mode}", (Fake,), {"mode": mode})
    server = LoopbackServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/v1"


@pytest.fixture
def fake(request):
    server, url = serve(request.param)
    yield url
    server.shutdown()
    server.server_close()


def probe(url: str, *args: str, key: str | None = SECRET) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QCHECK_")}
    if key:
        env["OPENAI_API_KEY"] = key
    return subprocess.run([sys.executable, "-m", "qcheck", "probe", url, *args], capture_output=True, text=True,
                          env=env, timeout=180)


def caps(out: str) -> dict[str, dict]:
    return {c["id"]: c for c in json.loads(out)["capabilities"]}


@pytest.mark.parametrize("fake", ["good"], indirect=True)
def test_a_server_that_does_everything(fake: str) -> None:
    res = probe(fake, "--json", "--require", "logprobs,json_schema,n,tools,stream,stop,logit_bias")
    assert res.returncode == 0, res.stdout + res.stderr
    got = caps(res.stdout)
    assert {k: v["status"] for k, v in got.items()} == {
        "models": "supported", "lora_adapters": "supported", "max_context": "supported", "logprobs": "supported",
        "top_logprobs": "supported", "prompt_logprobs": "supported", "n": "supported", "logit_bias": "supported",
        "stream": "supported", "json_object": "supported", "json_schema": "supported", "tools": "supported",
        "tools_with_schema": "supported", "stop": "supported"}
    assert got["max_context"]["value"] == 4096 and got["top_logprobs"]["value"] == 5
    assert json.loads(res.stdout)["adapters"] == ["sql-lora"]
    validate(json.loads(res.stdout), "probe")
    assert SECRET not in res.stdout + res.stderr


@pytest.mark.parametrize("fake", ["no_logprobs"], indirect=True)
def test_refused_logprobs_keep_the_servers_words(fake: str) -> None:
    res = probe(fake, "--require", "logprobs")
    assert res.returncode == 1
    assert "REFUSED    logprobs" in res.stdout
    assert "server: logprobs is not supported with this model" in res.stdout
    data = caps(probe(fake, "--json").stdout)
    assert data["logprobs"]["status"] == "refused" and data["logit_bias"]["status"] == "refused"
    assert data["json_schema"]["status"] == "supported"


@pytest.mark.parametrize("fake", ["n_cap"], indirect=True)
def test_n_capped_at_one_is_broken(fake: str) -> None:
    res = probe(fake, "--json", "--require", "n")
    assert res.returncode == 1
    n = caps(res.stdout)["n"]
    assert n["status"] == "broken" and n["value"] == 1


@pytest.mark.parametrize("fake", ["bad_schema"], indirect=True)
def test_json_schema_that_does_not_validate_is_broken(fake: str) -> None:
    res = probe(fake, "--format", "junit", "--require", "json_schema")
    assert res.returncode == 1
    assert "<failure" in res.stdout and "json_schema" in res.stdout
    got = caps(probe(fake, "--json").stdout)["json_schema"]
    assert got["status"] == "broken" and "does not validate" in got["detail"]
    md = probe(fake, "--format", "markdown").stdout
    assert "| json\\_schema | broken | the answer does not validate" in md


@pytest.mark.parametrize("fake", ["drip"], indirect=True)
def test_a_dripping_server_hits_the_deadline(fake: str) -> None:
    res = probe(fake, "--json", "--timeout", "20", "--request-timeout", "2")
    assert res.returncode == 0, res.stderr  # nothing required
    got = caps(res.stdout)
    assert got["logprobs"]["status"] == "unknown" and "did not finish" in got["logprobs"]["detail"]
    validate(json.loads(res.stdout), "probe")


def test_unusable_input_exits_2() -> None:
    assert probe("ftp://x").returncode == 2
    assert probe("http://127.0.0.1:9/v1").returncode == 2  # nothing listens on the discard port
    res = probe("http://127.0.0.1:9/v1", "--require", "telepathy")
    assert res.returncode == 2 and "unknown capability" in res.stderr


@pytest.mark.llamacpp
@pytest.mark.timeout(600)
def test_real_llama_cpp_python_server() -> None:
    from support.llamaserver import llama_server, server_available

    reason = server_available()
    if reason:
        pytest.skip(reason)
    with llama_server(EXAMPLES / "tiny-llama-Q8_0.gguf", alias="tiny", api_key=SECRET) as base:
        res = probe(base + "/v1", "--json", "--timeout", "300")
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    validate(data, "probe")
    got = {c["id"]: c for c in data["capabilities"]}
    assert data["models"] == ["tiny"]
    # what llama-cpp-python's server does whatever the model: echo with prompt log-probs, streaming, stop sequences,
    # logit_bias (tokens from /extras/tokenize), json_object through its grammar
    for cid in ("models", "logprobs", "prompt_logprobs", "stream", "stop", "logit_bias", "json_object"):
        assert got[cid]["status"] == "supported", got[cid]
    # ... and does not: n is accepted and ignored, response_format json_schema is refused by its request model
    assert got["n"]["status"] == "broken" and got["n"]["value"] == 1
    assert got["json_schema"]["status"] == "refused"
    assert "Input should be 'text' or 'json_object'" in got["json_schema"]["server_message"]
    assert got["lora_adapters"]["status"] == "unknown" and got["max_context"]["status"] == "unknown"
    assert SECRET not in res.stdout + res.stderr
