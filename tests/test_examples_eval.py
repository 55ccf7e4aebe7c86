"""`qcheck eval` on the bundled examples, exactly as examples/README.md shows it: the BF16 reference (with its
byte-level tokenizer) against the Q8_0 / Q4_0 GGUF files and the FP8 channel checkpoint, plus the same GGUF
under llama.cpp's own kernels. The examples' tokenizer must give llama.cpp's ids for the GGUF vocabulary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from support.contract import validate

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
REFERENCE = EXAMPLES / "tiny-llama-bf16"
#: the README command, run in examples/
README_ARGS = ["eval", "--reference", "tiny-llama-bf16", "--candidate", "q8=tiny-llama-Q8_0.gguf",
               "--candidate", "q4=tiny-llama-Q4_0.gguf", "--candidate", "fp8=tiny-llama-fp8-channel",
               "--tasks", "prose"]
#: texts with several scripts, digits, code, repeated spaces and a leading space
SAMPLES = ("Hello world", " two  spaces", "Größe 12+30=42 → 🙂 敏捷的狐狸", "def f(x):\n    return x\t# done",
           "Быстрая лиса, 1/2.")

pytestmark = pytest.mark.slow


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    from qcheck.cli import main

    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("qcheck-cache")


@pytest.fixture(scope="module")
def readme_run(cache) -> dict:
    """The README command as a user types it (separate process, relative paths, cwd examples/), with --json."""
    proc = subprocess.run([sys.executable, "-m", "qcheck", *README_ARGS, "--json", "--cache-dir", str(cache)],
                          cwd=EXAMPLES, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    data = json.loads(proc.stdout)
    validate(data, "eval")
    return data


def kld(data: dict) -> dict[str, float]:
    return {c["name"]: c["metrics"]["kld_mean"] for c in data["candidates"]}


def test_reference_tokenizer_is_the_gguf_vocabulary():
    from transformers import AutoTokenizer

    from qcheck.readers.gguf import read_gguf_file

    tok = AutoTokenizer.from_pretrained(str(REFERENCE))
    config = json.loads((REFERENCE / "config.json").read_text())
    assert len(tok) == config["vocab_size"] == 256
    for name in ("tiny-llama-Q8_0.gguf", "tiny-llama-Q4_0.gguf", "tiny-llama-MXFP4.gguf"):
        meta = read_gguf_file(EXAMPLES / name, materialize=("tokenizer.ggml.tokens",)).metadata
        assert tok.convert_ids_to_tokens(list(range(256))) == meta["tokenizer.ggml.tokens"]
        assert (tok.bos_token_id, tok.eos_token_id, tok.unk_token_id) == (
            meta["tokenizer.ggml.bos_token_id"], meta["tokenizer.ggml.eos_token_id"],
            meta["tokenizer.ggml.unknown_token_id"]) == (config["bos_token_id"], config["eos_token_id"], 0) == (1, 2, 0)
    for text in SAMPLES:
        ids = tok(text)["input_ids"]
        # BOS, then the UTF-8 bytes of "\u2581" + text with spaces as "\u2581", each byte b as id b + 3
        assert ids == [1] + [b + 3 for b in ("\u2581" + text.replace(" ", "\u2581")).encode("utf-8")]
        assert tok.decode(ids, skip_special_tokens=True) == text


@pytest.mark.llamacpp
def test_llamacpp_tokenises_like_the_reference():
    llama_cpp = pytest.importorskip("llama_cpp")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(REFERENCE))
    llm = llama_cpp.Llama(model_path=str(EXAMPLES / "tiny-llama-Q4_0.gguf"), n_ctx=256, verbose=False)
    try:
        assert (llm.n_vocab(), llm.token_bos(), llm.token_eos()) == (256, 1, 2)
        for text in SAMPLES:
            assert llm.tokenize(text.encode("utf-8"), add_bos=True, special=True) == tok(text)["input_ids"], text
    finally:
        llm.close()


def test_readme_command_orders_candidates(readme_run):
    data = readme_run
    assert data["exit_code"] == 0
    assert data["reference"]["vocab_size"] == 256 and data["reference"]["bos_token_id"] == 1
    # the 14 prose items (5,020 tokens) in 2 batched forwards of <= 4,096 padded tokens, + 2 for the one-off check
    # that the output layer applied in row blocks reproduces the model's own logits
    assert data["reference"]["forward_calls"] == 2 + 2
    perf = data["performance"]["reference"]
    assert perf["tokens"] == perf["scored_tokens"] == 5020 and perf["peak_rss_bytes"] > 10**7
    k = kld(data)
    assert list(k) == ["q8", "q4", "fp8"]
    assert [c["backend"] for c in data["candidates"]] == ["simulated:gguf", "simulated:gguf", "simulated:fp8"]
    # 8-bit formats lose far less than Q4_0 (measured: q8 3.2e-6, fp8 4.4e-5, q4 7.2e-4 nats/token)
    assert 0 < k["q8"] < k["fp8"] < k["q4"]
    assert k["q4"] > 5 * k["fp8"] and k["q4"] > 50 * k["q8"]
    top1 = {c["name"]: c["metrics"]["top1_agreement"] for c in data["candidates"]}
    assert top1["q8"] > top1["q4"] and top1["fp8"] > top1["q4"]
    for c in data["candidates"]:
        assert c["gate"] == {"passed": True, "failures": [], "checked": [], "skipped": []}


def test_kld_threshold_fails_only_q4(readme_run, cache, capsys):
    args = [a if not a.startswith(("tiny-", "q8=", "q4=", "fp8=")) else _absolute(a) for a in README_ARGS]
    code, out, err = run_cli([*args, "--json", "--cache-dir", str(cache), "--max-kld", "1e-4"], capsys)
    assert code == 1, err
    data = json.loads(out)
    assert data["exit_code"] == 1 and data["cache"]["hit"] is True  # the reference came from readme_run's cache
    assert kld(data) == kld(readme_run)  # same ids, same cached reference: the same numbers
    gates = {c["name"]: c["gate"] for c in data["candidates"]}
    assert gates["q8"]["passed"] and gates["fp8"]["passed"]
    assert not gates["q4"]["passed"]
    [failure] = gates["q4"]["failures"]
    assert (failure["threshold"], failure["metric"], failure["limit"]) == ("max_kld", "kld_mean", 1e-4)
    assert failure["value"] == kld(readme_run)["q4"]


@pytest.mark.llamacpp
def test_llamacpp_candidate_agrees_with_simulation(readme_run, cache, capsys):
    pytest.importorskip("llama_cpp")
    code, out, err = run_cli(["eval", "--reference", str(REFERENCE), "--tasks", "prose", "--cache-dir", str(cache),
                              "--candidate", f"q4cpp=llamacpp:{EXAMPLES / 'tiny-llama-Q4_0.gguf'}",
                              "--candidate", f"q8cpp=llamacpp:{EXAMPLES / 'tiny-llama-Q8_0.gguf'}", "--json"], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert [c["backend"] for c in data["candidates"]] == ["llama.cpp", "llama.cpp"]
    for c in data["candidates"]:  # the tokenizer probe found no divergence
        assert not any("tokenises" in n for n in c["notes"]), c["notes"]
    k = kld(data)
    assert k["q8cpp"] < k["q4cpp"] / 20
    # llama.cpp's kernels and the dequantised simulation measure the same Q4_0 weights (measured: 7.16e-4 vs
    # 7.22e-4); llama.cpp also quantises activations to Q8_0, hence not exactly equal
    assert 0.8 < k["q4cpp"] / kld(readme_run)["q4"] < 1.25


def _absolute(arg: str) -> str:
    name, sep, path = arg.rpartition("=")
    return f"{name}{sep}{EXAMPLES / path}"


@pytest.mark.parametrize("name", ["tiny-llama-Q8_0.gguf", "tiny-llama-Q4_0.gguf", "tiny-llama-MXFP4.gguf"])
def test_simulated_gguf_equals_transformers_gguf_loader_bit_for_bit(name):
    """simulate reads each tensor at the offset qcheck's header reader found and dequantises it with gguf-py;
    transformers' own GGUF loader (an independent name mapping and un-permutation) must give the same bits."""
    pytest.importorskip("accelerate")
    import torch
    import transformers

    from qcheck.eval.simulate import simulated_state_dict

    ours, notes = simulated_state_dict(str(EXAMPLES / name), str(REFERENCE))
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(REFERENCE), gguf_file=str(EXAMPLES / name))
    theirs = theirs.state_dict()
    assert set(ours) == set(theirs) and len(ours) == 21
    for key, tensor in ours.items():
        assert torch.equal(tensor, theirs[key].float()), key
    assert notes[0].startswith("GGUF (llama): 21 tensors dequantised with gguf-py")
