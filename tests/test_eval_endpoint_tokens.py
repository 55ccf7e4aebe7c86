"""Servers that tokenise text prompts their own way: the request is re-expressed in the server's token ids, the
reference is scored on exactly those ids, only what cannot be paired is left out, and the coverage is reported.

The servers are real llama.cpp: llama-cpp-python's HTTP server (and the test's vLLM-style server over llama.cpp's
logits and tokenizer) serving a GGUF of the tiny reference written *without* ``tokenizer.ggml.pre``, as GGUFs
converted before llama.cpp had the key are. llama.cpp then splits text with its ``default`` pre-tokenizer, which
cuts punctuation runs apart (``" ="`` becomes ``" "``, ``"="``), so whitespace runs, tabs and code tokenise
differently from the Hugging Face tokenizer: the case that made ``qcheck eval`` refuse the whole run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from qcheck.eval.runners.base import ScoreRequest
from qcheck.eval.runners.endpoint.align import boundary, realign, text_prompt
from support.eval_helpers import TASK_LINES, tiny_reference, workdir

llama_cpp = pytest.importorskip("llama_cpp")
pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

#: text with whitespace runs, tabs, code and JSON, where llama.cpp's default pre-tokenizer splits differently
WS_LINES = [
    {"id": "ws-code", "kind": "text",
     "text": "x  =  1\n\tif a:\n\t\treturn   b  # c\nwhile (x  <  10) {\n    x += 2;   // step\n}"},
    {"id": "ws-json", "kind": "text", "text": '{"name": "qcheck",   "bits": 4,\t"ok": true}  ;  [1,  2,   3]'},
    {"id": "ws-py", "kind": "text", "text": "def f(a,  b):\n\treturn a  +  b   # sum\n\n\nprint(f(1,\t2))"},
    {"id": "c-code", "kind": "choice", "task": "code", "context": "def add(a, b):\n    return a",
     "choices": [" + b", " - b", " * b"], "answer": 0},
    {"id": "c-eq", "kind": "choice", "task": "code", "context": "x  =  1\ny  =", "choices": [" x  +  1", " 2"],
     "answer": 0},
]


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("QCHECK_CACHE_DIR", str(tmp_path / "qcache"))


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_reference()))


@pytest.fixture(scope="module")
def default_pre_gguf() -> Path:
    """The tiny reference's Q8_0 GGUF without ``tokenizer.ggml.pre``: llama.cpp tokenises with ``default``."""
    from support.gguf_export import export_gguf

    return export_gguf(tiny_reference(), workdir() / "tiny-Q8_0-default-pre.gguf", "Q8_0", pre=None)


@pytest.fixture(scope="module")
def llama_tokenize(default_pre_gguf):
    model = llama_cpp.Llama(model_path=str(default_pre_gguf), vocab_only=True, verbose=False)
    yield lambda text: list(model.tokenize(text.encode(), add_bos=True, special=True))
    model.close()


@pytest.fixture(scope="module")
def tasks() -> Path:
    path = workdir() / "tokens.jsonl"
    path.write_text("\n".join(json.dumps(t) for t in [*TASK_LINES, *WS_LINES]) + "\n")
    return path


# ---------------------------------------------------------------------------------------- the alignment itself
def test_the_default_pre_tokenizer_really_splits_differently(tok, llama_tokenize):
    text = WS_LINES[0]["text"]
    hf, server = tok(text)["input_ids"], llama_tokenize(text)
    assert hf != server and tok.decode(hf) == tok.decode(server)  # the same text, other tokens
    assert [tok.decode([t]) for t in hf[2:5]] == [" ", " ", "="] or hf[:5] != server[:5]


def test_a_choice_is_rescored_on_the_servers_ids_with_the_continuation_found_again(tok, llama_tokenize):
    context, continuation = "def add(a, b):\n    return a", " + b"
    ids = tok(context + continuation)["input_ids"]
    start = len(tok(context)["input_ids"])
    req = ScoreRequest("c#0", tuple(ids), start)
    prompt = text_prompt(ids, start, tok, tok.bos_token_id, True)
    assert (prompt.text, prompt.prefix) == (context + continuation, context)
    server = llama_tokenize(prompt.text)
    assert server != ids  # " +" is one token for the reference tokenizer, " ", "+" for llama.cpp's default
    scored = realign(req, prompt, server, tok, tok.bos_token_id, len(tok))
    assert isinstance(scored, ScoreRequest) and scored.key.startswith("c#0~")
    assert list(scored.input_ids) == server and tok.decode(server[scored.start:]) == continuation
    assert tok.decode(server[1:scored.start]) == context
    assert realign(req, prompt, ids, tok, tok.bos_token_id, len(tok)) is req  # the same ids: the request itself


