"""What keeps a many-shard Hub read cheap: kept-alive connections, one range request per shard, no helper thread
per request. Counts only (requests, connections, threads), never wall-clock times: bench/bench_hub.py times it."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import httpx2
import pytest
from huggingface_hub.utils import close_session, set_client_factory
from huggingface_hub.utils._http import default_client_factory

from qcheck.budget import Budget
from qcheck.hub.wire import Unsupported, Wire, plain_session, usable
from qcheck.readers import load_checkpoint
from support.hubserver import CONFIG, TOKEN, FakeHub, sharded_repo

TLS = Path(__file__).parent / "support" / "tls"


def test_shard_reads_reuse_kept_alive_connections(hub, monkeypatch):
    # two workers read 12 shard headers one after another: each exact-length range answer is read to its end,
    # so the connection goes back to the pool instead of being closed and opened again for the next shard
    monkeypatch.setenv("QCHECK_HUB_WORKERS", "2")
    hub.add_repo("org/twelve", sharded_repo(12))
    ck = load_checkpoint("org/twelve")
    assert len(ck.tensors) == 12 * 18
    assert len(hub.requests(r"\.safetensors$")) == 12
    assert len(hub.requests()) == 15  # repo info, config.json, the index, 12 shard headers
    assert hub.connections <= 6, hub.connections  # the main thread's and the two workers' (and spares); 13 if not kept


def _log(hub):
    return sorted((r.method, r.path, r.range or "", r.status, r.auth) for r in hub.requests())


def _tensors(ck):
    return sorted((name, t.dtype, tuple(t.shape), t.file) for name, t in ck.tensors.items())


@pytest.mark.parametrize("redirect", [False, True])
def test_the_lean_path_and_the_session_read_the_same_bytes_the_same_way(redirect, hub, monkeypatch):
    # the lean HTTP/1.1 path (default) against huggingface_hub's session (QCHECK_HUB_SESSION=1): the same
    # requests (method, path, range, status, token or not: none to the CDN), the same checkpoint
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.redirect_lfs = redirect
    hub.add_repo("org/four", sharded_repo(4))
    lean = load_checkpoint("org/four")
    lean_log, lean_connections = _log(hub), hub.connections
    hub.clear_log()
    monkeypatch.setenv("QCHECK_HUB_SESSION", "1")
    session = load_checkpoint("org/four")
    assert _tensors(lean) == _tensors(session) and len(lean.tensors) == 4 * 18
    assert lean_log == _log(hub)
    assert len(lean_log) == 3 + 4 * (2 if redirect else 1)
    assert all(not auth for _m, path, _r, _s, auth in lean_log if path.startswith("/cdn/"))
    assert lean_connections <= len(lean_log)


def test_a_custom_client_factory_carries_every_request(hub):
    # a user's set_client_factory (proxy, certificates, transport) is honoured: nothing bypasses that client
    seen: list[str] = []
    set_client_factory(lambda: httpx2.Client(event_hooks={"request": [lambda r: seen.append(r.url.path)]},
                                             follow_redirects=True, timeout=None))
    try:
        hub.add_repo("org/three", sharded_repo(3))
        assert len(load_checkpoint("org/three").tensors) == 3 * 18
    finally:
        set_client_factory(default_client_factory)
    assert sorted(seen) == sorted(r.path for r in hub.requests())
    assert len(seen) == 6


def test_the_lean_path_only_where_the_session_would_do_the_same(hub, monkeypatch):
    url = f"{hub.endpoint}/org/x/resolve/abc/model.safetensors"
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "NO_PROXY",
                "no_proxy", "QCHECK_HUB_SESSION"):
        monkeypatch.delenv(var, raising=False)
    assert plain_session()
    assert usable("GET", url, None) and usable("HEAD", url, None)
    assert not usable("GET", url, {"blobs": "true"}) and not usable("POST", url, None)
    assert not usable("GET", "ftp://example.org/x", None)
    for var in ("https_proxy", "HTTP_PROXY", "all_proxy"):
        monkeypatch.setenv(var, "http://proxy.example:3128")
        assert not plain_session(), var
        monkeypatch.delenv(var)
    monkeypatch.setenv("QCHECK_HUB_SESSION", "1")
    assert not plain_session()
    monkeypatch.setenv("QCHECK_HUB_SESSION", "0")
    assert plain_session()


def test_a_kept_alive_connection_the_server_dropped_is_replaced_once(hub):
    hub.add_repo("org/one", {"config.json": json.dumps(CONFIG).encode()})
    sha = hub.repos["org/one"].refs["main"]
    url = f"{hub.endpoint}/org/one/resolve/{sha}/config.json"
    wire = Wire(keepalive=600)  # a stalled machine must not expire the idle connection before the second read
    budget = Budget(seconds=600)
    kw = dict(take=lambda n: None, remaining=budget.remaining, deadline=lambda: budget.deadline_error("x", "y", "z"))
    first = wire.exchange("GET", url, {}, 10_000, 5.0, **kw)
    hub.inject(r"config\.json$", "reset", times=1)  # the server closes the kept-alive connection unanswered
    second = wire.exchange("GET", url, {}, 10_000, 5.0, **kw)
    assert first[0] == second[0] == 200 and first[2] == second[2] == json.dumps(CONFIG).encode()
    assert len(hub.requests(r"config\.json$")) == 3 and hub.connections == 2
    hub.inject(r"config\.json$", "reset", times=1)  # on a new connection the same drop is an error to retry
    wire.close()
    with pytest.raises(httpx2.RemoteProtocolError):
        wire.exchange("GET", url, {}, 10_000, 5.0, **kw)


def test_a_chunked_answer_is_read_through_the_session(hub):
    hub.chunked = True
    hub.add_repo("org/chunked", sharded_repo(2))
    ck = load_checkpoint("org/chunked")
    assert len(ck.tensors) == 2 * 18 and ck.configs["config.json"]["num_hidden_layers"] == 6
    # each chunked shard answer is asked once on the lean path (its body left unread) and once through the session
    for i in (1, 2):
        assert [r.status for r in hub.requests(rf"model-0000{i}-of-00002\.safetensors$")] == [206, 206]


def test_a_redirect_the_lean_path_cannot_spell_is_left_to_the_session(hub):
    hub.add_repo("org/one", {"config.json": json.dumps(CONFIG).encode()})
    hub.inject(r"config\.json$", 302, headers={"Location": "/org/one/resolve/main/con fig.json"})
    url = f"{hub.endpoint}/org/one/resolve/main/config.json"
    budget = Budget(seconds=600)
    with pytest.raises(Unsupported):
        Wire().exchange("GET", url, {}, 10_000, 5.0, take=lambda n: None, remaining=budget.remaining,
                        deadline=lambda: budget.deadline_error("x", "y", "z"))
    assert len(hub.requests()) == 1  # nothing sent for the redirect target


@pytest.mark.parametrize("value", ["hf_abc\r\nX-Injected: 1", "hf_abc\nHost: elsewhere", "hf_abc\x00"])
def test_a_header_with_a_line_break_is_never_written_by_the_lean_path(hub, value):
    hub.add_repo("org/one", {"config.json": json.dumps(CONFIG).encode()})
    url = f"{hub.endpoint}/org/one/resolve/main/config.json"
    budget = Budget(seconds=600)
    with pytest.raises(Unsupported):
        Wire().exchange("GET", url, {"Authorization": f"Bearer {value}"}, 10_000, 5.0, take=lambda n: None,
                        remaining=budget.remaining, deadline=lambda: budget.deadline_error("x", "y", "z"))
    assert hub.requests() == []  # nothing sent: the session refuses such a value in its own words


@pytest.fixture
def tls_hub(tmp_path, monkeypatch):
    """A FakeHub behind TLS with a self-signed certificate for 127.0.0.1, valid until 2126 (kept in
    tests/support/tls, made once with ``openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes
    -days 36500 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1``: a CI machine needs no openssl command).
    Test-only key: it protects nothing."""
    cert, key = TLS / "cert.pem", TLS / "key.pem"
    server = FakeHub()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    server.httpd.socket = ctx.wrap_socket(server.httpd.socket, server_side=True)
    server.start()
    endpoint = f"https://127.0.0.1:{server.port}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    close_session()  # the shared session reads SSL_CERT_FILE when it is made
    try:
        yield server, endpoint, str(cert)
    finally:
        close_session()
        server.stop()


def test_https_is_verified_and_kept_alive_on_the_lean_path(tls_hub, monkeypatch):
    server, endpoint, cert = tls_hub
    sha = server.add_repo("org/tls", sharded_repo(3))
    budget = Budget(seconds=600)
    kw = dict(take=lambda n: None, remaining=budget.remaining, deadline=lambda: budget.deadline_error("x", "y", "z"))
    with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):  # not trusted: refused
        Wire().exchange("GET", f"{endpoint}/org/tls/resolve/{sha}/config.json", {}, 10_000, 5.0, **kw)
    monkeypatch.setenv("SSL_CERT_FILE", cert)  # trusted, as httpx's default context trusts it
    monkeypatch.setenv("QCHECK_HUB_WORKERS", "1")  # one worker: its reads share one kept-alive TLS connection
    close_session()
    ck = load_checkpoint("org/tls")
    assert len(ck.tensors) == 3 * 18 and ck.revision == sha
    assert len(server.requests(r"\.safetensors$")) == 3 and len(server.requests()) == 6
    # the session's (listing) and the worker's (5 reads), and the main thread's if it reads a shard before the
    # worker gets to it; 6 if nothing were kept alive (a refused handshake is never counted)
    assert server.connections <= 3, server.connections
    assert not server.httpd.errors
