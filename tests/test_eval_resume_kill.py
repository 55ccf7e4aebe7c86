"""Nothing is lost when an eval run is killed (issue #27): ``python -m qcheck eval --endpoint`` is killed with
SIGKILL at several points of a real run against the fake vLLM server, its resume file is torn the way a kill in
the middle of a write leaves it, and the resumed run sends only the missing requests and reports exactly what an
uninterrupted run reports. The kill point is made deterministic by the server, which holds the request after
the k-th one until the test has killed the client: no timing decides anything."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from qcheck.eval.runners.http import ResumeState
from support.eval_helpers import task_file, tiny_gguf, tiny_reference

llama_cpp = pytest.importorskip("llama_cpp")
pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]


def test_a_torn_last_line_loses_only_itself(tmp_path):
    path = tmp_path / "s.jsonl"
    st = ResumeState(path)
    first, second, third = (ResumeState.record_id("score", k, (1, 2, 3)) for k in "abc")
    st.put(first, {"t": [1.0]})
    with open(path, "a") as fh:
        fh.write('{"id": "broken", "val')  # killed mid-write
    again = ResumeState(path)
    assert again.get(first) == {"t": [1.0]} and len(again) == 1
    again.put(second, {"t": [2.0]})  # the next record is not glued to the torn line
    st3 = ResumeState(path)
    assert (st3.get(first), st3.get(second), len(st3)) == ({"t": [1.0]}, {"t": [2.0]}, 2)
    assert path.read_text().splitlines() == [json.dumps({"id": r, "value": v}, separators=(",", ":"))
                                             for r, v in ((first, {"t": [1.0]}), (second, {"t": [2.0]}))]
    # killed after the record but before its newline: the record is whole and kept, the next starts a new line
    with open(path, "a") as fh:
        fh.write(json.dumps({"id": third, "value": 3}, separators=(",", ":")))
    st4 = ResumeState(path)
    st4.put("later", 4)
    assert ResumeState(path).get(third) == 3 and ResumeState(path).get("later") == 4 and len(ResumeState(path)) == 4


def test_a_state_file_that_is_not_records_is_read_as_empty_not_a_crash(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"[" * 100_000 + b"\n" + b"\xff\xfe not json\n" + b'{"id": 5}\n' + b"[1, 2]")
    st = ResumeState(path)
    assert len(st) == 0
    st.put("a", 1)
    assert ResumeState(path).get("a") == 1


@pytest.fixture(scope="module")
def engine():
    from transformers import AutoTokenizer

    from support.engine_fake_server import FakeEngine

    eng = FakeEngine(str(tiny_gguf("Q8_0")), AutoTokenizer.from_pretrained(str(tiny_reference())))
    yield eng
    eng.close()


def _eval(url: str, cache: Path, *extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "QCHECK_"))}
    env.update({"QCHECK_CACHE_DIR": str(cache), "QCHECK_CACHE_KEY_FILE": os.environ["QCHECK_CACHE_KEY_FILE"],
                "HF_HUB_OFFLINE": "1"})
    cmd = [sys.executable, "-m", "qcheck", "eval", "-r", str(tiny_reference()), "-t", str(task_file()),
           "--cache-dir", str(cache), "--bootstrap", "200", "--endpoint", f"e={url}", "--concurrency", "1",
           "--retries", "0", "--request-timeout", "600", "--json", *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _run_id(stderr: str) -> str:
    """The run id ``qcheck eval`` printed when it started (``--resume`` takes it)."""
    match = re.search(r"endpoint results are kept as run (\S+);", stderr)
    assert match, stderr
    return match.group(1)


def _state_lines(cache: Path, run_id: str) -> list[str]:
    """The run's resume records: the server's identity first, then one line per finished request."""
    files = list((cache / "eval" / "endpoints" / run_id).glob("endpoint-*.jsonl"))
    return files[0].read_bytes().decode().splitlines(keepends=True) if files else []


def _wait_for(condition, what: str) -> None:
    """Poll until ``condition()``; a generous bound only keeps a broken run from hanging the suite."""
    for _ in range(6000):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"never saw {what}")


@pytest.fixture(scope="module")
def uninterrupted(engine, tmp_path_factory):
    """One fake vLLM server for the module, and the uninterrupted run against it: its JSON, its resume records,
    and how many completion requests were capability probes."""
    from support.engine_fake_server import FakeServer

    root = tmp_path_factory.mktemp("resume-kill")
    with FakeServer(engine) as fake:
        whole = _eval(fake.url, root / "cache")
        out, err = whole.communicate(timeout=500)
        assert whole.returncode == 0, err
        records = _state_lines(root / "cache", _run_id(err))
        assert len(records) > 8 and all(r.endswith("\n") for r in records)
        assert json.loads(records[0])["id"] == "qcheck-server-identity"
        probes = fake.counts["POST /v1/completions"] - (len(records) - 1)
        yield fake, root, json.loads(out)["candidates"][0], records, probes


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("killed_after", "torn"), [(0, True), (3, False), (7, True)])
def test_an_eval_killed_at_any_point_resumes_to_the_uninterrupted_result(uninterrupted, tmp_path, killed_after, torn):
    fake, root, expected, records, probes = uninterrupted
    # the run to kill: the server holds the request after the k-th scored one until the client is gone
    fake.counts.clear()
    fake.served = 0
    fake.behaviour.fail_skip, fake.behaviour.hang_count, fake.behaviour.hang_seconds = probes + killed_after, 1, 30.0
    cache = root / "cache"
    run = _eval(fake.url, cache)
    _wait_for(lambda: fake.behaviour.hang_count == 0, "the held request")
    os.kill(run.pid, signal.SIGKILL)
    _, err = run.communicate(timeout=60)
    assert run.returncode == -signal.SIGKILL
    run_id = _run_id(err)  # printed when the run started
    # every finished request was on disk, whole, at the kill (after the server's identity)
    assert _state_lines(cache, run_id) == records[:1 + killed_after]
    if torn:  # as a kill in the middle of writing the next record leaves the file
        [state_file] = (cache / "eval" / "endpoints" / run_id).glob("endpoint-*.jsonl")
        with open(state_file, "a", encoding="utf-8") as fh:
            fh.write(records[1 + killed_after][: len(records[1 + killed_after]) // 2])

    fake.counts.clear()
    resumed = _eval(fake.url, cache, "--resume", run_id)
    out, err = resumed.communicate(timeout=500)
    assert resumed.returncode == 0, err
    got = json.loads(out)["candidates"][0]
    assert fake.counts["POST /v1/completions"] == probes + len(records) - 1 - killed_after  # only what was missing
    # no record lost, none glued to another, none torn
    assert sorted(_state_lines(cache, run_id)) == sorted(records)
    assert got["metrics"] == expected["metrics"]
    assert got["intervals"] == expected["intervals"]
    if killed_after:
        assert any(f"resumed: {killed_after} request(s)" in n for n in got["notes"])
