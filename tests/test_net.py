"""qcheck.net, the one HTTP stack, against real sockets on 127.0.0.1: what it retries and waits, what it refuses,
what it never sends, how every wait ends at the deadline. No assertion depends on how long anything took."""

from __future__ import annotations

import gzip
import re
import zlib

import pytest

from qcheck.net import Call, Client, NetError, Settings, Watch, parse_retry_after, redact, retry_after
from qcheck.net.body import Malformed, content_length, read_bounded
from qcheck.net.transport import bypasses, env_proxies
from support.rawserver import ForwardProxy, RawServer, drip, response

NOW = 1_800_000_000.0  # a fixed "now" for HTTP-date waits: 2027-01-15 08:00:00 UTC


# ------------------------------------------------------------------------------------------ Retry-After
@pytest.mark.parametrize(("value", "seconds"), [
    ("5", 5.0), (" 7 ", 7.0), ("0", 0.0), ("1.5", 1.5), ("99999999999999999999", 1e20),
    ("Fri, 15 Jan 2027 08:00:30 GMT", 30.0), ("Friday, 15-Jan-27 08:01:00 GMT", 60.0),
    ("Fri Jan 15 08:00:10 2027", 10.0), ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
    ("-3", None), ("+3", None), ("\u00b2", None), ("3\u00b2", None), ("nan", None), ("inf", None),
    ("1e400", None), ("1_000", None), ("soon", None), ("", None), ("Fri, 99 Foo 2027 99:99:99 GMT", None),
    ("x" * 10_000, None), ("0x10", None),
])
def test_retry_after_in_every_form(value, seconds):
    assert parse_retry_after(value, now=NOW) == seconds


def test_the_hubs_ratelimit_header_wins_when_exhausted():
    assert retry_after({"ratelimit": '"api";r=0;t=55', "retry-after": "3"}) == 55.0
    assert retry_after({"ratelimit": '"api";r=7;t=55', "retry-after": "3"}) == 3.0
    assert retry_after({"ratelimit": '"api";r=0;t=\u00b2'}) is None
    assert retry_after({}) is None


# ------------------------------------------------------------------------------------------ redaction, lengths
def test_redaction_covers_tokens_keys_bearers_and_url_passwords():
    text = ("token mysecret123 hf_abcdefghijklmnop api_org_ABCDEFGHIJ sk-proj-abcdef123456 gsk_ABCDEFGHIJKL "
            "Authorization: Bearer opaque-value https://user:pa55word@proxy.example:3128/x")
    out = redact(text, "mysecret123", None)
    for secret in ("mysecret123", "hf_abcdefghijklmnop", "api_org_ABCDEFGHIJ", "sk-proj-abcdef123456",
                   "gsk_ABCDEFGHIJKL", "opaque-value", "pa55word"):
        assert secret not in out, secret
    assert "https://***@proxy.example:3128/x" in out  # the whole userinfo: a user name may be a token too


@pytest.mark.parametrize("values", [["\u00b2"], ["-1"], ["1e3"], [" "], ["12 34"], ["0x10"], ["99999999999999999999"],
                                    [str(2**62 + 1)], ["5", "6"], ["\u0661\u0662"]])
def test_content_length_must_be_ascii_digits_within_reason(values):
    with pytest.raises(Malformed):
        content_length(values)


def test_content_length_accepts_plain_and_equal_duplicates():
    assert content_length(["42"]) == 42 and content_length(["7", " 7"]) == 7 and content_length([]) is None


