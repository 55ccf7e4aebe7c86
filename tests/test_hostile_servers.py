"""Hostile servers on 127.0.0.1 against the real CLI (``python -m qcheck inspect`` with ``HF_ENDPOINT`` pointing at
them) and against the eval endpoint client: every malformed status line, header, length, chunking, bomb, loop,
wait and drip ends in one line and exit 2, or in a retry and the right answer, never an internal error or a
traceback (issue #27). The servers send raw bytes (``support.rawserver``). No assertion depends on timing: drips
and stuck resolvers never finish on their own, so only a deadline can end them."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from qcheck.eval.runners.http import EndpointError, HttpClient
from support.hubserver import CONFIG, TOKEN, llama_tensors, safetensors_file
from support.rawserver import RawRequest, RawServer, drip, response

REPO = "org/hostile"
SHA = "0123456789abcdef0123456789abcdef01234567"
FILES = {"config.json": json.dumps(CONFIG).encode(),
         "model.safetensors": bytes(safetensors_file(llama_tensors(1), virtual=False))}  # type: ignore[arg-type]
Send = Callable[[bytes], None]


def _listing() -> bytes:
    siblings = [{"rfilename": n, "size": len(d)} for n, d in FILES.items()]
    return json.dumps({"id": REPO, "sha": SHA, "siblings": siblings}).encode()


class HostileHub:
    """A Hub for one repo that answers correctly, except where ``hostile`` (path regex -> raw handler) says."""

    def __init__(self, hostile: dict[str, Callable[[RawRequest, Send], object]]):
        self.hostile = hostile
        self.sent: dict[str, int] = {}

    def __call__(self, request: RawRequest, send: Send) -> object:
        for pattern, handler in self.hostile.items():
            if re.search(pattern, request.path):
                return handler(request, send)
        if request.path.startswith(f"/api/models/{REPO}"):
            send(response(body=_listing(), headers=[("Content-Type", "application/json")]))
            return "keep"
        name = request.path.rsplit("/", 1)[-1]
        data = FILES.get(name)
        if data is None:
            send(response("404 Not Found", body=b"{}", headers=[("X-Error-Code", "EntryNotFound")]))
            return "keep"
        m = re.match(r"bytes=(\d+)-(\d+)", request.headers.get("range", ""))
        if m:
            start, end = int(m.group(1)), min(int(m.group(2)) + 1, len(data))
            send(response("206 Partial Content", body=data[start:end],
                          headers=[("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")]))
        else:
            send(response(body=data))
        return "keep"


def _raw(data: bytes) -> Callable[[RawRequest, Send], None]:
    return lambda request, send: send(data)


def _endless_chunks(request: RawRequest, send: Send) -> None:
    send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    while True:
        send(b"10000\r\n" + b" " * 0x10000 + b"\r\n")


def _gzip_bomb() -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b" " * (1 << 20)
    return b"".join([*(z.compress(block) for _ in range(64)), z.flush()])  # 64 MiB of spaces in ~64 kB


def _whole_file_for_a_range(counter: dict[str, int]) -> Callable[[RawRequest, Send], None]:
    """200 instead of 206: the header, then zeros as if the file were 10 GB, sent until the client hangs up."""

    def handler(request: RawRequest, send: Send) -> None:
        data = FILES["model.safetensors"]
        send(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n" + data)
        counter["sent"] = len(data)
        while True:
            send(b"\0" * (1 << 20))
            counter["sent"] += 1 << 20

    return handler


def _statuses(status: str, retry_after: str, times: int):
    """``times`` answers of ``status`` with that Retry-After, then the real listing."""
    left = [times]

    def handler(request: RawRequest, send: Send) -> object:
        if left[0] > 0:
            left[0] -= 1
            send(response(status, body=b'{"error": "busy"}', headers=[("Retry-After", retry_after)]))
            return "keep"
        send(response(body=_listing()))
        return "keep"

    return handler


LISTING = r"^/api/models/"
SHARD = r"model\.safetensors$"
MALFORMED = "sent a malformed answer"
#: (id, path, handler, exit code, what stderr's last line says)
CASES: list[tuple[str, str, Callable[[RawRequest, Send], object], int, str]] = [
    ("content-length-superscript-two", LISTING, _raw(b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\n{}"), 2, MALFORMED),
    ("content-length-arabic-digits", LISTING, _raw("HTTP/1.1 200 OK\r\nContent-Length: \u0662\r\n\r\n{}".encode()), 2,
     MALFORMED),
    ("content-length-negative", LISTING, _raw(b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n{}"), 2, MALFORMED),
    ("content-length-huge", LISTING, _raw(b"HTTP/1.1 200 OK\r\nContent-Length: 1" + b"0" * 30 + b"\r\n\r\n{}"), 2,
     MALFORMED),
    ("content-length-duplicates", LISTING,
     _raw(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}"), 2, MALFORMED),
    ("content-length-and-chunked", LISTING,
     _raw(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"), 2,
     MALFORMED),
    ("status-code-letters", LISTING, _raw(b"HTTP/1.1 2OO OK\r\nContent-Length: 2\r\n\r\n{}"), 2, MALFORMED),
    ("status-code-superscripts", LISTING, _raw(b"HTTP/1.1 \xb2\xb2\xb2 OK\r\nContent-Length: 2\r\n\r\n{}"), 2,
     MALFORMED),
    ("status-line-not-http", LISTING, _raw(b"ICY 200 OK\r\n\r\n{}"), 2, MALFORMED),
    ("header-without-colon", LISTING, _raw(b"HTTP/1.1 200 OK\r\nno colon\r\nContent-Length: 2\r\n\r\n{}"), 2,
     MALFORMED),
    ("header-block-200-kib", LISTING, _raw(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n{}"), 2,
     MALFORMED),
    ("chunk-size-not-hex", LISTING, _raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
     2, MALFORMED),
    ("chunk-size-negative", LISTING,
     _raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-2\r\n{}\r\n0\r\n\r\n"), 2, MALFORMED),
    ("chunked-cut-short", LISTING, _raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n"), 2,
     "closed the connection before the answer was complete"),
    ("chunk-huge-then-close", LISTING,
     _raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n{}"), 2,
     "closed the connection before the answer was complete"),
    ("chunks-without-end", LISTING, _endless_chunks, 2, r"repo info is over \d+ bytes \(limit max_json_bytes\)"),
    ("gzip-bomb", LISTING, _raw(response(body=_gzip_bomb(), headers=[("Content-Encoding", "gzip")])), 2,
     r"repo info is over \d+ bytes \(limit max_json_bytes\)"),
    ("gzip-corrupt", LISTING, _raw(response(body=b"\x1f\x8b\x08\x00" + b"\xff" * 40, headers=[("Content-Encoding", "gzip")])),
     2, r"cannot decode: the gzip body is corrupt"),
    ("gzip-cut-short", LISTING, _raw(response(body=gzip.compress(_listing())[:-12], headers=[("Content-Encoding", "gzip")])),
     2, r"cannot decode: the gzip body ended before its end marker"),
    ("brotli-not-asked-for", LISTING, _raw(response(body=b"\x0b\x02\x80{}\x03", headers=[("Content-Encoding", "br")])),
     2, "Content-Encoding 'br' was not asked for"),
    ("closed-without-answer", LISTING, _raw(b""), 2, "closed the connection before the answer was complete"),
    ("redirect-loop", LISTING, _raw(response("302 Found", headers=[("Location", "/api/models/org/hostile")])), 2,
     "more than 20 redirects"),
    ("redirect-to-file", LISTING, _raw(response("301 Moved", headers=[("Location", "file:///etc/passwd")])), 2,
     r"not an http\(s\) URL"),
    ("redirect-to-nowhere", LISTING, _raw(response("302 Found", headers=[("Location", "http://[::1")])), 2,
     "a redirect to an unusable URL"),
    ("retry-after-an-hour", LISTING, _statuses("429 Too Many Requests", "3600", 100), 2,
     r"rate limited .* after 1 attempts; the server asks to retry after 3600 s"),
    ("retry-after-huge", LISTING, _statuses("429 Too Many Requests", "9" * 40, 100), 2,
     r"rate limited .* the server asks to retry after 1e\+40 s"),
    ("retry-after-year-9999", LISTING, _statuses("503 Busy", "Fri, 31 Dec 9999 23:59:59 GMT", 100), 2,
     r"failed with HTTP 503 on repo info .* after 1 attempts"),
    ("retry-after-zero", LISTING, _statuses("503 Busy", "0", 1), 0, ""),
    ("retry-after-fraction", LISTING, _statuses("429 Too Many Requests", "0.01", 1), 0, ""),
    ("retry-after-past-date", LISTING, _statuses("503 Busy", "Thu, 01 Jan 1970 00:00:00 GMT", 1), 0, ""),
    ("retry-after-garbage", LISTING, _statuses("503 Busy", "soon, maybe", 1), 0, ""),
    ("retry-after-negative", LISTING, _statuses("429 Too Many Requests", "-30", 1), 0, ""),
    ("retry-after-superscript", LISTING, _statuses("429 Too Many Requests", "\u00b2".encode().decode("latin-1"), 1),
     0, ""),
    ("drip-status-line", LISTING, drip(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", 0.2), 2,
     r"the run's 3 s network deadline passed .* QCHECK_HUB_DEADLINE"),
    ("drip-body", LISTING,
     lambda request, send: (send(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"),
                            drip(b" " * 100_000, 0.2)(request, send)), 2,
     r"the run's 3 s network deadline passed .* QCHECK_HUB_DEADLINE"),
    ("shard-status-line-garbage", SHARD, _raw(b"HTTP/1.1 20 OK\r\n\r\n"), 2, MALFORMED),
    ("shard-content-range-lies", SHARD,
     _raw(response("206 Partial Content", body=b"x" * 100, headers=[("Content-Range", "bytes 5-104/999")])), 2,
     r"answered range 0-\d+ with Content-Range 'bytes 5-104/999'"),
]


def _run(server: RawServer, tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "QCHECK_"))}
    full.update({"HF_ENDPOINT": server.url, "HF_HUB_CACHE": str(tmp_path / "hf-cache"), "HF_TOKEN": TOKEN,
                 "QCHECK_HUB_BACKOFF": "0", "QCHECK_HUB_RETRIES": "1", "QCHECK_HUB_DEADLINE": "150", **env})
    return subprocess.run([sys.executable, "-m", "qcheck", *args], capture_output=True, text=True, env=full,
                          timeout=200)


def _one_line(proc: subprocess.CompletedProcess[str], expect: str) -> None:
    """Exit 2, stdout empty, and stderr one error line (after any 'retrying' notices); no traceback, no token."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert all(" retrying in " in ln for ln in lines[:-1]), proc.stderr
    assert lines[-1].startswith("qcheck: error: "), proc.stderr
    assert re.search(expect, lines[-1]), lines[-1]
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert TOKEN not in proc.stderr