def test_what_cannot_be_realigned_says_why(tok):
    ids = tok("ab cd ef")["input_ids"]
    req = ScoreRequest("k", tuple(ids), len(ids) - 1)
    prompt = text_prompt(ids, req.start, tok, tok.bos_token_id, True)
    outside = realign(req, prompt, [ids[0], len(tok) + 5], tok, tok.bos_token_id, len(tok))
    assert outside == f"the server's tokenisation holds token id {len(tok) + 5}, outside the reference's " \
                      f"{len(tok)}-token vocabulary"
    only_prefix = [ids[0], *tok(prompt.prefix, add_special_tokens=False)["input_ids"]]  # nothing after the context
    assert realign(req, prompt, only_prefix, tok, tok.bos_token_id, len(tok)) == \
        "the server's tokens leave nothing to score"


def test_a_token_that_spans_context_and_continuation_is_left_out(tok):
    """The request scores "n" after the context "an a": the server's tokens spell "an" as one token, so its context
    ends inside a token and no start can be found."""
    one = {tok.decode([t]): t for t in range(len(tok)) if len(tok.decode([t])) == 1}
    a, n, an = one["a"], one["n"], tok(" an", add_special_tokens=False)["input_ids"]
    assert len(an) == 1 and tok.decode(an) == " an"
    ids = (tok.bos_token_id, an[0], one[" "], a, n)  # " an a" | "n"
    req = ScoreRequest("k", ids, 4)
    prompt = text_prompt(ids, 4, tok, tok.bos_token_id, True)
    assert (prompt.text, prompt.prefix) == (" an an", " an a")
    why = realign(req, prompt, [tok.bos_token_id, an[0], an[0]], tok, tok.bos_token_id, len(tok))
    assert isinstance(why, str) and why.startswith("the server's tokens straddle the boundary")


def test_partial_utf8_characters_do_not_confuse_the_boundary(tok):
    context = "Größe: 敏捷"
    ids = tok(context + " fox")["input_ids"]
    start = len(tok(context)["input_ids"])
    prompt = text_prompt(ids, start, tok, tok.bos_token_id, True)
    assert boundary(tok, ids[1:], prompt.prefix) == start - 1