def _bomb(size: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = b"\0" * (1 << 20)
    return b"".join([*(z.compress(block) for _ in range(size >> 20)), z.flush()])


def test_a_gzip_bomb_is_inflated_only_up_to_the_limit():
    bomb = _bomb(256 << 20)  # 256 MiB of zeros in ~250 kB
    chunks = [bomb[i:i + 65536] for i in range(0, len(bomb), 65536)]
    body, complete = read_bounded(iter(chunks), 1 << 20, "gzip")
    assert len(body) == 1 << 20 and not complete
    body, complete = read_bounded(iter([gzip.compress(b"abc"), gzip.compress(b"def")]), 100, "gzip")
    assert body == b"abcdef" and complete  # several gzip members, as RFC 1952 allows
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    assert read_bounded(iter([raw.compress(b"xyz") + raw.flush()]), 100, "deflate") == (b"xyz", True)
    with pytest.raises(Malformed, match="corrupt"):
        read_bounded(iter([b"not gzip at all"]), 100, "gzip")
    with pytest.raises(Malformed, match="was not asked for"):
        read_bounded(iter([b"x"]), 100, "br")
    with pytest.raises(Malformed, match="was not asked for"):
        read_bounded(iter([b"x"]), 100, "gzip, gzip")


# ------------------------------------------------------------------------------------------ a real server
def _client(**settings) -> Client:
    return Client(Settings(**{"timeout": 10.0, "retries": 2, "backoff": 0.0, **settings}))


def _get(server: RawServer, path: str = "/x", *, max_bytes: int = 1000, watch: Watch | None = None, **settings):
    with _client(**settings) as client:
        return client.request("GET", server.url + path, Call(max_bytes=max_bytes), watch)


def _fails(handler, kind: str, match: str = "", **settings) -> NetError:
    with RawServer(handler) as server, pytest.raises(NetError) as info:
        _get(server, **settings)
    err = info.value
    assert err.kind == kind, err
    assert re.search(match, str(err)), str(err)
    assert "\n" not in str(err) and "Traceback" not in str(err)
    return err


def _answer(data: bytes):
    return lambda request, send: send(data)


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 2OO OK\r\nContent-Length: 0\r\n\r\n", b"HTTP/1.1 99999 Huge\r\nContent-Length: 0\r\n\r\n",
    b"garbage\r\n\r\n", b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", b"HTTP/1.1 200 OK\r\n: empty name\r\n\r\n",
    b"HTTP/1.1 \xb2\xb2\xb2 OK\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\nx", b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000000000000000000000000\r\n\r\nx",
    b"HTTP/1.1 200 OK\r\nContent-Length: 1e3\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\n" + b"X-Long: " + b"a" * 200_000 + b"\r\n\r\n",
])
def test_a_malformed_answer_is_one_line(raw):
    _fails(_answer(raw), "protocol", r"sent a malformed answer")


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",  # no last chunk
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\nhello",  # a huge chunk, then close
    b"", b"HTTP/1.1 200 OK\r\nContent-Le",
])
def test_an_answer_cut_short_is_retried_then_one_line(raw):
    err = _fails(_answer(raw), "closed", r"closed the connection before the answer was complete.*\(3 attempts\)")
    assert err.attempts == 3