@pytest.mark.parametrize(("handler", "path", "code", "expect"), [pytest.param(h, p, c, e, id=i)
                                                                    for i, p, h, c, e in CASES])
def test_a_hostile_hub_gets_one_line_or_a_retry_through_the_cli(handler, path, code, expect, tmp_path):
    # a generous deadline (a loaded machine must not end a run early), but a short one where only a deadline can
    # end the run (a drip): passed or not by the time the request starts, the answer is the same line
    deadline = "3" if "deadline" in expect else "150"
    with RawServer(HostileHub({path: handler})) as server:
        proc = _run(server, tmp_path, "inspect", REPO, "--json", QCHECK_HUB_DEADLINE=deadline)
    if code == 0:  # a wait the server asked for (or garbage, read as none) was waited, and the answer read
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["revision"] == SHA
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and re.fullmatch(rf"qcheck: HTTP (429|503) from {re.escape(server.url)} \(repo info\); "
                                                r"retrying in \d+\.\d s \(attempt 2 of 2\)", lines[0]), lines
    else:
        _one_line(proc, expect)


def test_a_200_answering_a_range_is_read_only_as_far_as_asked(tmp_path):
    counter: dict[str, int] = {}
    with RawServer(HostileHub({SHARD: _whole_file_for_a_range(counter)})) as server:
        proc = _run(server, tmp_path, "inspect", REPO, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["tensor_count"] == len(llama_tensors(1))
    # the client stopped after the bytes it asked for: what the server pushed meanwhile is bounded by the
    # sockets' buffers, nowhere near the 10 GB announced
    assert counter["sent"] < 1 << 30


def test_a_redirect_to_another_host_never_carries_the_token(tmp_path):
    seen: list[tuple[str, str | None]] = []

    def cdn(request: RawRequest, send: Send) -> object:
        seen.append((request.path, request.headers.get("authorization")))
        return HostileHub({})(request, send)

    with RawServer(cdn) as other:
        def redirect(request: RawRequest, send: Send) -> None:
            seen.append((request.path, request.headers.get("authorization")))
            send(response("302 Found", headers=[("Location", f"http://localhost:{other.port}/cdn/model.safetensors")]))

        with RawServer(HostileHub({SHARD: redirect})) as server:
            proc = _run(server, tmp_path, "inspect", REPO, "--json")
    assert proc.returncode == 0, proc.stderr
    assert seen[0] == (f"/{REPO}/resolve/{SHA}/model.safetensors", f"Bearer {TOKEN}")
    assert seen[1:] and all(path == "/cdn/model.safetensors" and auth is None for path, auth in seen[1:])


def test_a_name_that_never_resolves_ends_at_the_deadline(tmp_path):
    """The resolver is stuck for good (``getaddrinfo`` blocks on ``*.slow.test`` in the qcheck process): only the
    run's deadline can end it."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent("""
        import socket, threading
        _real, _never = socket.getaddrinfo, threading.Event()
        def getaddrinfo(host, *args, **kwargs):
            if str(host).endswith(".slow.test"):
                _never.wait()
            return _real(host, *args, **kwargs)
        socket.getaddrinfo = getaddrinfo
    """))
    with RawServer(HostileHub({})) as server:
        proc = _run(server, tmp_path, "inspect", REPO, HF_ENDPOINT="http://hub.slow.test:1", QCHECK_HUB_DEADLINE="3",
                    PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    _one_line(proc, r"gave up on repo info in org/hostile from http://hub\.slow\.test:1: the run's 3 s network "
                    r"deadline passed")


# ------------------------------------------------------------------------------------------ the eval endpoint client
@pytest.mark.parametrize(("handler", "expect"), [pytest.param(h, e, id=i) for i, p, h, c, e in CASES
                                                 if c == 2 and p == LISTING and "deadline" not in e
                                                 and "max_json_bytes" not in e and "rate limited" not in e
                                                 and "HTTP 503" not in e])
def test_the_eval_endpoint_client_gives_one_line_for_every_hostile_answer(handler, expect):
    with RawServer(HostileHub({r"^/": handler})) as server:  # every path: a redirect's target is hostile too
        client = HttpClient(server.url, api_key="sk-test-secret-key-0123", timeout=10, retries=1, backoff=0)
        with pytest.raises(EndpointError) as info:
            client.get("/v1/models")
        client.close()
    text = str(info.value)
    assert "\n" not in text and re.search(expect, text), text
    assert text.startswith(f"GET {server.url}/v1/models: ") and "sk-test-secret" not in text


@pytest.mark.parametrize("handler", [drip(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", 0.2),
                                     lambda request, send: (send(b"HTTP/1.1 200 OK\r\nContent-Length: 99999\r\n\r\n"),
                                                            drip(b" " * 99_999, 0.2)(request, send))],
                         ids=["drip-status-line", "drip-body"])
def test_the_eval_request_timeout_bounds_a_whole_attempt(handler):
    with RawServer(HostileHub({r"^/v1/": handler})) as server:
        client = HttpClient(server.url, timeout=1, retries=1, backoff=0)
        with pytest.raises(EndpointError, match=r"no complete answer within the 1 s limit of one attempt "
                                                r"\(2 attempts\)"):
            client.get("/v1/models")
        client.close()
    assert client.requests == 2 and client.retried == 1


def test_the_eval_client_refuses_a_wait_it_will_not_make_and_says_so():
    with RawServer(HostileHub({r"^/v1/": _statuses("429 Too Many Requests", "3600", 100)})) as server:
        client = HttpClient(server.url, timeout=10, retries=5, backoff=0)
        with pytest.raises(EndpointError, match=r"HTTP 429 \(the server asks to retry after 3600 s, longer than the 120 s "
                                                r"qcheck waits; finished requests are kept for a rerun\): busy$"):
            client.get("/v1/models")
        client.close()
    assert len(server.requests) == 1


def test_the_eval_client_waits_what_the_server_asks_in_any_form_then_succeeds():
    body = json.dumps({"data": [{"id": "m"}]}).encode()
    for value in ("0", "0.01", "Thu, 01 Jan 1970 00:00:00 GMT", "garbage"):
        left = [2]

        def handler(request: RawRequest, send: Send, value: str = value, left: list[int] = left) -> object:
            if left[0]:
                left[0] -= 1
                send(response("503 Busy", body=b"{}", headers=[("Retry-After", value)]))
            else:
                send(response(body=body))
            return "keep"

        with RawServer(handler) as server:
            client = HttpClient(server.url, timeout=10, retries=2, backoff=0)
            assert client.get("/v1/models") == {"data": [{"id": "m"}]}
            client.close()
        assert client.requests == 3 and client.retried == 2, value


def test_the_eval_client_bounds_a_gzip_bomb():
    bomb = gzip.compress(b" " * (8 << 20))
    with RawServer(HostileHub({r"^/v1/": _raw(response(body=bomb, headers=[("Content-Encoding", "gzip")]))})) as srv:
        import qcheck.eval.runners.http as http

        old, http.MAX_RESPONSE_BYTES = http.MAX_RESPONSE_BYTES, 1 << 20
        try:
            client = HttpClient(srv.url, timeout=10, retries=0)
            with pytest.raises(EndpointError, match=r"response is over 1048576 bytes"):
                client.get("/v1/models")
            client.close()
        finally:
            http.MAX_RESPONSE_BYTES = old


def test_the_eval_request_timeout_bounds_name_resolution(monkeypatch):
    """A resolver stuck for good (``getaddrinfo`` never returns for ``*.slow.test``): each attempt ends at
    ``--request-timeout``, and the run with one line after its retries."""
    import socket
    import threading

    release = threading.Event()
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if str(host).endswith(".slow.test"):
            release.wait()
            raise socket.gaierror(socket.EAI_NONAME, "released")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    try:
        client = HttpClient("http://vllm.slow.test:8000", timeout=1, retries=1, backoff=0)
        with pytest.raises(EndpointError, match=r"^GET http://vllm\.slow\.test:8000/v1/models: timed out talking to "
                                                r"http://vllm\.slow\.test:8000: no complete answer within the 1 s limit "
                                                r"of one attempt \(2 attempts\)$"):
            client.get("/v1/models")
        assert client.requests == 2 and client.retried == 1
    finally:
        release.set()
