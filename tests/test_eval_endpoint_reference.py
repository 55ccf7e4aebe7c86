"""``--reference URL``: the unquantised model served by an OpenAI-compatible endpoint is the reference.

The reference is a real llama-cpp-python server on 127.0.0.1 serving the F32 GGUF of the tiny reference (its tokenizer
with and without BOS), or the test's vLLM-style server (``support.engine_fake_server``: vLLM's ``prompt_logprobs`` wire
format over llama.cpp's real logits) for the full-vocabulary path. Candidates are local (simulated, llama.cpp in process)
and endpoints. Every number is checked against the same run with the local transformers reference.

Tolerances (stated): the served F32 GGUF computes in llama.cpp's kernels with its default F16 KV cache, the local
reference in transformers in float32: the two references' NLLs differ by ~2e-3 nats per token on these items. A candidate's mean KLD against the endpoint reference
equals its mean KLD against the local one within ``REL_KLD`` (relative) + ``ABS_KLD``, its ln PPL ratio within
``ABS_LN_PPL``; llama-cpp-python's echo omits the first position after BOS, so those positions are left out of
both sides and the means are over slightly different positions.
"""

from __future__ import annotations

import json
import shutil

import pytest

from support.eval_helpers import TASK_LINES, tiny_gguf, tiny_reference, tiny_reference_without_bos

pytestmark = pytest.mark.llamacpp
llama_cpp = pytest.importorskip("llama_cpp")

REL_KLD, ABS_KLD, ABS_LN_PPL = 0.05, 2e-4, 5e-3


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("QCHECK_CACHE_DIR", str(tmp_path / "cache"))


def _tasks(tmp_path, kinds=("text", "choice", "generate")):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(t, ensure_ascii=False) for t in TASK_LINES if t["kind"] in kinds) + "\n")
    return path


def _files_only(ref, tmp_path):
    """The reference's small files without its weights: what a user has beside a cluster-served model."""
    files = tmp_path / "ref-files"
    files.mkdir()
    for f in ref.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, files / f.name)
    return files


def _cli(argv, capsys):
    from qcheck.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def _metrics(stdout):
    data = json.loads(stdout)
    return data, {c["name"]: c["metrics"] for c in data["candidates"]}


def _close(remote, local, name, bound=False):
    """Within the stated tolerance; ``bound``: the remote KLD is a lower bound of the local one (the server could
    not name every token), so it is at most the local value and at least half of it."""
    r, lo = remote[name], local[name]
    if bound:
        assert 0.5 * lo["kld_mean"] <= r["kld_mean"] <= lo["kld_mean"] * (1 + REL_KLD) + ABS_KLD, name
    else:
        assert r["kld_mean"] == pytest.approx(lo["kld_mean"], rel=REL_KLD, abs=ABS_KLD), name
    assert abs(r["ln_ppl_ratio"] - lo["ln_ppl_ratio"]) < ABS_LN_PPL, name
    # near-ties may flip between the two references' kernels: one position either way
    assert r["top1_agreement"] == pytest.approx(lo["top1_agreement"], abs=max(0.05, 1.01 / lo["tokens_scored"])), name


