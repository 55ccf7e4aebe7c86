"""A real llama-cpp-python OpenAI-compatible server on 127.0.0.1, started and stopped around a test.

Why a subprocess: the server is a uvicorn app with its own event loop and global model; running it as
``python -m llama_cpp.server`` is exactly what users deploy, so the endpoint runner is tested against the
real thing (echo + logprobs through llama.cpp's kernels, /extras/tokenize, /v1/models), not a mock.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO


def free_port() -> int:
    """A TCP port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_available() -> str | None:
    """None when llama-cpp-python and its server extras import; otherwise the reason to skip."""
    try:
        import fastapi  # noqa: F401
        import llama_cpp  # noqa: F401
        import sse_starlette  # noqa: F401
        import starlette_context  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        return f"llama-cpp-python[server] is not installed ({exc.name})"
    return None


#: ``python -m llama_cpp.server`` with llama.cpp's extra CPU buffer types off (its ``--no-repack``): on virtual
#: machines that advertise AMX without enabling it, repacked Q4_0/Q8_0 weights kill the server with SIGILL (seen
#: on this project's CI machines). qcheck's in-process llama.cpp runner does the same (``runners/llamacpp.py``).
_SERVER_WITHOUT_REPACKING = """
import runpy, sys
from qcheck.eval.runners.llamacpp import without_weight_repacking
sys.argv[0] = "llama_cpp.server"
with without_weight_repacking():
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)
"""


def _started(proc: subprocess.Popen[bytes], base: str, api_key: str | None, log: str, timeout: float, *,
             last: bool) -> bool:
    """Wait until the server answers ``/v1/models``. False when it could not bind its port (another process took
    it first) and this is not the ``last`` attempt; any other failure raises with the end of its log."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            text = Path(log).read_text(errors="replace")
            if not last and "address already in use" in text.lower():
                return False
            raise RuntimeError(f"llama_cpp.server exited with {proc.returncode}: {text[-2000:]}")
        try:
            req = urllib.request.Request(base + "/v1/models")
            if api_key:
                req.add_header("Authorization", f"Bearer {api_key}")
            with urllib.request.urlopen(req, timeout=2) as resp:
                if resp.status == 200 and json.loads(resp.read()).get("data") is not None:
                    return True
        except (urllib.error.URLError, OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("llama_cpp.server did not start in time")
        time.sleep(0.2)


@contextlib.contextmanager
def llama_server(model: str | Path, *, alias: str = "tiny", n_ctx: int = 512, api_key: str | None = None,
                 startup_timeout: float = 120.0) -> Iterator[str]:
    """Run ``python -m llama_cpp.server`` for ``model`` on a free port; yields the base URL (``http://...``).

    The process is killed (its whole process group) when the block exits, whatever happened inside.
    """
    proc: subprocess.Popen[bytes] | None = None
    log = None
    try:
        for attempt in range(3):  # the free port may be taken between free_port() and the server's bind: retry
            port = free_port()
            cmd = [sys.executable, "-c", _SERVER_WITHOUT_REPACKING, "--model", str(model), "--model_alias", alias,
                   "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--logits_all", "True",
                   "--n_threads", "2", "--n_threads_batch", "2", "--verbose", "False", "--use_mlock", "False",
                   # flash attention on, as qcheck's in-process llama.cpp backend runs (llama.cpp's own default)
                   "--flash_attn", "True"]
            if api_key:
                cmd += ["--api_key", api_key]
            log = tempfile.NamedTemporaryFile(prefix="llama-server-", suffix=".log", delete=False)  # noqa: SIM115
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
            base = f"http://127.0.0.1:{port}"
            if _started(proc, base, api_key, log.name, startup_timeout, last=attempt == 2):
                break
            _stop(proc, log)
        yield base
    finally:
        if proc is not None and log is not None:
            _stop(proc, log)


def _stop(proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    """Kill the server's whole process group (if it still runs) and remove its log; safe to call twice."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)
    log.close()
    with contextlib.suppress(OSError):
        os.unlink(log.name)
