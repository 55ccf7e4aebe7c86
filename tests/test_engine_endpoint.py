"""Endpoint candidates end to end: a real llama-cpp-python OpenAI-compatible server (started by the fixture on a
free 127.0.0.1 port, serving a GGUF exported in the test) and an http.server that behaves like vLLM, SGLang, Groq
and llama-server (numbers from llama.cpp on the same GGUF), with injected 429/5xx, timeouts, a server that dies
mid-run, a disagreeing tokenizer and credentials."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest

from qcheck.errors import QcheckError, RemoteError
from qcheck.eval.gate import Thresholds
from qcheck.eval.run import CandidateSpec, EvalConfig, run_eval
from qcheck.eval.runners.endpoint import EndpointOptions
from qcheck.eval.runners.endpoint.wire import Misaligned
from qcheck.eval.runners.http import EndpointError, ResumeState, redact
from support.eval_helpers import ABS, REL, TASK_LINES, task_file, tiny_gguf, tiny_reference

llama_cpp = pytest.importorskip("llama_cpp")
pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

N_SCORE = sum(len(t["choices"]) if t["kind"] == "choice" else 1 for t in TASK_LINES if t["kind"] != "generate")
N_GEN = sum(1 for t in TASK_LINES if t["kind"] == "generate")


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch, tmp_path):
    """Default resume files go under $QCHECK_CACHE_DIR: keep them out of the home directory."""
    monkeypatch.setenv("QCHECK_CACHE_DIR", str(tmp_path / "qcache"))


@pytest.fixture(scope="module")
def engine():
    from transformers import AutoTokenizer

    from support.engine_fake_server import FakeEngine

    eng = FakeEngine(str(tiny_gguf("Q8_0")), AutoTokenizer.from_pretrained(str(tiny_reference())))
    yield eng
    eng.close()


@pytest.fixture()
def fake(engine):
    from support.engine_fake_server import FakeServer

    with FakeServer(engine) as srv:
        yield srv


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


def evaluate(cache, candidates, **kw):
    config = EvalConfig(reference=str(tiny_reference()), tasks=[str(task_file())], cache_dir=cache, bootstrap=200,
                        candidates=candidates, **kw)
    return {c.name: c for c in run_eval(config).candidates}


def ep(url, **opts):
    opts.setdefault("resume", "0")
    opts.setdefault("retries", "2")
    opts.setdefault("backoff", "0.01")
    return f"endpoint:{url}#" + "&".join(f"{k}={v}" for k, v in opts.items())


@pytest.fixture(scope="module")
def in_process(cache):
    return evaluate(cache, [f"lc=llamacpp:{tiny_gguf('Q8_0')}"])["lc"]


# ---------------------------------------------------------------------------------------- vLLM / SGLang shapes
def test_vllm_prompt_logprobs_by_token_id(fake, cache, in_process):
    c = evaluate(cache, [f"vllm={ep(fake.url, concurrency=3)}"])["vllm"]
    m, lc = c.metrics, in_process.metrics
    assert c.backend == "openai:vllm" and m["kld_kind"] == "lower-bound"
    assert any("prompt_logprobs (ids prompts), top-20" in n for n in c.notes)
    assert any("lower bound" in n for n in c.notes)
    # the same kernels produce the numbers, so everything positional is identical to the in-process run
    assert m["tokens_scored"] == lc["tokens_scored"]
    assert m["ppl_ratio"] == pytest.approx(lc["ppl_ratio"], rel=1e-6)
    assert m["top1_agreement"] == lc["top1_agreement"]
    assert m["greedy_agreement"] == lc["greedy_agreement"] and m["accuracy"] == lc["accuracy"]
    assert m["flips"] == lc["flips"]
    # top-20 of 512 tokens: a lower bound of the in-process exact KLD
    assert 0 < m["kld_mean"] <= lc["kld_mean"] + 1e-6
    assert 0 < m["reference_rest_mass_mean"] < 1
    assert fake.counts["POST /v1/completions"] == 1 + N_SCORE + N_GEN  # probe + one request each


def test_requests_run_concurrently_up_to_the_limit(fake, cache):
    fake.behaviour.delay = 0.05
    evaluate(cache, [f"p={ep(fake.url, concurrency=4)}"])
    assert 2 <= fake.inflight_max <= 4
    fake.inflight_max = 0
    evaluate(cache, [f"q={ep(fake.url, concurrency=1)}"])
    assert fake.inflight_max == 1


def test_topk_reference_cache_with_topk_endpoint_is_a_looser_lower_bound(fake, cache):
    full_ref = evaluate(cache, [f"a={ep(fake.url)}"])["a"].metrics
    both_topk = evaluate(cache, [f"b={ep(fake.url)}"], cache_topk=50)["b"].metrics
    assert both_topk["kld_kind"] == "lower-bound"
    assert 0 < both_topk["kld_mean"] <= full_ref["kld_mean"] + 1e-6  # intersection of the two sets: coarser
    assert both_topk["ppl_ratio"] == pytest.approx(full_ref["ppl_ratio"], rel=1e-6)  # exact in both


def test_openai_legacy_echo_with_token_id_keys(fake, cache):
    vllm = evaluate(cache, [f"v={ep(fake.url)}"])["v"].metrics
    fake.behaviour.style = "together"
    c = evaluate(cache, [f"t={ep(fake.url)}"])["t"]
    assert c.backend == "openai:openai" and any("via echo (ids prompts)" in n for n in c.notes)
    for key in ("kld_mean", "top1_agreement", "ppl_ratio", "tokens_scored"):
        assert c.metrics[key] == pytest.approx(vllm[key], rel=1e-6), key


def test_sglang_native_generate_gives_the_same_numbers(fake, cache):
    vllm = evaluate(cache, [f"v={ep(fake.url)}"])["v"].metrics
    fake.behaviour.style = "sglang"
    c = evaluate(cache, [f"s={ep(fake.url)}"])["s"]
    assert c.backend == "openai:sglang" and fake.counts["POST /generate"] == 1 + N_SCORE
    for key in ("kld_mean", "top1_agreement", "ppl_ratio", "tokens_scored"):
        assert c.metrics[key] == pytest.approx(vllm[key], rel=1e-6), key


# ---------------------------------------------------------------------------------------- refusals -> fallback
def test_groq_style_400_on_logprobs_falls_back_to_generation(fake, cache, in_process):
    fake.behaviour.style = "groq"
    c = evaluate(cache, [f"groq={ep(fake.url)}"])["groq"]
    m = c.metrics
    assert c.backend == "openai:openai (generation only)"
    assert m["kld_mean"] is None and m["top1_agreement"] is None and m["tokens_scored"] == 0  # never a fake KLD
    assert m["generate_items"] == N_GEN and m["greedy_agreement"] is not None
    fallback = [n for n in c.notes if "returns no prompt log-probs" in n]
    assert len(fallback) == 1 and "HTTP 400" in fallback[0] and "logprobs is not supported" in fallback[0]
    assert any("item(s) skipped" in n for n in c.notes)
    assert m["items_scored"] == N_GEN  # generate items only; choice items need log-probs


def test_provider_with_text_prompts_only_and_no_tokenizer_says_it_could_not_check(fake, cache):
    from transformers import AutoTokenizer

    fake.behaviour.style, fake.behaviour.accept_ids, fake.behaviour.tokenize = "groq", False, False
    c = evaluate(cache, [f"g={ep(fake.url)}"])["g"]
    assert c.metrics["kld_mean"] is None and c.metrics["generate_items"] == N_GEN
    assert any("could not be checked against the reference's" in n for n in c.notes)
    # the leading BOS is left to the server: it saw exactly the reference's prompt ids, not a doubled BOS
    tok = AutoTokenizer.from_pretrained(str(tiny_reference()))
    expected = [tok(t["prompt"])["input_ids"] for t in TASK_LINES if t["kind"] == "generate"]
    assert sorted(p for p in fake.prompts if p in expected) == sorted(expected)  # concurrent: any order
    assert all(p[1] != tok.bos_token_id for p in fake.prompts)


def test_llama_server_without_echo_falls_back(fake, cache):
    fake.behaviour.style = "llama-server"
    c = evaluate(cache, [f"ls={ep(fake.url)}"])["ls"]
    assert c.backend == "openai:llama-server (generation only)" and c.metrics["kld_mean"] is None
    note = next(n for n in c.notes if "returns no prompt log-probs" in n)
    assert "Only no echo is supported" in note
    generations = [b for b in fake.bodies if not b.get("echo") and b.get("max_tokens", 0) > 1]
    assert generations and all(isinstance(b["prompt"], list) for b in generations)  # it takes token ids: sent as ids


def test_forced_mode_that_the_server_refuses_is_exit_2(fake, cache):
    fake.behaviour.style = "groq"
    with pytest.raises(EndpointError, match="cannot do mode echo"):
        evaluate(cache, [f"g={ep(fake.url, mode='echo')}"], max_items=1)


# ---------------------------------------------------------------------------------------- retries, timeouts
def test_429_and_5xx_are_retried_with_backoff(fake, cache):
    clean = evaluate(cache, [f"c={ep(fake.url)}"])["c"].metrics
    fake.behaviour.fail_plan, fake.behaviour.fail_skip = [429, 503, 502, 500], fake.served + 3
    c = evaluate(cache, [f"r={ep(fake.url, retries=5, concurrency=1)}"])["r"]
    assert fake.behaviour.fail_plan == []
    assert any(n.startswith("4 request(s) were retried") for n in c.notes)
    assert c.metrics["kld_mean"] == pytest.approx(clean["kld_mean"], rel=1e-9)


def test_timeouts_are_retried(fake, cache):
    # the hung request sleeps far past the client's timeout (on a daemon thread), so a loaded machine cannot
    # answer it in time; a 2 s timeout leaves the normal requests (milliseconds) room on a busy CI runner
    fake.behaviour.hang_seconds, fake.behaviour.hang_count, fake.behaviour.fail_skip = 60.0, 1, fake.served + 2
    c = evaluate(cache, [f"t={ep(fake.url, timeout=2, retries=3, concurrency=1)}"], max_items=2)["t"]
    assert fake.behaviour.hang_count == 0 and any("retried" in n for n in c.notes)
    assert c.metrics["tokens_scored"] > 0


def test_persistent_5xx_gives_up_with_one_clear_error(fake, cache):
    fake.behaviour.fail_plan = [503] * 50
    fake.behaviour.retry_after = None
    with pytest.raises(RemoteError, match=r"HTTP 503 after 3 attempts: injected 503"):
        evaluate(cache, [f"d={ep(fake.url, retries=2, concurrency=2)}"])


# ---------------------------------------------------------------------------------------- resume
def test_interrupted_run_resumes_where_it_stopped(fake, cache, tmp_path):
    state = tmp_path / "state"
    done_before = 5
    fake.behaviour.die_after = 1 + done_before  # the capability probe, then 5 requests, then the server dies
    target = ep(fake.url, resume=1, state_dir=state, concurrency=1)
    with pytest.raises(RemoteError, match="the server is gone"):
        evaluate(cache, [f"res={target}"])
    files = list(state.glob("endpoint-*.jsonl"))
    assert len(files) == 1 and len(files[0].read_text().splitlines()) == 1 + done_before  # the identity first
    fake.behaviour.die_after = None
    fake.counts.clear()
    resumed = evaluate(cache, [f"res={target}"])["res"]
    assert fake.counts["POST /v1/completions"] == 1 + (N_SCORE + N_GEN - done_before)
    assert any(f"resumed: {done_before} request(s)" in n for n in resumed.notes)
    fake.counts.clear()
    again = evaluate(cache, [f"res={target}"])["res"]  # everything is in the state: only the probe is sent
    assert fake.counts["POST /v1/completions"] == 1
    fresh = evaluate(cache, [f"fresh={ep(fake.url)}"])["fresh"]
    for key in ("kld_mean", "ppl_ratio", "top1_agreement", "greedy_agreement", "accuracy"):
        assert resumed.metrics[key] == pytest.approx(fresh.metrics[key], rel=1e-6), key
        assert again.metrics[key] == pytest.approx(fresh.metrics[key], rel=1e-6), key


def test_resume_files_live_under_the_cache_dir_and_are_reused_only_when_asked(fake, cache, tmp_path):
    from pathlib import Path

    target = f"d=endpoint:{fake.url}#retries=0"
    evaluate(cache, [target], max_items=2, run_id="r1")
    files = list((Path(cache) / "eval" / "endpoints" / "r1").glob("endpoint-*.jsonl"))
    # the server's identity, then item 1 text, item 2 text
    assert len(files) == 1 and len(files[0].read_text().splitlines()) == 3
    assert not (tmp_path / "qcache").exists()  # not under $QCHECK_CACHE_DIR: under the run's --cache-dir
    fake.counts.clear()
    evaluate(cache, [target], max_items=2, run_id="r1", resume=True)
    assert fake.counts["POST /v1/completions"] == 1  # the probe only
    fake.counts.clear()
    evaluate(cache, [target], max_items=2)  # a new run: nothing earlier is reused
    assert fake.counts["POST /v1/completions"] == 1 + 2


def test_resume_state_ignores_a_torn_last_line(tmp_path):
    path = tmp_path / "s.jsonl"
    st = ResumeState(path)
    rid = ResumeState.record_id("score", "a", (1, 2, 3))
    st.put(rid, {"t": [1.0]})
    with open(path, "a") as fh:
        fh.write('{"id": "broken", "val')  # killed mid-write
    again = ResumeState(path)
    assert again.get(rid) == {"t": [1.0]} and len(again) == 1
    assert ResumeState.record_id("score", "a", (1, 2, 4)) != rid  # different tokens never reuse a record


# ---------------------------------------------------------------------------------------- tokenisation
def test_a_tokenize_endpoint_that_contradicts_the_server_leaves_requests_out_not_the_run(fake, cache, in_process):
    """The tokenize endpoint drops token 23 of every text, the completions do not: the three long text items cannot be
    paired with what the server scored and are left out with the reason, the short choice items are compared as
    usual, and the coverage says so and gates. (This run was refused as a whole before.)"""
    fake.behaviour.accept_ids = False  # only text prompts: the server tokenises them itself
    fake.behaviour.tokenize_drop = 23  # the probe text has 23 tokens: it still aligns
    c = evaluate(cache, [f"tok={ep(fake.url)}"], thresholds=Thresholds(min_coverage=0.9))["tok"]
    m, cov = c.metrics, c.coverage
    texts = [t["id"] for t in TASK_LINES if t["kind"] == "text"]
    assert [e["item"] for e in cov["excluded"]] == texts
    assert all("first divergence at token 23" in e["reason"] for e in cov["excluded"])
    assert cov["items"] == len(TASK_LINES) - len(texts) and cov["items_total"] == len(TASK_LINES)
    assert cov["tokens"] == m["tokens_scored"] == 6 and cov["tokens_total"] == in_process.metrics["tokens_scored"]
    assert m["choice_acc"] == in_process.metrics["choice_acc"]  # the choices are scored as usual
    assert m["coverage_items"] == pytest.approx(5 / 8) and m["coverage"] == pytest.approx(6 / cov["tokens_total"])
    assert [f["metric"] for f in c.gate.failures] == ["coverage"]
    assert any("3 request(s) of 3 item(s) could not be compared" in n for n in c.notes)


def test_a_server_that_cannot_align_even_the_probe_gives_generation_metrics_only(fake, cache):
    fake.behaviour.accept_ids = False
    fake.behaviour.tokenize_drop = 3
    c = evaluate(cache, [f"tok={ep(fake.url)}"], thresholds=Thresholds(min_coverage=0.5))["tok"]
    assert c.backend == "openai:vllm (generation only)"
    assert any("straddle" in n or "first divergence at token 3" in n for n in c.notes), c.notes
    assert c.metrics["coverage_tokens"] == 0 and c.coverage["items"] == N_GEN and c.metrics["generate_items"] == N_GEN
    assert [f["metric"] for f in c.gate.failures] == ["coverage"]


def test_text_prompts_that_tokenise_identically_are_accepted(fake, cache, in_process):
    fake.behaviour.accept_ids = False
    c = evaluate(cache, [f"txt={ep(fake.url)}"])["txt"]
    assert any("(text prompts)" in n for n in c.notes)
    assert c.metrics["ppl_ratio"] == pytest.approx(in_process.metrics["ppl_ratio"], rel=1e-6)


# ---------------------------------------------------------------------------------------- hostile answers
@pytest.mark.parametrize(("corrupt", "message"), [("nan", "invalid log-prob nan"), ("positive", "invalid log-prob 2.0"),
                                                  ("html", "the response is not JSON")])
def test_hostile_responses_are_exit_2_with_the_reason(fake, cache, corrupt, message):
    fake.behaviour.corrupt = corrupt
    with pytest.raises(QcheckError, match=message):
        evaluate(cache, [f"h={ep(fake.url)}"], max_items=1)


def _mutate(obj, rng, depth=0):
    """A copy of a JSON value with one random part replaced by junk (wrong type, NaN, huge, negative, nested)."""
    import copy

    junk = [None, "x", -1, 10**30, 1e308, float("nan"), float("inf"), [], {}, [[[]]], {"a": {"b": {}}}, True,
            "token_id:-5", "token_id:999999"]
    out = copy.deepcopy(obj)
    containers = []

    def walk(node):
        if isinstance(node, dict):
            containers.extend((node, k) for k in node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            containers.extend((node, i) for i in range(len(node)))
            for v in node:
                walk(v)

    walk(out)
    if not containers:
        return rng.choice(junk)
    parent, key = containers[rng.randrange(len(containers))]
    parent[key] = rng.choice(junk)
    return out


@pytest.mark.parametrize("style", ["vllm", "sglang", "together"])
def test_mutated_responses_parse_or_fail_cleanly(fake, style):
    """Hostile input is normal input: a server's answer with any one part replaced by junk either parses into
    rows of the right length or stops with a QcheckError, never an unhandled exception."""
    import random

    from transformers import AutoTokenizer

    from qcheck.eval.runners.base import ScoreRequest, VocabInfo
    from qcheck.eval.runners.endpoint import EndpointRunner, echo, prompt_logprobs, sglang
    from qcheck.eval.runners.endpoint.wire import Unsupported

    fake.behaviour.style = style
    tok = AutoTokenizer.from_pretrained(str(tiny_reference()))
    vocab = VocabInfo(len(tok), tok.bos_token_id, True, (tok.eos_token_id,))
    runner = EndpointRunner("m", EndpointOptions.parse(f"{fake.url}#resume=0"), tok, vocab)
    ids = tuple(tok("The quick brown fox jumps.")["input_ids"])
    req = ScoreRequest("k", ids, 2)
    if style == "sglang":
        _, valid, _ = fake.respond("/generate", {"input_ids": list(ids), "top_logprobs_num": 5})
        def parse(data, req): return sglang.parse(runner, data, req)
    elif style == "vllm":
        _, valid, _ = fake.respond("/v1/completions", {"model": fake.behaviour.model, "prompt": list(ids),
                                                       "prompt_logprobs": 5})
        def parse(data, req): return prompt_logprobs.parse(runner, data, req)
    else:
        _, valid, _ = fake.respond("/v1/completions", {"model": fake.behaviour.model, "prompt": list(ids),
                                                       "echo": True, "logprobs": 5, "max_tokens": 1})
        def parse(data, req): return echo.parse(runner, data, req)
    assert len(parse(valid, req)) == req.n_rows
    rng = random.Random(1234)
    outcomes = Counter()
    for _ in range(300):
        data = _mutate(valid, rng)
        try:
            rows = parse(data, req)
        except (QcheckError, Unsupported):
            outcomes["refused"] += 1
            continue
        assert len(rows) == req.n_rows
        scores = runner._to_scores(req, rows)
        assert scores.topk_ids.min(initial=0) >= 0 and scores.topk_ids.max(initial=0) < vocab.vocab_size
        outcomes["parsed"] += 1
    assert outcomes["refused"] > 0 and outcomes["parsed"] > 0


def test_string_keyed_top_k_resolution_and_its_argmax_rule(fake):
    """llama-cpp-python keys top-k by token strings. Unique strings map to ids; an ambiguous one ("" for partial
    UTF-8 bytes) stays in the rest bucket, and the top-1 is claimed only when no hidden token could outweigh it."""
    from transformers import AutoTokenizer

    from qcheck.eval.runners.base import ScoreRequest, VocabInfo
    from qcheck.eval.runners.endpoint import EndpointRunner
    from qcheck.eval.runners.endpoint.echo import parse as parse_echo

    tok = AutoTokenizer.from_pretrained(str(tiny_reference()))
    vocab = VocabInfo(len(tok), tok.bos_token_id, True, (tok.eos_token_id,))
    runner = EndpointRunner("m", EndpointOptions.parse(f"{fake.url}#resume=0&top_k=3"), tok, vocab)
    strings = runner.strings()
    unique = [i for i in range(len(tok)) if strings.strings[i] and strings.unique.get(strings.strings[i]) == i]
    assert "" not in strings.unique and sum(1 for x in strings.strings if x == "") > 1
    a, b, c = unique[10], unique[11], unique[12]
    ids = (tok.bos_token_id, a, b)
    req = ScoreRequest("k", ids, 2)  # one row: predicts b after [BOS, a]

    def echo(top, token_b=strings.strings[b]):
        # llama-cpp-python drops BOS from the echo and appends one generated token
        return {"choices": [{"logprobs": {"tokens": [strings.strings[a], token_b, "x"],
                                          "token_logprobs": [None, math.log(0.1), -1.0],
                                          "top_logprobs": [None, top, {}]}}],
                "usage": {"completion_tokens": 1}}

    peaked = parse_echo(runner, echo({strings.strings[c]: math.log(0.7), "": math.log(0.15),
                                      strings.strings[b]: math.log(0.1)}), req)[0]
    assert peaked.greedy == c and dict(peaked.topk) == pytest.approx({c: math.log(0.7), b: math.log(0.1)})
    flat = parse_echo(runner, echo({strings.strings[c]: math.log(0.3), "": math.log(0.25),
                                    strings.strings[b]: math.log(0.1)}), req)[0]
    assert flat.greedy == -1  # 0.3 < the 0.6 left unaccounted: an ambiguous token could be the argmax
    assert flat.target == pytest.approx(math.log(0.1))
    clean = parse_echo(runner, echo({strings.strings[c]: math.log(0.3), strings.strings[a]: math.log(0.2),
                                     strings.strings[b]: math.log(0.1)}), req)[0]
    assert clean.greedy == c  # every key resolved: the returned top-k holds the argmax
    wrong = parse_echo(runner, echo({strings.strings[c]: math.log(0.7)}, token_b=strings.strings[c]), req)[0]
    assert wrong.topk == [(b, pytest.approx(math.log(0.1)))] and wrong.greedy == -1
    assert runner.string_mismatches == 1
    short = echo({})
    for key in ("tokens", "token_logprobs", "top_logprobs"):
        del short["choices"][0]["logprobs"][key][0]  # the server saw one token fewer than the reference sent
    with pytest.raises(Misaligned, match="echoed 1 prompt tokens for 3 sent; first divergence"):
        parse_echo(runner, short, req)


# ---------------------------------------------------------------------------------------- credentials
def test_api_key_comes_from_the_environment_and_is_never_printed(fake, cache, monkeypatch, capsys):
    from qcheck.cli import main

    secret = "sk-test-0123456789abcdef"
    fake.behaviour.api_key = secret
    monkeypatch.setenv("QCHECK_TEST_KEY", secret)
    c = evaluate(cache, [f"k={ep(fake.url, api_key_env='QCHECK_TEST_KEY')}"], max_items=2)["k"]
    assert c.metrics["tokens_scored"] > 0
    monkeypatch.setenv("QCHECK_WRONG_KEY", "sk-wrong-key-9876543210")
    base = ["eval", "-r", str(tiny_reference()), "-t", str(task_file()), "--cache-dir", cache, "--max-items", "1",
            "--endpoint", f"k={fake.url}", "--retries", "0", "--no-resume"]
    with pytest.raises(SystemExit) as exc:
        main([*base, "--api-key-env", "QCHECK_WRONG_KEY"])
    out = capsys.readouterr()
    assert exc.value.code == 2 and "refused the credentials (HTTP 401)" in out.err
    assert "sk-wrong-key" not in out.err + out.out and secret not in out.err + out.out
    with pytest.raises(SystemExit) as exc:
        main([*base, "--api-key-env", "QCHECK_UNSET_VAR_X"])
    out = capsys.readouterr()
    assert exc.value.code == 2 and "QCHECK_UNSET_VAR_X" in out.err and "not set" in out.err


def test_redaction_covers_bearer_and_provider_keys():
    text = "header 'Bearer sk-abcdefghijkl' and gsk_ABCDEFGHIJKL and mykey123"
    out = redact(text, "mykey123")
    assert "sk-abcdefghijkl" not in out and "gsk_ABCDEFGHIJKL" not in out and "mykey123" not in out


def test_options_parse_and_validate():
    o = EndpointOptions.parse("http://h:8000/v1#model=m&top_k=5&concurrency=8&resume=0", mode="echo")
    assert (o.url, o.model, o.top_k, o.concurrency, o.resume, o.mode) == ("http://h:8000", "m", 5, 8, False, "echo")
    for bad in ("http://h#top_k=0", "http://h#nope=1", "ftp://h", "http://h#mode=magic"):
        with pytest.raises(QcheckError):
            EndpointOptions.parse(bad)
    assert CandidateSpec.parse("e=endpoint:http://127.0.0.1:1#model=x").backend == "endpoint"


def test_unreachable_endpoint_is_exit_2(cache):
    from support.llamaserver import free_port

    with pytest.raises(RemoteError, match=r"127\.0\.0\.1"):
        evaluate(cache, [f"x={ep(f'http://127.0.0.1:{free_port()}', retries=0)}"], max_items=1)


# ---------------------------------------------------------------------------------------- the real server
def test_real_llama_cpp_python_server_end_to_end_agrees_with_in_process_and_simulated(cache, capsys):
    """``qcheck eval`` against llama-cpp-python's OpenAI server (echo + logprobs over text prompts checked with
    /extras/tokenize), beside the in-process llama.cpp and simulated candidates of the same GGUF."""
    from qcheck.cli import main
    from support.llamaserver import llama_server, server_available

    reason = server_available()
    if reason:
        pytest.skip(reason)
    gguf = tiny_gguf("Q8_0")
    with llama_server(gguf, alias="tiny-q8") as url, pytest.raises(SystemExit) as exc:
        main(["eval", "-r", str(tiny_reference()), "-t", str(task_file()), "--cache-dir", cache,
              "--bootstrap", "200", "-c", f"sim={gguf}", "-c", f"lc=llamacpp:{gguf}",
              "--endpoint", f"server={url}", "--endpoint-model", "tiny-q8", "--no-resume", "--concurrency", "2",
              "--json"])
    out = capsys.readouterr()
    assert exc.value.code == 0, out.err
    data = json.loads(out.out)
    c = {x["name"]: x for x in data["candidates"]}
    sim, lc, srv = c["sim"]["metrics"], c["lc"]["metrics"], c["server"]["metrics"]
    assert c["server"]["backend"] == "openai:llama-cpp-python" and srv["kld_kind"] == "lower-bound"
    assert any("echo (text prompts)" in n for n in c["server"]["notes"])
    # llama-cpp-python nulls the first echoed token: 3 text items lose their first position, noted, not faked
    assert lc["tokens_scored"] - srv["tokens_scored"] == 3
    assert any("3 position(s), the first token after BOS" in n for n in c["server"]["notes"])
    # same kernels: per-token NLL matches in process (fewer positions: agreement to 1e-3 in ln PPL ratio)
    assert abs(srv["ln_ppl_ratio"] - lc["ln_ppl_ratio"]) < 1e-3
    # the bound is below the exact in-process KLD; the exact one is within the stated tolerance of the simulation
    assert 0 < srv["kld_mean"] <= lc["kld_mean"] * lc["tokens_scored"] / srv["tokens_scored"] + 1e-6
    assert abs(lc["kld_mean"] - sim["kld_mean"]) <= REL * sim["kld_mean"] + ABS
    # task metrics from log-likelihoods: the same choices as in process
    assert srv["items_scored"] == lc["items_scored"]
    assert srv["choice_acc"] == lc["choice_acc"] and srv["flips_c_to_i"] == lc["flips_c_to_i"]
    assert not math.isnan(srv["kld_mean"])
    # generations come back as text only; where it lost a partial UTF-8 character the report says so
    assert srv["greedy_agreement"] == lc["greedy_agreement"] or any(
        "does not re-tokenise" in n for n in c["server"]["notes"])


# ---------------------------------------------------------------------------------------- the server's KV cache
def test_the_kv_cache_a_server_reports_is_recorded_and_split(fake, cache):
    """vLLM with dev endpoints reports its cache type at /server_info: it is recorded and its cost alone is measured
    (the reference's weights with vLLM's FP8 cache emulated); the weights alone cannot be: the server's cache is its
    own. A declared type that the server contradicts is kept, with a note."""
    fake.behaviour.server_info = {"vllm_config": {"cache_config": {"cache_dtype": "fp8_e4m3"}}}
    c = evaluate(cache, [f"v={ep(fake.url)}"])["v"]
    kv = c.kv_cache
    assert (kv["k"], kv["v"], kv["reported"], kv["source"], kv["engine"]) == (
        "fp8_e4m3", "fp8_e4m3", "fp8_e4m3", "reported by the server", "vllm")
    split = kv["split"]
    assert "unavailable" in split["weights"] and split["kv"]["kld_mean"] > 0
    assert "vllm" in split["kv"]["emulation"] and c.metrics["kv_only_kld_mean"] == split["kv"]["kld_mean"]
    fake.behaviour.style, fake.behaviour.server_info = "sglang", {"kv_cache_dtype": "bf16"}
    from qcheck.request import KVCacheTypes

    d = evaluate(cache, [f"s={ep(fake.url)}"], kv_cache_by_candidate={"s": KVCacheTypes("fp8", "fp8")},
                 kv_split=False)["s"]
    assert d.kv_cache["reported"] == "bf16" and d.kv_cache["source"].startswith("declared")
    assert any("the server reports KV cache 'bf16', not the declared 'fp8'" in n for n in d.notes)
    fake.behaviour.server_info = None
    e = evaluate(cache, [f"n={ep(fake.url)}"])["n"]
    assert e.kv_cache is None  # nothing declared, nothing reported