def test_endless_chunks_and_a_200_for_a_range_are_read_only_up_to_the_limit():
    def endless(request, send):
        send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        while True:
            send(b"10000\r\n" + b"x" * 0x10000 + b"\r\n")

    def whole_file(request, send):  # Range ignored: 200 and a 10 GB body
        send(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n")
        while True:
            send(b"\0" * (1 << 20))

    class Count(Watch):
        def __init__(self) -> None:
            super().__init__()
            self.seen = 0

        def received(self, nbytes: int) -> None:
            self.seen += nbytes

    for handler in (endless, whole_file):
        count = Count()
        with RawServer(handler) as server, _client() as client:
            resp = client.request("GET", server.url + "/big", Call(max_bytes=100_000, headers={"Range": "bytes=0-99999"},
                                                                   identity=True), count)
        assert resp.status == 200 and len(resp.body) == 100_000 and not resp.complete
        assert count.seen <= 100_000 + (1 << 20)  # the bytes asked for and at most one read more


def test_a_gzip_bomb_from_a_server_stops_at_the_limit():
    bomb = _bomb(64 << 20)
    with RawServer(_answer(response(body=bomb, headers=[("Content-Encoding", "gzip")]))) as server:
        resp = _get(server, max_bytes=1 << 20)
    assert len(resp.body) == 1 << 20 and not resp.complete and set(resp.body) == {0}
    _fails(_answer(response(body=b"...", headers=[("Content-Encoding", "br")])), "encoding", "was not asked for")


# ------------------------------------------------------------------------------------------ redirects
def test_a_redirect_loop_ends_in_one_line():
    loop = lambda request, send: send(response("302 Found", headers=[("Location", "/again")]))  # noqa: E731
    err = _fails(loop, "redirect", r"more than 20 redirects")
    assert err.attempts == 1


def test_303_keeps_head_turns_post_into_get_and_307_resends_the_body(monkeypatch):
    monkeypatch.setattr("qcheck.net.transport.KEEPALIVE_EXPIRY", 600.0)  # a stalled machine expires no connection
    def handler(request, send):
        head = request.method == "HEAD"  # an answer to HEAD has no body (its length is the GET's)
        if request.path == "/see-other":
            data = response("303 See Other", body=b"REDIRECT-BODY", headers=[("Location", "/target")])
        elif request.path == "/temporary":
            data = response("307 Temporary Redirect", body=b"REDIRECT-BODY", headers=[("Location", "/target")])
        else:
            data = response(body=b"TARGET:" + request.method.encode() + b":" + request.body)
        send(data[:data.index(b"\r\n\r\n") + 4] if head else data)
        return "keep"

    with RawServer(handler) as server, _client() as client:
        head = client.request("HEAD", server.url + "/see-other", Call(max_bytes=100))
        post = client.request("POST", server.url + "/see-other", Call(max_bytes=100, body=b"payload"))
        kept = client.request("POST", server.url + "/temporary", Call(max_bytes=100, body=b"payload"))
    methods = [(r.method, r.path, r.body) for r in server.requests]
    assert methods == [("HEAD", "/see-other", b""), ("HEAD", "/target", b""),
                       ("POST", "/see-other", b"payload"), ("GET", "/target", b""),
                       ("POST", "/temporary", b"payload"), ("POST", "/target", b"payload")]
    assert head.body == b"" and post.body == b"TARGET:GET:" and kept.body == b"TARGET:POST:payload"
    # a HEAD closes its connection (two here); the short redirect bodies were read and dropped, so the POSTs and
    # their redirects share one kept-alive connection
    assert server.connections == 3


def test_a_body_sent_with_an_answer_to_head_is_never_read_as_the_next_answer():
    def handler(request, send):
        send(response(body=b"BODY-SENT-TO-HEAD" if request.method == "HEAD" else b"the real answer"))
        return "keep"

    with RawServer(handler) as server, _client() as client:
        head = client.request("HEAD", server.url + "/x", Call(max_bytes=100))
        get = client.request("GET", server.url + "/x", Call(max_bytes=100))
    assert head.status == 200 and head.body == b"" and get.body == b"the real answer"
    assert server.requests[0].headers.get("connection") == "close"


def test_a_redirects_body_is_never_the_answer():
    def handler(request, send):
        if request.path == "/start":  # a redirect with a long body, and bytes after it
            send(response("302 Found", body=b"R" * 100_000, headers=[("Location", "/target")]) + b"HTTP/1.1 200 OK")
        else:
            send(response(body=b"target"))

    with RawServer(handler) as server:
        resp = _get(server, "/start")
    assert resp.body == b"target" and resp.url.endswith("/target")


def test_credentials_never_follow_a_redirect_to_another_origin():
    seen: list[tuple[str, str | None]] = []

    def target(request, send):
        seen.append((request.path, request.headers.get("authorization")))
        send(response(body=b"ok"))

    with RawServer(target) as other:
        def origin(request, send):
            seen.append((request.path, request.headers.get("authorization")))
            where = "/here" if request.path == "/same" else f"http://localhost:{other.port}/there"
            if request.path in ("/same", "/cross"):
                send(response("302 Found", headers=[("Location", where)]))
            else:
                send(response(body=b"ok"))

        with RawServer(origin) as server, Client(headers={"Authorization": "Bearer hf_secretsecretsecret"}) as c:
            c.request("GET", server.url + "/same", Call(max_bytes=10))
            c.request("GET", server.url + "/cross", Call(max_bytes=10))
    assert seen == [("/same", "Bearer hf_secretsecretsecret"), ("/here", "Bearer hf_secretsecretsecret"),
                    ("/cross", "Bearer hf_secretsecretsecret"), ("/there", None)]


def test_a_redirect_to_another_scheme_is_refused():
    _fails(_answer(response("302 Found", headers=[("Location", "ftp://example.org/x")])), "redirect",
           r"not an http\(s\) URL")
    _fails(_answer(response("302 Found", headers=[("Location", "file:///etc/passwd")])), "redirect",
           r"not an http\(s\) URL")


# ------------------------------------------------------------------------------------------ retries and waits
def _statuses(*answers: bytes):
    queue = list(answers)

    def handler(request, send):
        send(queue.pop(0) if queue else response(body=b"done"))
        return "keep"

    return handler


@pytest.mark.parametrize("value", ["0", "0.0", "Thu, 01 Jan 1970 00:00:00 GMT", "soon", "-1", "\u00b2"])
def test_a_wait_the_server_asks_for_or_garbage_is_retried(value, monkeypatch):
    import qcheck.net.client as client

    waits: list[float] = []
    monkeypatch.setattr(client.time, "sleep", waits.append)
    busy = response("503 Busy", headers=[("Retry-After", value.encode("utf-8").decode("latin-1"))])
    with RawServer(_statuses(busy, busy)) as server:
        resp = _get(server, backoff=0.25)
    assert resp.status == 200 and resp.body == b"done" and resp.attempts == 3
    garbage = parse_retry_after(value) is None
    assert waits == ([0.25, 0.5] if garbage else [0.0, 0.0])  # garbage: the client's own backoff


@pytest.mark.parametrize("value", ["3600", "99999999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"])
def test_a_wait_longer_than_allowed_is_not_slept(value, monkeypatch):
    import qcheck.net.client as client

    monkeypatch.setattr(client.time, "sleep", lambda s: pytest.fail(f"slept {s} s"))
    with RawServer(_statuses(*[response("429 Too Many", headers=[("Retry-After", value)])] * 5)) as server:
        resp = _get(server, max_wait=30.0)
    assert resp.status == 429 and resp.wait_refused and resp.retry_after is not None and resp.retry_after > 30
    assert len(server.requests) == 1


def test_an_error_status_keeps_a_bounded_body():
    with RawServer(_answer(response("400 Bad Request", body=b"E" * 1_000_000))) as server, _client() as client:
        resp = client.request("GET", server.url + "/x", Call(max_bytes=10 << 20, error_bytes=1000))
    assert resp.status == 400 and resp.body == b"E" * 1000 and not resp.complete


# ------------------------------------------------------------------------------------------ deadlines
class _Deadline(Watch):
    """A deadline that has not passed until the test says so: no assertion on time."""

    def __init__(self, seconds: float):
        super().__init__()
        import time

        self.end = time.monotonic() + seconds

    def remaining(self) -> float:
        import time

        return self.end - time.monotonic()

    def expired(self):
        return NetError("deadline", "the test's deadline passed")


@pytest.mark.parametrize("what", ["status line", "headers", "body"])
def test_a_dripping_server_ends_at_the_deadline(what):
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n"
    data = {"status line": head, "headers": head + b"X-Slow: " + b"a" * 1000,
            "body": head + b"\r\n" + b" " * 1_000_000}[what]
    handler = drip(data, 0.05) if what != "body" else (
        lambda request, send: (send(head + b"\r\n"), drip(b" " * 1_000_000, 0.05)(request, send)))
    with RawServer(handler) as server, pytest.raises(NetError, match="the test's deadline passed"):
        _get(server, max_bytes=2_000_000, watch=_Deadline(1.0), timeout=5.0)  # each read comes in time


def test_name_resolution_is_bounded_by_the_deadline(slow_resolver):
    with pytest.raises(NetError, match="the test's deadline passed"), _client(timeout=600.0) as client:
        client.request("GET", "http://hub.slow.test/x", Call(max_bytes=10), _Deadline(1.0))


def test_name_resolution_is_bounded_by_the_attempt_limit_and_retried(slow_resolver):
    with pytest.raises(NetError) as info, _client(timeout=600.0, attempt_limit=0.5, retries=1) as client:
        client.request("GET", "http://hub.slow.test/x", Call(max_bytes=10))
    assert info.value.kind == "timeout" and info.value.attempts == 2
    assert "no complete answer within the 0.5 s limit of one attempt" in str(info.value)


# ------------------------------------------------------------------------------------------ proxies
def test_proxies_come_from_the_environment_as_httpx_reads_them():
    env = {"HTTPS_PROXY": "http://upper:1", "https_proxy": "lower:2", "ALL_PROXY": "socks5://s:3",
           "no_proxy": "localhost, .internal.example,10.0.0.1"}
    proxies, no_proxy = env_proxies(env)
    assert proxies == {"https": "http://lower:2", "all": "socks5://s:3"}
    assert no_proxy == ["localhost", ".internal.example", "10.0.0.1"]
    assert env_proxies({"HTTP_PROXY": "http://p:1", "REQUEST_METHOD": "GET"})[0] == {}  # CGI: httpoxy
    assert env_proxies({"HTTP_PROXY": "http://p:1", "NO_PROXY": "a.example,*"}) == ({}, [])
    assert bypasses("example.com", "https", "example.com", 443) and bypasses("example.com", "http", "a.example.com", 80)
    assert not bypasses("example.com", "http", "notexample.com", 80)
    assert bypasses(".example.com", "http", "a.example.com", 80) and not bypasses(".example.com", "http",
                                                                                 "example.com", 80)
    assert bypasses("*.example.com", "http", "a.example.com", 80)
    assert bypasses("127.0.0.1:8080", "http", "127.0.0.1", 8080) and not bypasses("127.0.0.1:8080", "http",
                                                                                   "127.0.0.1", 9090)
    assert bypasses("https://example.com", "https", "example.com", 443) and not bypasses(
        "https://example.com", "http", "example.com", 80)
    assert bypasses("[::1]", "http", "::1", 80)


def test_requests_go_through_the_environments_proxy_unless_no_proxy_says_otherwise(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    with RawServer(lambda request, send: send(response(body=b"origin"))) as origin, ForwardProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        with Client() as client:
            assert client.request("GET", origin.url + "/via", Call(max_bytes=10)).body == b"origin"
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        with Client() as client:
            assert client.request("GET", origin.url + "/direct", Call(max_bytes=10)).body == b"origin"
    assert proxy.seen == [origin.url + "/via"]
    assert origin.paths() == ["/via", "/direct"]
