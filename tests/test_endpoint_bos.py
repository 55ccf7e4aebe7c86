"""``qcheck eval --endpoint`` against the real llama-cpp-python server for a model whose tokenizer adds no BOS
(as Qwen's does not) and for one that adds it. Without BOS the server's echo pairs each prompt token with the
logits *after* it; qcheck re-aligns the rows, and the numbers must equal llama.cpp's own, in process."""

from __future__ import annotations

import json
import urllib.request

import pytest

from support.eval_helpers import TASK_LINES, tiny_reference, tiny_reference_without_bos

pytestmark = pytest.mark.llamacpp


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("QCHECK_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("bos", [False, True])
def test_real_server_agrees_with_llama_cpp_in_process_with_and_without_bos(tmp_path, capsys, bos):
    from qcheck.cli import main
    from support.gguf_export import export_gguf
    from support.llamaserver import llama_server, server_available

    reason = server_available()
    if reason:
        pytest.skip(reason)
    ref = tiny_reference() if bos else tiny_reference_without_bos()
    from transformers import AutoTokenizer

    first = AutoTokenizer.from_pretrained(str(ref))("Hello").input_ids[0]
    assert (first == AutoTokenizer.from_pretrained(str(ref)).bos_token_id) is bos
    gguf = export_gguf(ref, tmp_path / "m.gguf", "F32")
    tasks = tmp_path / "text.jsonl"
    tasks.write_text("\n".join(json.dumps(t, ensure_ascii=False) for t in TASK_LINES if t["kind"] == "text") + "\n")
    with llama_server(gguf, alias="m") as url, pytest.raises(SystemExit) as exc:
        main(["eval", "-r", str(ref), "-t", str(tasks), "--bootstrap", "100", "-c", f"lc=llamacpp:{gguf}",
              "--endpoint", f"server={url}", "--endpoint-model", "m", "--endpoint-top-k", "1000", "--no-resume",
              "--json"])
    out = capsys.readouterr()
    assert exc.value.code == 0, out.err
    c = {x["name"]: x for x in json.loads(out.out)["candidates"]}
    lc, srv = c["lc"]["metrics"], c["server"]["metrics"]
    notes = " ".join(c["server"]["notes"])
    assert ("re-aligned the rows" in notes) is not bos
    # the whole vocabulary came back (top-k 1000 > vocabulary), so every value is comparable to llama.cpp's:
    # one position per text item is lost (the echo's first entry is null), the rest must agree
    assert lc["tokens_scored"] - srv["tokens_scored"] == 3
    assert abs(srv["ln_ppl_ratio"] - lc["ln_ppl_ratio"]) < 2e-3
    assert srv["kld_mean"] == pytest.approx(lc["kld_mean"] * lc["tokens_scored"] / srv["tokens_scored"], rel=0.05,
                                            abs=1e-5)
    assert srv["top1_agreement"] == pytest.approx(lc["top1_agreement"], abs=0.05)


def test_the_server_helper_moves_to_another_port_when_its_port_was_taken(tmp_path, monkeypatch):
    """free_port() closes its probe socket before the server binds: a port taken in between must cost a retry on
    another port, not a failed test (the race is rare; here the first port is held on purpose)."""
    import socket

    from support import llamaserver
    from support.gguf_export import export_gguf

    reason = llamaserver.server_available()
    if reason:
        pytest.skip(reason)
    gguf = export_gguf(tiny_reference(), tmp_path / "m.gguf", "F32")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        ports = iter([taken])
        real = llamaserver.free_port
        monkeypatch.setattr(llamaserver, "free_port", lambda: next(ports, None) or real())
        with llamaserver.llama_server(gguf, alias="m") as url:
            assert not url.endswith(f":{taken}")
            with urllib.request.urlopen(url + "/v1/models", timeout=30) as resp:
                assert json.loads(resp.read())["data"][0]["id"] == "m"
