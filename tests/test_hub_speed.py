"""What keeps a many-shard Hub read cheap and safe: kept-alive connections, one range request per shard, CDN
redirects without the token, TLS verified. Counts only (requests, connections), never wall-clock times:
bench/bench_hub.py times it."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import pytest

from qcheck.hub import NetworkError
from qcheck.net import Call, Client, NetError, Settings
from qcheck.readers import load_checkpoint
from support.hubserver import CONFIG, TOKEN, FakeHub, sharded_repo

TLS = Path(__file__).parent / "support" / "tls"


@pytest.fixture(autouse=True)
def _idle_connections_kept(monkeypatch):
    """Idle connections kept 600 s instead of 5: a stalled machine must not expire one between two reads and turn a
    count of connections into a different number."""
    monkeypatch.setattr("qcheck.net.transport.KEEPALIVE_EXPIRY", 600.0)


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


def test_cdn_redirects_read_the_same_bytes_and_never_carry_the_token(hub, monkeypatch):
    # the Hub answers each weight request with a 302 to its CDN (another origin): the first read of a file
    # follows it, the token stays on the Hub's origin, and the checkpoint is the one read without redirects
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.add_repo("org/four", sharded_repo(4))
    plain = load_checkpoint("org/four")
    plain_log = _log(hub)
    hub.clear_log()
    hub.redirect_lfs = True
    redirected = load_checkpoint("org/four")
    assert _tensors(plain) == _tensors(redirected) and len(plain.tensors) == 4 * 18
    log = _log(hub)
    assert len(plain_log) == 3 + 4 and len(log) == 3 + 4 * 2
    cdn = [entry for entry in log if entry[1].startswith("/cdn/")]
    assert len(cdn) == 4 and not any(auth for *_, auth in cdn)
    assert all(auth for _m, path, *_, auth in log if not path.startswith("/cdn/"))


def test_a_kept_alive_connection_the_server_dropped_is_replaced_once(hub):
    hub.add_repo("org/one", {"config.json": json.dumps(CONFIG).encode()})
    sha = hub.repos["org/one"].refs["main"]
    url = f"{hub.endpoint}/org/one/resolve/{sha}/config.json"
    client = Client(Settings(retries=1, backoff=0.0))
    first = client.request("GET", url, Call(max_bytes=10_000))
    hub.inject(r"config\.json$", "reset", times=1)  # the server closes the kept-alive connection unanswered
    second = client.request("GET", url, Call(max_bytes=10_000))
    assert first.status == second.status == 200 and first.body == second.body == json.dumps(CONFIG).encode()
    assert second.attempts == 1  # sent again on a new connection within the attempt, as browsers do
    assert len(hub.requests(r"config\.json$")) == 3 and hub.connections == 2
    hub.inject(r"config\.json$", "reset", times=100)  # a server that always drops: retried, then one line
    with pytest.raises(NetError, match=r"closed the connection before the answer was complete.*\(2 attempts\)"):
        client.request("GET", url, Call(max_bytes=10_000))
    client.close()


def test_a_chunked_answer_is_read_in_one_request(hub):
    hub.chunked = True
    hub.add_repo("org/chunked", sharded_repo(2))
    ck = load_checkpoint("org/chunked")
    assert len(ck.tensors) == 2 * 18 and ck.configs["config.json"]["num_hidden_layers"] == 6
    for i in (1, 2):
        assert [r.status for r in hub.requests(rf"model-0000{i}-of-00002\.safetensors$")] == [206]


def test_a_redirect_to_a_url_with_a_space_is_followed_percent_encoded(hub):
    hub.add_repo("org/one", {"config.json": json.dumps(CONFIG).encode(), "con fig.json": b"{}"})
    hub.inject(r"/config\.json$", 302, headers={"Location": "/org/one/resolve/main/con fig.json"})
    with Client() as client:
        resp = client.request("GET", f"{hub.endpoint}/org/one/resolve/main/config.json", Call(max_bytes=100))
    assert resp.status == 200 and resp.body == b"{}" and resp.url.endswith("/con%20fig.json")


@pytest.mark.parametrize("value", ["hf_abc\r\nX-Injected: 1", "hf_abc\nHost: elsewhere", "hf_abc\x00"])
def test_a_header_with_a_line_break_is_never_written(hub, value):
    hub.add_repo("org/one", {"config.json": json.dumps(CONFIG).encode()})
    url = f"{hub.endpoint}/org/one/resolve/main/config.json"
    with Client() as client, pytest.raises(NetError) as info:
        client.request("GET", url, Call(max_bytes=100, headers={"Authorization": f"Bearer {value}"}))
    assert info.value.kind == "request" and "hf_abc" not in str(info.value)
    assert hub.requests() == []  # nothing sent


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
    try:
        yield server, endpoint, str(cert)
    finally:
        server.stop()


def test_https_is_verified_and_kept_alive(tls_hub, monkeypatch):
    server, _endpoint, cert = tls_hub
    sha = server.add_repo("org/tls", sharded_repo(3))
    with pytest.raises(NetworkError, match=r"cannot connect to https://127\.0\.0\.1:\d+ securely: .*CERTIFICATE_VERIFY"
                                           r".*SSL_CERT_FILE"):  # not trusted: refused, in one line, not retried
        load_checkpoint("org/tls")
    assert server.requests() == []
    monkeypatch.setenv("SSL_CERT_FILE", cert)  # trusted, as httpx's default context trusts it
    monkeypatch.setenv("QCHECK_HUB_WORKERS", "1")  # one worker: its reads share one kept-alive TLS connection
    ck = load_checkpoint("org/tls")
    assert len(ck.tensors) == 3 * 18 and ck.revision == sha
    assert len(server.requests(r"\.safetensors$")) == 3 and len(server.requests()) == 6
    # one pool for the run: the main thread's (listing) and the worker's (5 reads), and another if the main thread
    # reads a shard while the worker holds one; 6 if nothing were kept alive (a refused handshake is never counted)
    assert server.connections <= 3, server.connections
    assert not server.httpd.errors
