"""A fake Hugging Face Hub on 127.0.0.1 for tests and benchmarks (select it with ``HF_ENDPOINT``).

It serves what ``huggingface_hub`` and qcheck call, the way the real Hub answers:

* ``GET /api/models/{repo}/refs`` (branches with their commits, as ``list_repo_refs`` reads them)
* ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}`` (``?blobs=true`` adds ``size``, ``blobId``,
  ``lfs``): ``id``, ``sha`` (the resolved commit), ``siblings``, ``private``, ``gated``;
* ``HEAD``/``GET /{repo}/resolve/{rev}/{path}`` with ``Range`` (206 + ``Content-Range``, 416), ``ETag``,
  ``X-Repo-Commit``, ``X-Linked-Size``/``X-Linked-Etag`` for LFS files, ``Accept-Ranges: bytes``; optionally a 302
  to a "CDN" on another origin (``http://localhost:PORT/cdn/...``) for LFS files, as the Hub redirects to its storage;
* errors with the Hub's ``X-Error-Code`` header: ``RepoNotFound`` (401 without a token, 404 with one),
  ``GatedRepo`` (401 without a token, 403 with a token not granted), ``RevisionNotFound``, ``EntryNotFound``.

Test controls: per-request ``latency``, ``inject(path_regex, status|"timeout"|"reset", times, headers)``,
``echo_auth`` (put the Authorization header in error bodies, to prove qcheck never prints it), and a request
log with method, path, range, status, bytes sent and whether a token was sent. Files are ``bytes`` or
``VirtualFile(head, size)`` (a header followed by zeros up to ``size``, never held in memory).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit


@dataclass
class VirtualFile:
    """``head`` followed by zero bytes up to ``size``: a 5 GB shard costs only its header in memory."""

    head: bytes
    size: int

    def read(self, start: int, end: int) -> bytes:
        end = min(end, self.size)
        if start >= end:
            return b""
        part = self.head[start:end]
        return part + b"\0" * (end - start - len(part))

    def sha(self) -> str:
        return hashlib.sha256(self.head + self.size.to_bytes(8, "little")).hexdigest()


def _read(data: bytes | VirtualFile, start: int, end: int) -> bytes:
    return data.read(start, end) if isinstance(data, VirtualFile) else data[start:end]


def _size(data: bytes | VirtualFile) -> int:
    return data.size if isinstance(data, VirtualFile) else len(data)


def _sha256(data: bytes | VirtualFile) -> str:
    return data.sha() if isinstance(data, VirtualFile) else hashlib.sha256(data).hexdigest()


@dataclass
class Repo:
    repo_id: str
    commits: dict[str, dict[str, bytes | VirtualFile]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    gated: bool = False
    private: bool = False
    granted: set[str] = field(default_factory=set)  # tokens allowed past the gate / into the private repo


@dataclass
class LoggedRequest:
    method: str
    path: str
    query: str
    range: str | None
    status: int = 0
    sent: int = 0
    auth: bool = False


@dataclass
class Injection:
    pattern: re.Pattern[str]
    action: int | str
    times: int
    headers: dict[str, str]
    skip: int = 0  # matching requests let through first (answered normally)


def _is_lfs(name: str, data: bytes | VirtualFile) -> bool:
    return name.endswith((".safetensors", ".gguf", ".bin")) or _size(data) > 10_000_000


class FakeHub:
    """Start with ``with FakeHub() as hub:``; ``hub.endpoint`` is the value for ``HF_ENDPOINT``."""

    def __init__(self, *, latency: float = 0.0, redirect_lfs: bool = False, timeout_sleep: float = 2.0):
        self.repos: dict[str, Repo] = {}
        self.latency = latency
        self.redirect_lfs = redirect_lfs
        self.echo_auth = False
        self.ignore_range = False  # answer Range requests with 200 and the whole file, as a broken mirror would
        self.shift_ranges = 0  # serve ranges this many bytes late (a broken cache), with an honest Content-Range
        self.chunked = False  # send bodies with Transfer-Encoding: chunked instead of a Content-Length
        self.in_flight = 0
        self.max_in_flight = 0
        self.connections = 0  # TCP connections accepted: requests over fewer connections were kept alive
        self.timeout_sleep = timeout_sleep
        self.drip_interval = 0.2  # "drip": seconds between the single bytes of a dripped answer
        self.log: list[LoggedRequest] = []
        self.injections: list[Injection] = []
        self._lock = threading.Lock()
        self._commit_counter = 0
        handler = type("Handler", (_Handler,), {"hub": self})
        self.httpd = LoopbackServer(("127.0.0.1", 0), handler)
        self.port = self.httpd.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.cdn = f"http://localhost:{self.port}"
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> FakeHub:
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- content -------------------------------------------------------------------------------------
    def add_repo(self, repo_id: str, files: dict[str, bytes | VirtualFile], *, branch: str = "main",
                 gated: bool = False, private: bool = False, granted: set[str] | None = None) -> str:
        """Create (or push a new commit to) a repo; returns the commit sha ``branch`` now points to."""
        repo = self.repos.get(repo_id)
        if repo is None:
            repo = self.repos[repo_id] = Repo(repo_id, gated=gated, private=private, granted=set(granted or ()))
        with self._lock:
            self._commit_counter += 1
            sha = hashlib.sha1(f"{repo_id}:{self._commit_counter}".encode()).hexdigest()
        repo.commits[sha] = dict(files)
        repo.refs[branch] = sha
        return sha

    def inject(self, path_regex: str, action: int | str, *, times: int = 1, headers: dict[str, str] | None = None,
               skip: int = 0) -> None:
        """Answer the next ``times`` requests whose path matches with ``action``: an HTTP status, ``"timeout"``
        (sleep ``timeout_sleep`` then drop the connection), ``"reset"`` (drop it at once), ``"drip"`` (a 200 whose
        status line, headers and 1 MB body arrive one byte every ``drip_interval`` s: per-read timeouts never
        fire) or ``"drip-body"`` (headers at once, then the body one byte at a time). ``skip``: the first that many
        matching requests are answered normally (a repo's second listing fails while its first succeeds)."""
        with self._lock:
            self.injections.append(Injection(re.compile(path_regex), action, times, dict(headers or {}), skip))

    def requests(self, path_regex: str = "", method: str | None = None) -> list[LoggedRequest]:
        with self._lock:
            return [r for r in self.log if re.search(path_regex, r.path) and (method is None or r.method == method)]

    def bytes_sent(self, path_regex: str = "") -> int:
        return sum(r.sent for r in self.requests(path_regex))

    def clear_log(self) -> None:
        with self._lock:
            self.log.clear()

    # -- internals -----------------------------------------------------------------------------------
    def _take_injection(self, path: str) -> Injection | None:
        with self._lock:
            for inj in self.injections:
                if inj.times > 0 and inj.pattern.search(path):
                    if inj.skip > 0:
                        inj.skip -= 1
                        return None
                    inj.times -= 1
                    return inj
        return None


class LoopbackServer(ThreadingHTTPServer):
    """The tests' threaded HTTP server: a handler's exception is kept off stderr (tests read qcheck's stderr) but
    kept in ``errors``: a client that hangs up is normal, anything else is a fault of the fake server, which the
    fixtures report when the server stops."""

    daemon_threads = True
    request_queue_size = 512  # listen() backlog: the default 5 drops SYNs when 64 clients connect at once

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        self.errors: list[str] = []
        super().__init__(address, handler)

    def handle_error(self, request: object, client_address: object) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return
        self.errors.append("".join(traceback.format_exception(exc)))


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # keep test output quiet
        pass

    def setup(self) -> None:
        with self.hub._lock:
            self.hub.connections += 1
        super().setup()

    def do_GET(self) -> None:
        self._handle("GET")

    def do_HEAD(self) -> None:
        self._handle("HEAD")

    # -- dispatch ------------------------------------------------------------------------------------
    def _handle(self, method: str) -> None:
        hub = self.hub
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        entry = LoggedRequest(method, path, parts.query, self.headers.get("Range"),
                              auth=bool(self.headers.get("Authorization")))
        with hub._lock:
            hub.log.append(entry)
            hub.in_flight += 1
            hub.max_in_flight = max(hub.max_in_flight, hub.in_flight)
        try:
            self._dispatch(method, hub, entry, parts, path)
        finally:
            with hub._lock:
                hub.in_flight -= 1

    def _dispatch(self, method: str, hub: FakeHub, entry: LoggedRequest, parts, path: str) -> None:
        if hub.latency:
            time.sleep(hub.latency)
        inj = hub._take_injection(path)
        if inj is not None:
            if inj.action == "timeout":
                time.sleep(hub.timeout_sleep)
                self._drop()
                return
            if inj.action == "reset":
                self._drop()
                return
            if inj.action in ("drip", "drip-body"):
                self._drip(inj.action == "drip")
                return
            self._error(entry, int(inj.action), None, f"injected {inj.action}", extra=inj.headers)
            return
        if path.startswith("/api/models/"):
            self._api(entry, path[len("/api/models/"):], parse_qs(parts.query))
        elif path.startswith("/cdn/"):
            self._cdn(entry, method, path[len("/cdn/"):])
        elif "/resolve/" in path:
            self._resolve(entry, method, path)
        else:
            self._error(entry, 404, None, "no such endpoint")

    def _drip(self, head_too: bool) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\nContent-Type: application/json\r\n\r\n"
        self.close_connection = True
        try:
            if not head_too:
                self.wfile.write(head)
                self.wfile.flush()
            for byte in (head if head_too else b"") + b" " * 1_000_000:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(self.hub.drip_interval)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization") or ""
        return auth[7:].strip() if auth.lower().startswith("bearer ") else None

    def _send(self, entry: LoggedRequest, status: int, body: bytes, headers: dict[str, str], *,
              head: bool = False) -> None:
        entry.status = status
        self.send_response(status)
        chunked = self.hub.chunked and bool(body) and not head
        for k, v in headers.items():
            if not (chunked and k == "Content-Length"):
                self.send_header(k, v)
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
            body = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 4096]), body[i:i + 4096])
                            for i in range(0, len(body), 4096)) + b"0\r\n\r\n"
        elif "Content-Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            # record before writing: the client may read the log the moment its last byte arrives, before
            # this thread runs again (recording after the write made the log racy)
            entry.sent = len(body)
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                entry.sent = 0
                self.close_connection = True

    def _error(self, entry: LoggedRequest, status: int, code: str | None, message: str, *,
               extra: dict[str, str] | None = None) -> None:
        if self.hub.echo_auth:
            message += f" (you sent Authorization: {self.headers.get('Authorization')})"
        headers = {"Content-Type": "application/json", **(extra or {})}
        if code:
            headers["X-Error-Code"] = code
        headers["X-Error-Message"] = message.replace("\n", " ")
        self._send(entry, status, json.dumps({"error": message}).encode(), headers, head=self.command == "HEAD")

    def _repo_access(self, entry: LoggedRequest, repo_id: str, *, files: bool) -> Repo | None:
        """The repo if this request may see it (files=True: its file contents), else send the Hub's error."""
        repo = self.hub.repos.get(repo_id)
        token = self._token()
        if repo is None or (repo.private and token not in repo.granted):
            status = 404 if token else 401
            self._error(entry, status, "RepoNotFound", f"Repository Not Found for url: {self.path}.")
            return None
        if files and repo.gated and token not in repo.granted:
            status = 403 if token else 401
            self._error(entry, status, "GatedRepo",
                        f"Access to model {repo_id} is restricted and you are not in the authorized list. "
                        f"Visit https://huggingface.co/{repo_id} to ask for access.")
            return None
        return repo

    def _commit(self, entry: LoggedRequest, repo: Repo, rev: str) -> str | None:
        if rev in repo.commits:
            return rev
        if rev in repo.refs:
            return repo.refs[rev]
        self._error(entry, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return None

    # -- endpoints -----------------------------------------------------------------------------------
    def _api(self, entry: LoggedRequest, rest: str, query: dict[str, list[str]]) -> None:
        refs = re.match(r"^([^/]+/[^/]+?)/refs$", rest)
        if refs:  # the branches and tags, as the Hub's list_repo_refs endpoint answers
            repo = self._repo_access(entry, refs.group(1), files=False)
            if repo is not None:
                branches = [{"name": b, "ref": f"refs/heads/{b}", "targetCommit": sha}
                            for b, sha in sorted(repo.refs.items())]
                self._send(entry, 200, json.dumps({"branches": branches, "converts": [], "tags": []}).encode(),
                           {"Content-Type": "application/json"})
            return
        m = re.match(r"^([^/]+/[^/]+?)(?:/revision/(.+))?$", rest)
        if not m:
            self._error(entry, 404, None, "bad api path")
            return
        repo = self._repo_access(entry, m.group(1), files=False)
        if repo is None:
            return
        sha = self._commit(entry, repo, m.group(2) or "main")
        if sha is None:
            return
        blobs = query.get("blobs", ["false"])[0].lower() == "true"
        siblings = []
        for name, data in sorted(repo.commits[sha].items()):
            sib: dict[str, object] = {"rfilename": name}
            if blobs:
                sib["size"] = _size(data)
                sib["blobId"] = hashlib.sha1(name.encode() + sha.encode()).hexdigest()
                if _is_lfs(name, data):
                    sib["lfs"] = {"size": _size(data), "sha256": _sha256(data), "pointerSize": 134}
            siblings.append(sib)
        body = {"_id": "x", "id": repo.repo_id, "modelId": repo.repo_id, "sha": sha, "private": repo.private,
                "gated": "auto" if repo.gated else False, "disabled": False, "siblings": siblings,
                "tags": [], "downloads": 0, "likes": 0}
        self._send(entry, 200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _resolve(self, entry: LoggedRequest, method: str, path: str) -> None:
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if not m:
            self._error(entry, 404, None, "bad resolve path")
            return
        repo = self._repo_access(entry, m.group(1), files=True)
        if repo is None:
            return
        sha = self._commit(entry, repo, unquote(m.group(2)))
        if sha is None:
            return
        name = m.group(3)
        data = repo.commits[sha].get(name)
        if data is None:
            self._error(entry, 404, "EntryNotFound", f"{name} does not exist on \"{m.group(2)}\"")
            return
        headers = {"X-Repo-Commit": sha, "Accept-Ranges": "bytes"}
        if _is_lfs(name, data):
            digest = _sha256(data)
            headers.update({"X-Linked-Size": str(_size(data)), "X-Linked-Etag": f'"{digest}"', "ETag": f'"{digest}"'})
            if self.hub.redirect_lfs:
                location = f"{self.hub.cdn}/cdn/{repo.repo_id}/{sha}/{quote(name)}?sig=abc"
                headers["Location"] = location
                self._send(entry, 302, b"", headers, head=method == "HEAD")
                return
        else:
            headers["ETag"] = '"' + hashlib.sha1(_read(data, 0, _size(data)) if not isinstance(data, VirtualFile)
                                                 else data.head).hexdigest() + '"'
        self._serve(entry, method, data, headers)

    def _cdn(self, entry: LoggedRequest, method: str, rest: str) -> None:
        m = re.match(r"^([^/]+/[^/]+)/([0-9a-f]{40})/(.+)$", rest)
        repo = self.hub.repos.get(m.group(1)) if m else None
        data = repo.commits.get(m.group(2), {}).get(m.group(3)) if (repo and m) else None
        if data is None:
            self._error(entry, 403, None, "signature expired")
            return
        self._serve(entry, method, data, {"Accept-Ranges": "bytes", "ETag": f'"{_sha256(data)}"'})

    def _serve(self, entry: LoggedRequest, method: str, data: bytes | VirtualFile, headers: dict[str, str]) -> None:
        size = _size(data)
        rng = None if self.hub.ignore_range else self.headers.get("Range")
        head = method == "HEAD"
        if rng:
            m = re.match(r"^bytes=(\d+)-(\d*)$", rng.strip())
            if not m:
                self._send(entry, 416, b"", {**headers, "Content-Range": f"bytes */{size}"}, head=head)
                return
            start = int(m.group(1)) + self.hub.shift_ranges
            end = int(m.group(2)) + 1 + self.hub.shift_ranges if m.group(2) else size
            if start >= size:
                self._send(entry, 416, b"", {**headers, "Content-Range": f"bytes */{size}"}, head=head)
                return
            end = min(end, size)
            body = b"" if head else _read(data, start, end)
            self._send(entry, 206, body, {**headers, "Content-Range": f"bytes {start}-{end - 1}/{size}",
                                          "Content-Length": str(end - start)}, head=head)
            return
        if head:
            self._send(entry, 200, b"", {**headers, "Content-Length": str(size)}, head=True)
            return
        # a full GET: stream it so a big virtual file is never built in memory
        entry.status = 200
        self.send_response(200)
        for k, v in {**headers, "Content-Length": str(size)}.items():
            self.send_header(k, v)
        self.end_headers()
        pos = 0
        try:
            while pos < size:
                chunk = _read(data, pos, min(size, pos + (1 << 20)))
                entry.sent = pos + len(chunk)  # before the write, as in _send: the log is never behind the client
                self.wfile.write(chunk)
                pos += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            entry.sent = pos
            self.close_connection = True


# -- builders for test content --------------------------------------------------------------------------
_ST_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
             "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def safetensors_header(tensors: dict[str, tuple[str, list[int]]], metadata: dict[str, str] | None = None,
                       pad_to: int = 8) -> tuple[bytes, int]:
    """The header bytes (length prefix + JSON) of a safetensors file, and the file's full size."""
    obj: dict[str, object] = {}
    if metadata:
        obj["__metadata__"] = metadata
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = 1
        for d in shape:
            n *= d
        nbytes = n * _ST_BYTES[dtype]
        obj[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(obj, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % pad_to)
    head = len(raw).to_bytes(8, "little") + raw
    return head, len(head) + offset


def safetensors_file(tensors: dict[str, tuple[str, list[int]]], metadata: dict[str, str] | None = None,
                     *, virtual: bool = True) -> bytes | VirtualFile:
    """A whole safetensors file (zeros for data): virtual by default, so only the header is held."""
    head, size = safetensors_header(tensors, metadata)
    return VirtualFile(head, size) if virtual else head + b"\0" * (size - len(head))


def llama_tensors(layers: int, hidden: int = 64, inter: int = 128, vocab: int = 256, dtype: str = "BF16",
                  first_layer: int = 0) -> dict[str, tuple[str, list[int]]]:
    """Tensor names and shapes of a tiny Llama (per layer: q/k/v/o, gate/up/down, two norms)."""
    t: dict[str, tuple[str, list[int]]] = {}
    for i in range(first_layer, first_layer + layers):
        p = f"model.layers.{i}."
        for proj, shape in (("self_attn.q_proj", [hidden, hidden]), ("self_attn.k_proj", [hidden // 4, hidden]),
                            ("self_attn.v_proj", [hidden // 4, hidden]), ("self_attn.o_proj", [hidden, hidden]),
                            ("mlp.gate_proj", [inter, hidden]), ("mlp.up_proj", [inter, hidden]),
                            ("mlp.down_proj", [hidden, inter])):
            t[p + proj + ".weight"] = (dtype, shape)
        t[p + "input_layernorm.weight"] = (dtype, [hidden])
        t[p + "post_attention_layernorm.weight"] = (dtype, [hidden])
    return t


def gguf_bytes(path: str, *, arch: str = "llama", vocab: int = 64, n_tokens_pad: int = 0, layers: int = 2,
               file_type: int = 15, split: tuple[int, int] | None = None, first_layer: int = 0,
               split_tensors: int | None = None) -> bytes:
    """A small real GGUF file written with gguf-py's GGUFWriter (tensor data included, F32 and Q8_0 tensors).

    ``n_tokens_pad`` adds that many tokenizer tokens to grow the KV section, as a big vocab does.
    """
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter

    w = GGUFWriter(path, arch)
    w.add_block_count(layers)
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_feed_forward_length(128)
    w.add_head_count(8)
    w.add_head_count_kv(2)
    w.add_file_type(file_type)
    if split:
        w.add_uint16("split.no", split[0])
        w.add_uint16("split.count", split[1])
        w.add_int32("split.tensors.count", split_tensors if split_tensors is not None else 2 * layers)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"tok{i:06d}" for i in range(vocab + n_tokens_pad)])
    for i in range(first_layer, first_layer + layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(64, dtype=np.float32))
        q = np.zeros((64, 34 * 2), dtype=np.uint8)  # 64 rows of 64 Q8_0 values = 2 blocks of 34 bytes
        w.add_tensor(f"blk.{i}.attn_q.weight", q, raw_dtype=GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open(path, "rb") as f:
        return f.read()


# -- a ready-made model -----------------------------------------------------------------------------------
TOKEN = "hf_TestTokenAbcdefghijklmnop1234"

CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 6, "hidden_size": 64,
          "num_attention_heads": 4, "num_key_value_heads": 1, "intermediate_size": 128, "vocab_size": 256,
          "torch_dtype": "bfloat16", "max_position_embeddings": 2048}


def sharded_repo(shards: int = 3, *, hidden: int = 4096, inter: int = 14336) -> dict[str, object]:
    """A Llama-8B-shaped BF16 model (2 layers per shard, ~1.1 GB shards of header + zeros, never in memory)."""
    files: dict[str, object] = {"config.json": json.dumps(CONFIG).encode()}
    weight_map: dict[str, str] = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        tensors = llama_tensors(2, hidden=hidden, inter=inter, first_layer=2 * i)
        head, size = safetensors_header(tensors)
        files[name] = VirtualFile(head, size)
        weight_map.update({k: name for k in tensors})
    files["model.safetensors.index.json"] = json.dumps({"metadata": {}, "weight_map": weight_map}).encode()
    return files