def test_an_echo_that_generated_several_tokens_is_read_at_the_right_offset(tok):
    """llama-cpp-python keeps generating past max_tokens 1 until the text ends on a whole UTF-8 character (5 tokens
    seen): the prompt's echoed entries are the ones before those, not all but one (rows were shifted before)."""
    from types import SimpleNamespace

    from qcheck.eval.runners.base import VocabInfo
    from qcheck.eval.runners.endpoint import echo
    from qcheck.eval.runners.endpoint.wire import TokenStrings

    ids = tuple(tok("Le renard brun")["input_ids"])
    strings = TokenStrings(tok, len(tok))
    assert all(strings.resolve(strings.strings[i]) == i for i in ids[1:])  # every echoed string names one id
    ctx = SimpleNamespace(name="m", reference=VocabInfo(len(tok), tok.bos_token_id, True), strings=lambda: strings,
                          string_mismatches=0, shifted_echo=False, top_k=5)
    echoed = [strings.strings[i] for i in ids[1:]] + ["", "", "x"]
    lps = [None, *[-float(i) for i in range(1, len(ids) - 1)], -7.0, -8.0, -9.0]
    data = {"choices": [{"logprobs": {"tokens": echoed, "token_logprobs": lps,
                                      "top_logprobs": [None] + [{}] * (len(lps) - 1)}}],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": 3}}
    rows = echo.parse(ctx, data, ScoreRequest("k", ids, 1))
    assert [r.target for r in rows][1:] == [-float(i) for i in range(1, len(ids) - 1)]
    assert echo.prompt_ids(ctx, data) == list(ids)


# ---------------------------------------------------------------------------------------- real servers
def _cli(argv, capsys):
    from qcheck.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_real_llama_cpp_python_server_that_tokenises_its_own_way(default_pre_gguf, tasks, tmp_path, capsys,
                                                                 llama_tokenize):
    """The quality bar: a result with coverage, and the server's top-k lower bound below the exact KLD of llama.cpp
    in process on the same GGUF; the reference rows for the server's ids are the reference model's own."""
    from support.llamaserver import llama_server, server_available

    reason = server_available()
    if reason:
        pytest.skip(reason)
    cache, report = tmp_path / "cache", tmp_path / "r.html"
    argv = ["eval", "-r", str(tiny_reference()), "-t", str(tasks), "--cache-dir", str(cache), "--bootstrap", "200",
            "-c", f"lc=llamacpp:{default_pre_gguf}", "--min-coverage", "0.9"]
    with llama_server(default_pre_gguf, alias="tiny") as url:
        server = ["--endpoint", f"srv={url}", "--endpoint-model", "tiny", "--no-resume"]
        code, out, err = _cli([*argv, *server, "--json", "--report", str(report)], capsys)
        assert code == 0, err
        entries = sorted(p.name for p in (cache / "eval").iterdir())
        again, text, _ = _cli([*argv, *server], capsys)  # the same run again: every row from the cache
    data = json.loads(out)
    c = {x["name"]: x for x in data["candidates"]}
    lc, srv = c["lc"], c["srv"]
    cov = srv["coverage"]
    assert cov["items"] == cov["items_total"] == len(TASK_LINES) + len(WS_LINES) and cov["excluded"] == []
    assert cov["retokenised_requests"] >= len(WS_LINES)  # at least every whitespace/code item
    # llama-cpp-python nulls the first echoed token of each text item: those positions, and only those, are missing
    n_text = sum(1 for t in [*TASK_LINES, *WS_LINES] if t["kind"] == "text")
    assert cov["tokens_total"] == lc["coverage"]["tokens_total"] == lc["metrics"]["tokens_scored"]
    assert cov["tokens_total"] - n_text - 2 <= cov["tokens"] < cov["tokens_total"]
    assert srv["metrics"]["coverage"] == pytest.approx(cov["tokens"] / cov["tokens_total"], abs=1e-3)
    assert lc["metrics"]["coverage"] == 1.0
    # the quality bar: the server's bucketed lower bound is below llama.cpp's exact KLD in process
    assert srv["metrics"]["kld_kind"] == "lower-bound" and lc["metrics"]["kld_kind"] == "exact"
    assert 0 < srv["metrics"]["kld_mean"] <= lc["metrics"]["kld_mean"]
    assert srv["metrics"]["choice_acc"] == lc["metrics"]["choice_acc"]
    assert any("tokenised by the server differently" in n for n in srv["notes"])
    assert "coverage" in report.read_text() and f"{cov['items']}/{cov['items_total']} items" in report.read_text()
    # the supplement: the reference scored on exactly the server's ids, cached beside its own entry
    supplements = [Path(cache / "eval" / e) for e in entries
                   if json.loads((cache / "eval" / e / "meta.json").read_text()).get("supplement_of")]
    assert len(supplements) == 1
    _check_supplement(supplements[0], llama_tokenize)
    assert again == 0 and sorted(p.name for p in (cache / "eval").iterdir()) == entries  # reused, nothing recomputed
    assert "reference tokens measured" in text  # the text report names the coverage


def _check_supplement(entry: Path, tokenize) -> None:
    """Each cached row of the supplement for a whitespace/code text is the reference model's log-softmax on the
    server's own ids (within float rounding): the ids llama.cpp chose, not the reference tokenizer's."""
    import torch
    from transformers import AutoModelForCausalLM

    from qcheck.eval.cache import CacheReader

    reader = CacheReader(entry)
    model = AutoModelForCausalLM.from_pretrained(str(tiny_reference()), dtype=torch.float32)
    checked = []
    try:
        for t in WS_LINES:
            key = next((k for k in reader.index if k.startswith(t["id"] + "~")), None)
            if t["kind"] != "text" or key is None:
                continue
            ids = tokenize(t["text"])
            rows = reader.rows(key)
            with torch.no_grad():
                logits = model(torch.tensor([ids[:-1]])).logits[0].float()
            lp = torch.log_softmax(logits, -1).numpy()
            assert rows.n_rows == len(ids) - 1
            np.testing.assert_allclose(rows.target_logprobs, lp[np.arange(len(ids) - 1), ids[1:]], atol=1e-4)
            checked.append(t["id"])
    finally:
        reader.close()
    assert checked == [t["id"] for t in WS_LINES if t["kind"] == "text"]


@pytest.fixture(scope="module")
def default_engine(default_pre_gguf, tok):
    from support.engine_fake_server import FakeEngine

    eng = FakeEngine(str(default_pre_gguf), tok)
    yield eng
    eng.close()


@pytest.mark.parametrize("style", ["vllm", "together"])
def test_text_only_server_without_tokenize_endpoint_names_its_ids_in_the_answer(default_engine, tasks, tmp_path,
                                                                                 style, llama_tokenize):
    """No tokenize endpoint: vLLM's ``prompt_token_ids`` (or the echoed ``token_id:N`` tokens) are the server's own
    tokenisation; the requests are re-expressed in them, and the reference scored on them."""
    from qcheck.eval.run import EvalConfig, run_eval
    from support.engine_fake_server import FakeServer

    with FakeServer(default_engine) as fake:
        fake.behaviour.style, fake.behaviour.accept_ids = style, False
        fake.behaviour.tokenize, fake.behaviour.engine_tokenizer = False, True
        config = EvalConfig(reference=str(tiny_reference()), tasks=[str(tasks)], cache_dir=str(tmp_path / "c"),
                            bootstrap=200, candidates=[f"x=endpoint:{fake.url}#resume=0&retries=1"])
        [cand] = run_eval(config).candidates
    cov = cand.coverage
    assert cov["items"] == cov["items_total"] and cov["excluded"] == [] and cov["retokenised_requests"] >= len(WS_LINES)
    assert cov["tokens"] == cov["tokens_total"]  # these servers return every position
    assert cand.metrics["kld_mean"] > 0 and math.isfinite(cand.metrics["ln_ppl_ratio"])
    # token ids were tried once (the probe, refused); every scoring prompt then went out as text, and the server
    # scored its own tokenisation of it
    scored = [b for b in fake.bodies if b.get("prompt_logprobs") is not None or b.get("echo")]
    assert [isinstance(b["prompt"], list) for b in scored].count(True) == 1 and isinstance(scored[0]["prompt"], list)
    assert llama_tokenize(WS_LINES[0]["text"]) in fake.prompts


def test_an_endpoint_reference_that_tokenises_its_own_way_is_followed_not_refused(tmp_path, capsys, tok):
    """The F32 GGUF without ``tokenizer.ggml.pre`` served as the reference: every request its server tokenises
    differently is scored by the reference in the server's ids, and every candidate scores those same ids (a local
    candidate takes any ids); this run was refused at the first divergence before."""
    import shutil

    from qcheck.eval.encode import Encoder
    from qcheck.eval.tasks import parse_jsonl
    from support.gguf_export import export_gguf
    from support.llamaserver import llama_server, server_available

    if reason := server_available():
        pytest.skip(reason)
    ref = tiny_reference()
    f32 = export_gguf(ref, tmp_path / "f32.gguf", "F32", pre=None)
    files = tmp_path / "files"
    files.mkdir()
    for f in ref.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, files / f.name)
    lines = [t for t in [*TASK_LINES, *WS_LINES] if t["kind"] != "generate"]
    tasks = tmp_path / "t.jsonl"
    tasks.write_text("\n".join(json.dumps(t) for t in lines) + "\n")
    model = llama_cpp.Llama(model_path=str(f32), vocab_only=True, verbose=False)
    encoder = Encoder(tok)
    differ, expected_tokens = 0, 0  # requests the server tokenises its own way; positions compared in its ids
    for item in parse_jsonl(tasks.read_bytes(), "t", "t"):
        for index, r in enumerate(encoder.encode_item(item).score):
            prompt = text_prompt(r.input_ids, r.start, tok, tok.bos_token_id, True)
            scored = realign(r, prompt, model.tokenize(prompt.text.encode(), add_bos=True, special=True), tok,
                             tok.bos_token_id, len(tok))
            assert isinstance(scored, ScoreRequest)
            differ += scored is not r
            if item.kind == "text":
                expected_tokens += scored.n_rows - 1  # the echo nulls the first position after BOS
            elif index == item.answer:
                expected_tokens += scored.n_rows
    model.close()
    assert differ >= len(WS_LINES)
    with llama_server(f32, alias="ref") as url:
        code, out, err = _cli(["eval", "-r", f"{url}#model=ref", "--reference-files", str(files), "-t", str(tasks),
                               "--no-cache", "--bootstrap", "100", "--json", "-c", f"sim={tiny_reference()}",
                               "--no-resume", "--endpoint-top-k", "50"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert any(f"{differ} request(s) were tokenised by the reference endpoint differently" in n for n in data["notes"])
    [sim] = data["candidates"]
    # the candidate scored the server's ids: as many positions as the server's tokens have (the echo's first position
    # of each text item aside), every item measured
    assert sim["coverage"]["items"] == sim["coverage"]["items_total"] == len(lines)
    assert sim["metrics"]["tokens_scored"] == expected_tokens
    # the same weights on both sides (F32 export, transformers vs llama.cpp): a tiny KLD, never a mismatch
    assert sim["metrics"]["kld_mean"] < 1e-3