@pytest.mark.parametrize("bos", [True, False])
def test_llama_cpp_python_server_as_reference_agrees_with_the_local_reference(tmp_path, capsys, bos):
    """The F32 GGUF served by llama-cpp-python as the reference; candidates: llama.cpp in process (Q8_0), simulated
    (the same Q8_0) and (with BOS) the Q8_0 served by a second server. Its echo keys top-k by strings, so some tokens cannot be
    named and the rows are a top-k approximation even at k = V; numbers agree with the local reference within the
    tolerance, the KLD as a lower bound (byte tokens have no string of their own and fall into the rest bucket).
    Choice and generate items: their scored positions are all returned by the echo (it drops the first
    position after BOS of a text item, tests/test_endpoint_bos.py), so both runs score the same positions."""
    import contextlib

    from support.gguf_export import export_gguf
    from support.llamaserver import llama_server, server_available

    if reason := server_available():
        pytest.skip(reason)
    ref = tiny_reference() if bos else tiny_reference_without_bos()
    f32 = export_gguf(ref, tmp_path / "f32.gguf", "F32")
    q8 = export_gguf(ref, tmp_path / "q8.gguf", "Q8_0")
    tasks = _tasks(tmp_path, kinds=("choice", "generate"))
    files = _files_only(ref, tmp_path)
    names = ("lc", "sim", "srv") if bos else ("lc", "sim")
    common = ["-t", str(tasks), "--bootstrap", "100", "--no-cache", "--json", "-c", f"lc=llamacpp:{q8}",
              "-c", f"sim={q8}", "--endpoint-top-k", "1000", "--no-resume"]
    with llama_server(f32, alias="ref") as ref_url, \
            (llama_server(q8, alias="q8") if bos else contextlib.nullcontext(None)) as cand_url:
        if cand_url:
            common += ["--endpoint", f"srv={cand_url}"]
        code, out, err = _cli(["eval", "-r", f"{ref_url}#model=ref", "--reference-files", str(files), *common],
                              capsys)
        assert code == 0, err
        code, local_out, err = _cli(["eval", "-r", str(ref), *common], capsys)
        assert code == 0, err
    data, remote = _metrics(out)
    _, local = _metrics(local_out)
    endpoint = data["reference"]["endpoint"]
    assert (endpoint["flavour"], endpoint["model"], endpoint["mode"]) == ("llama-cpp-python", "ref", "echo")
    assert endpoint["logprobs"] == "top-k" and data["cache"]["kind"] == "topk"
    assert data["reference"]["path"] == ref_url and data["reference"]["files"] == str(files)
    assert any("approximation" in n for n in data["notes"])
    for name in names:
        assert remote[name]["kld_kind"] == "lower-bound"
        assert remote[name]["tokens_scored"] == local[name]["tokens_scored"] > 0
        # lc and sim are exact against the local reference; the endpoint candidate is top-k in both runs
        _close(remote, local, name, bound=name != "srv")
        # choice items are judged the same way against either reference; generate items too, except that this
        # server returns generations as text, and the tiny model's partial UTF-8 byte tokens are lost (said in a note)
        for key in ("choice_acc_reference", "choice_acc", "choice_acc_norm_reference"):
            assert remote[name][key] == local[name][key], key
        assert remote[name]["generate_items"] == local[name]["generate_items"] == 2
    assert any("reference generation(s) came back as text" in n for n in data["notes"])


def test_vllm_full_vocabulary_reference_is_exact_and_top_k_is_labelled(tmp_path, capsys, monkeypatch):
    """A vLLM-style server that serves k = V prompt log-probs gives a full-vocabulary reference (exact KLD, full-u16
    cache); one capped at 20 (vLLM's default --max-logprobs) is refused the full request and falls back to top-20,
    labelled as an approximation in the text, JSON and HTML. Full rows whose JSON would exceed the response limit are
    never asked for: top_k=full is refused naming the size, the default falls back to top-20."""
    from transformers import AutoTokenizer

    from support.engine_fake_server import Behaviour, FakeEngine, FakeServer

    ref = tiny_reference()
    engine = FakeEngine(str(tiny_gguf("F32")), AutoTokenizer.from_pretrained(str(ref)))
    tasks = _tasks(tmp_path, kinds=("text", "choice"))
    files = _files_only(ref, tmp_path)
    common = ["-t", str(tasks), "--bootstrap", "100", "--no-cache", "-c", f"lc=llamacpp:{tiny_gguf('Q8_0')}",
              "-c", f"sim={tiny_gguf('Q4_0')}"]
    try:
        with FakeServer(engine, Behaviour(style="vllm", model="ref")) as srv:
            code, out, err = _cli(["eval", "-r", srv.url, "--reference-files", str(files), *common, "--json"], capsys)
            assert code == 0, err
            assert all(e["prompt_logprobs"] == 512 for e in srv.bodies if "prompt_logprobs" in e)
        with FakeServer(engine, Behaviour(style="vllm", model="ref", max_logprobs=20)) as srv:
            html = tmp_path / "r.html"
            code, capped, err = _cli(["eval", "-r", srv.url, "--reference-files", str(files), *common, "--json",
                                      "--report", str(html)], capsys)
            assert code == 0, err
            code, text, err = _cli(["eval", "-r", srv.url, "--reference-files", str(files), *common], capsys)
            assert code == 0, err
        with FakeServer(engine, Behaviour(style="vllm", model="ref")) as srv:
            monkeypatch.setattr("qcheck.eval.runners.http.MAX_RESPONSE_BYTES", 256 * 1024)
            code, _, err = _cli(["eval", "-r", srv.url + "#top_k=full", "--reference-files", str(files), *common],
                                capsys)
            assert code == 2 and "MB of JSON per request, over the 0.25 MB response limit" in err, err
            code, bounded, err = _cli(["eval", "-r", srv.url, "--reference-files", str(files), *common, "--json"],
                                      capsys)
            assert code == 0, err
            assert not any(e.get("prompt_logprobs", 0) > 20 for e in srv.bodies[-4:])
    finally:
        engine.close()
    code, local_out, err = _cli(["eval", "-r", str(ref), *common, "--json"], capsys)
    assert code == 0, err
    data, full = _metrics(out)
    _, local = _metrics(local_out)
    assert data["cache"]["kind"] == "full-u16" and data["reference"]["endpoint"]["logprobs"] == "full"
    for name in ("lc", "sim"):
        assert full[name]["kld_kind"] == "exact"
        # nothing is lost from a vLLM answer: the same positions as the local reference
        assert full[name]["tokens_scored"] == local[name]["tokens_scored"]
        _close(full, local, name)
        assert full[name]["accuracy_reference"] == local[name]["accuracy_reference"]
    data, top = _metrics(capped)
    assert data["cache"]["kind"] == "topk" and data["reference"]["endpoint"] == {
        **data["reference"]["endpoint"], "logprobs": "top-k", "top_k": 20}
    assert any("refused full-vocabulary" in n and "greater than max allowed" in n for n in data["notes"])
    for name in ("lc", "sim"):
        assert top[name]["kld_kind"] == "lower-bound"
        # a lower bound: never above the exact value (float slack), and close to it at k = 20 on a tiny model
        assert top[name]["kld_mean"] <= full[name]["kld_mean"] * 1.001 + 1e-7
        assert top[name]["kld_mean"] >= 0.5 * full[name]["kld_mean"]
        assert top[name]["ln_ppl_ratio"] == pytest.approx(full[name]["ln_ppl_ratio"], abs=1e-4)
    assert "top-20 approximation: KLD is a lower bound" in text.splitlines()[0]
    data, _ = _metrics(bounded)
    assert data["cache"]["kind"] == "topk" and any("over the 0.25 MB response limit" in n for n in data["notes"])
    assert "top-20 approximation</strong>" in html.read_text()


