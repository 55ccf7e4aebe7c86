"""``qcheck eval --endpoint`` against hostile servers, through the real CLI (``python -m qcheck eval``): a malformed
answer, a dripping one and a wait longer than qcheck makes each end the run with one line and exit 2, never an
internal error (issue #27; the client itself meets every hostile answer in test_hostile_servers.py). Needs the
eval extra (the tiny reference model is built with transformers)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from support.eval_helpers import task_file, tiny_reference
from support.rawserver import RawServer, drip, response

pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

KEY = "sk-hostile-test-key-0123456789"


def _eval(url: str, tmp_path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "QCHECK_"))}
    env.update({"QCHECK_CACHE_DIR": str(tmp_path / "cache"), "QCHECK_TEST_KEY": KEY, "HF_HUB_OFFLINE": "1"})
    cmd = [sys.executable, "-m", "qcheck", "eval", "-r", str(tiny_reference()), "-t", str(task_file()),
           "--max-items", "2", "--endpoint", f"e={url}", "--api-key-env", "QCHECK_TEST_KEY", "--no-resume", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=230)


@pytest.mark.parametrize(("handler", "extra", "expect"), [
    pytest.param(lambda request, send: send(b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\n{}"), ["--retries", "0"],
                 r"sent a malformed answer", id="content-length-superscript-two"),
    pytest.param(drip(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", 0.2),
                 ["--retries", "1", "--request-timeout", "1"],
                 r"no complete answer within the 1 s limit of one attempt \(2 attempts\)", id="drip-status-line"),
    pytest.param(lambda request, send: send(
        response(body=b'{"data": [{"id": "m"}]}') if request.path == "/v1/models" else
        response("429 Too Many Requests", body=b'{"error": {"message": "slow down"}}', headers=[("Retry-After", "3600")])),
                 ["--retries", "5"], r"HTTP 429 \(the server asks to retry after 3600 s", id="retry-after-an-hour"),
])
@pytest.mark.timeout(300)
def test_a_hostile_endpoint_ends_the_eval_in_one_line(handler, extra, expect, tmp_path):
    with RawServer(handler) as server:
        proc = _eval(server.url, tmp_path, *extra)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and not ln.startswith("  ")]
    assert proc.returncode == 2, proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr and KEY not in proc.stderr
    errors = [ln for ln in lines if ln.startswith("qcheck: error: ")]
    assert len(errors) == 1 and re.search(expect, errors[0]), proc.stderr
