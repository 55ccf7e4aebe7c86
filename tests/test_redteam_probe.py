"""Red-team round 3 (issue #32, item 8): ``qcheck probe`` against hostile servers on 127.0.0.1, through the real CLI.

A server may answer JSON nested thousands of levels deep, echo the API key into a model id or an adapter name, send
a tool name of 800 kB or a context length of 4,200 digits; a URL may carry a password. The probe ends in a report
(the capability ``broken`` or ``unknown``) or one error line: never an internal error, never the key or the
password, never an unbounded line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest

from support.hubserver import LoopbackServer

KEY = "S3cr3t-Probe-Key-0123456789"
PASSWORD = "S3cr3t-Url-Password-42"
DEEP = b'{"data": ' + b"[" * 5000 + b"]" * 5000 + b"}"


class Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "echo"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def send(self, status: int, body: object) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        mode = type(self).mode
        key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        if self.path == "/v1/models":
            if mode == "deep":
                self.send(200, DEEP)
                return
            self.send(200, {"object": "list", "data": [
                {"id": f"base-{key}", "object": "model", "parent": None},
                {"id": f"lora-{key}-" + "x" * 200_000, "object": "model", "parent": f"base-{key}"}]})
        elif self.path == "/props":
            self.send(200, b'{"default_generation_settings": {"n_ctx": ' + b"9" * 4200 + b"}}")
        else:
            self.send(404, {"error": {"message": f"no {self.path} for key {key}"}})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
        if type(self).mode == "deep" or self.path != "/v1/chat/completions":
            self.send(200, b'{"choices": ' + b"[" * 5000 + b"]" * 5000 + b"}")
            return
        name = f"get_{key}_" + "w" * 800_000  # a 779 kB detail line before the fix
        message = {"role": "assistant", "content": f"answer {key} " + "z" * 50_000,
                   "tool_calls": [{"id": "c", "type": "function", "function": {"name": name, "arguments": "{}"}}]}
        self.send(200, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    handler = type(f"Hostile_{request.param}", (Hostile,), {"mode": request.param})
    srv = LoopbackServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def probe(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QCHECK_")}
    env["OPENAI_API_KEY"] = KEY
    return subprocess.run([sys.executable, "-m", "qcheck", "probe", url, *args], capture_output=True, text=True,
                          env=env, timeout=180)


@pytest.mark.parametrize("server", ["deep"], indirect=True)
@pytest.mark.parametrize("fmt", ["text", "json"])
def test_deeply_nested_json_is_a_broken_answer_not_a_crash(server: str, fmt: str) -> None:
    res = probe(f"http://{server}/v1", "--format", fmt, "--timeout", "60")
    assert res.returncode == 0, res.stderr
    assert "internal error" not in res.stderr and "RecursionError" not in res.stdout + res.stderr
    if fmt == "json":
        models = {c["id"]: c for c in json.loads(res.stdout)["capabilities"]}["models"]
        assert models["status"] == "broken" and "no data list" in models["detail"]


@pytest.mark.parametrize("server", ["echo"], indirect=True)
@pytest.mark.parametrize("fmt", ["text", "json", "junit", "markdown"])
def test_server_text_is_masked_and_bounded(server: str, fmt: str) -> None:
    """The key echoed into model ids, adapter names, a tool name and an error message; a password in the URL; an
    800 kB tool name; a 4,200-digit n_ctx: none printed, every line bounded, the context ``broken``."""
    res = probe(f"http://probe:{PASSWORD}@{server}/v1", "--format", fmt, "--timeout", "60")
    assert res.returncode == 0, res.stderr[-2000:]
    out = res.stdout + res.stderr
    assert KEY not in out and PASSWORD not in out and "internal error" not in out
    assert max(map(len, out.splitlines())) < 2_000, max(map(len, out.splitlines()))
    assert len(out) < 30_000
    if fmt == "json":
        data = json.loads(res.stdout)
        caps = {c["id"]: c for c in data["capabilities"]}
        assert caps["max_context"]["status"] == "broken" and caps["max_context"]["value"] is None
        assert "4200 digits" in caps["max_context"]["detail"]
        assert data["url"] == f"http://***@{server}/v1"
        assert data["models"][0] == "base-***" and data["adapters"][0].startswith("lora-***-xxx")


def test_an_unreachable_url_with_a_password_is_one_masked_line() -> None:
    res = probe(f"http://probe:{PASSWORD}@127.0.0.1:9/v1", "--timeout", "10")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith("qcheck: error: cannot probe http://***@127.0.0.1:9/v1")
    assert PASSWORD not in res.stderr + res.stdout
    res = probe(f"ftp://probe:{PASSWORD}@127.0.0.1:9/v1")
    assert res.returncode == 2 and PASSWORD not in res.stderr and "ftp://***@127.0.0.1:9/v1" in res.stderr