def test_full_rows_asked_for_but_capped_quietly_are_kept_at_the_width_that_came(tmp_path, capsys):
    """A server that accepts prompt_logprobs = V but answers 20 (a quiet cap): the reference falls back to top-k at
    the width it got, not V (a V-wide top-k cache costs 8 bytes x V per position)."""
    from transformers import AutoTokenizer

    from support.engine_fake_server import Behaviour, FakeEngine, FakeServer

    ref = tiny_reference()
    engine = FakeEngine(str(tiny_gguf("F32")), AutoTokenizer.from_pretrained(str(ref)))
    tasks = _tasks(tmp_path, kinds=("text",))
    files = _files_only(ref, tmp_path)
    cache = tmp_path / "cache"
    try:
        with FakeServer(engine, Behaviour(style="vllm", model="ref", quiet_cap=20)) as srv:
            code, out, err = _cli(["eval", "-r", srv.url, "--reference-files", str(files), "-t", str(tasks),
                                   "--bootstrap", "100", "--cache-dir", str(cache), "-c", f"sim={tiny_gguf('Q4_0')}",
                                   "--json"], capsys)
            assert code == 0, err
    finally:
        engine.close()
    data = json.loads(out)
    assert data["cache"]["kind"] == "topk"
    metas = [json.loads(m.read_text()) for m in cache.rglob("*.json")]
    widths = {m.get("topk") for m in metas if m.get("kind") == "topk"}
    assert widths and max(w for w in widths if w) <= 21, metas


def test_endpoint_reference_bad_usage_is_one_line_exit_2(tmp_path, capsys):
    """No --reference-files, --noise-floor, top_k=full beyond the response bound, an unreachable server: exit 2."""
    files = _files_only(tiny_reference(), tmp_path)
    cases = [
        (["-r", "http://127.0.0.1:9"], "needs --reference-files"),
        (["-r", "http://127.0.0.1:9", "--reference-files", str(files), "--noise-floor"], "needs a local reference"),
        (["-r", str(tiny_reference()), "--reference-files", str(files)], "is for an endpoint --reference"),
        (["-r", "http://127.0.0.1:9#top_k=zero", "--reference-files", str(files)], "use a number, 'full' or 'auto'"),
        (["-r", "http://127.0.0.1:9", "--reference-files", str(files)], "127.0.0.1:9"),
    ]
    for argv, message in cases:
        code, out, err = _cli(["eval", *argv, "-c", str(tiny_gguf("Q8_0")), "-t", "prose", "--max-items", "1",
                               "--no-cache", "--retries", "0"], capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("qcheck: error:") and message in lines[0], err
        assert out == ""
