"""Engine command lines read in-process (qcheck/deploy/argv.py): which words are secrets and how every shown word,
problem and occurrence masks them, the word limit at exactly its value, on the real flag tables of vLLM (argparse,
abbreviations) and llama.cpp (its own parser). The red-team tests run the CLI in subprocesses; these pin the same
behaviour where a mutation run can see it (issue #36)."""

from __future__ import annotations

import pytest

from qcheck.deploy.argv import MAX_TOKENS, read_argv, secret_option
from qcheck.deploy.flags import FlagSpec, flag_table
from qcheck.errors import InputError

VLLM = flag_table("vllm")
LLAMA = flag_table("llama.cpp")


def _read(table, tokens, program=None):
    parsed = read_argv(table, tokens, program)
    return (parsed.shown, parsed.secrets, [(o.written, o.value) for o in parsed.occurrences],
            [(p.flag, p.value, p.message, p.unknown_flag) for p in parsed.problems])


@pytest.mark.parametrize("tokens, shown, secrets, occurrences, problems", [
    (["--api-key", "sk-123", "--max-model-len", "4096"], ["--api-key", "***", "--max-model-len", "4096"], ["sk-123"],
     [("--api-key", "***"), ("--max-model-len", "4096")], []),
    (["--api-key=sk-123"], ["--api-key=***"], ["sk-123"], [("--api-key=***", "***")], []),
    (["--api-k", "sk-123"], ["--api-k", "***"], ["sk-123"], [("--api-k", "***")], []),  # an abbreviation argparse takes
    (["--api_key", "sk-123"], ["--api_key", "***"], ["sk-123"], [("--api_key", "***")], []),  # underscores read as -
    (["--hf-tok=hf_1"], ["--hf-tok=***"], ["hf_1"], [("--hf-tok=***", "***")], []),
    # refused, but named like a secret: the value is masked before the message quotes anything
    (["--api-keyz=sk-1"], ["--api-keyz=***"], ["sk-1"], [],
     [("--api-keyz=***", None, "unrecognized arguments: --api-keyz", True)]),
    (["--api-keyz", "sk-1", "--x"], ["--api-keyz", "***", "--x"], ["sk-1"], [],
     [("--api-keyz", None, "unrecognized arguments: --api-keyz", True),
      ("--x", None, "unrecognized arguments: --x", True)]),
    (["--ap=sk-1"], ["--ap=***"], ["sk-1"], [],
     [("--ap=***", None, "ambiguous option: --ap could match --api-key, --api-server-count", False)]),
    # a refused name that is not a secret's: its next word is an ordinary positional, shown as written
    (["--bogus", "plain"], ["--bogus", "plain"], [], [], [("--bogus", None, "unrecognized arguments: --bogus", True)]),
    # a secret option without its value: nothing to mask, the option after it is read as an option
    (["--api-key"], ["--api-key"], [], [], [("--api-key", None, "argument --api-key: expected one argument", False)]),
    (["--api-key", "--max-model-len", "5"], ["--api-key", "--max-model-len", "5"], [], [("--max-model-len", "5")],
     [("--api-key", None, "argument --api-key: expected one argument", False)]),
])
def test_vllm_command_lines_mask_every_secret(tokens, shown, secrets, occurrences, problems) -> None:
    assert _read(VLLM, tokens) == (shown, secrets, occurrences, problems)


@pytest.mark.parametrize("tokens, shown, secrets, occurrences, problems", [
    (["-hft", "hf_abc", "-c", "4096"], ["-hft", "***", "-c", "4096"], ["hf_abc"], [("-hft", "***"), ("-c", "4096")],
     []),
    (["--hf_token", "x"], ["--hf_token", "***"], ["x"], [("--hf_token", "***")], []),
    # llama.cpp resolves no abbreviation: a refused prefix of a secret option of 4 characters or more masks the
    # next word (llama.cpp would have read it as the value), a shorter one does not
    (["--api", "sk-1"], ["--api", "***"], ["sk-1"], [],
     [("--api", None, "error: invalid argument: --api", True), ("***", None, "error: invalid argument: ***", True)]),
    (["--ap", "sk-1"], ["--ap", "***"], ["sk-1"], [],
     [("--ap", None, "error: invalid argument: --ap", True), ("***", None, "error: invalid argument: ***", True)]),
    (["--a", "sk-1"], ["--a", "sk-1"], [], [],
     [("--a", None, "error: invalid argument: --a", True), ("sk-1", None, "error: invalid argument: sk-1", True)]),
    (["--api-key=sk-9"], ["--api-key=***"], ["sk-9"], [],
     [("--api-key=***", None, "error: invalid argument: --api-key=***", True)]),
])
def test_llama_cpp_command_lines_mask_every_secret(tokens, shown, secrets, occurrences, problems) -> None:
    assert _read(LLAMA, tokens, "server") == (shown, secrets, occurrences, problems)


def test_a_command_line_of_exactly_max_tokens_is_read_one_word_more_is_refused() -> None:
    assert MAX_TOKENS == 4096
    words = ["--max-model-len", "4096"] * (MAX_TOKENS // 2)
    assert len(read_argv(VLLM, words).occurrences) == MAX_TOKENS // 2
    with pytest.raises(InputError) as exc:
        read_argv(VLLM, [*words, "--enforce-eager"])
    assert str(exc.value).startswith("the engine command has 4097 words; qcheck reads at most 4096")


@pytest.mark.parametrize("spec, secret", [
    (FlagSpec(("--api-key",), "api_key", "value", type="str"), True),
    (FlagSpec(("--api-key",), "api_key", "value"), True),  # no converter named: a string
    (FlagSpec(("--api-key-count",), "api_key_count", "value", type="int"), False),  # a number is never a secret
    (FlagSpec(("--use-hf-token",), "use_hf_token", "switch", nargs="0"), False),  # a switch has no value
    (FlagSpec(("-k",), "opaque", "value", env="LLAMA_API_KEY"), True),  # said by its environment variable
    (FlagSpec(("-k",), "hf_token", "value"), True),  # said by its destination
    (FlagSpec(("--model",), "model", "value", type="str"), False),
])
def test_secret_options_are_value_options_named_as_secrets(spec: FlagSpec, secret: bool) -> None:
    assert secret_option(spec) is secret


@pytest.mark.parametrize("table, tokens, shown, positionals, occurrences, problems", [
    # argparse (vLLM): one positional, a short option with its value attached, abbreviations, '--'
    ("vllm", ["./m", "extra"], ["./m", "extra"], ["./m"], [], [("extra", None, "unrecognized arguments: extra", False)]),
    ("vllm", ["./m", "-qfp8"], ["./m", "-qfp8"], ["./m"], [("-qfp8", "quantization", "fp8", False)], []),
    ("vllm", ["./m", "-q", "fp8"], ["./m", "-q", "fp8"], ["./m"], [("-q", "quantization", "fp8", False)], []),
    ("vllm", ["./m", "-tp2"], ["./m", "-tp2"], ["./m"], [], [("-tp2", None, "unrecognized arguments: -tp2", True)]),
    ("vllm", ["./m", "--max-model-l", "5"], ["./m", "--max-model-l", "5"], ["./m"],
     [("--max-model-l", "max_model_len", "5", False)], []),
    ("vllm", ["./m", "--max-num", "5"], ["./m", "--max-num", "5"], ["./m"], [],
     [("--max-num", None, "ambiguous option: --max-num could match --max-num-active-seqs, --max-num-batched-tokens, "
       "--max-num-inflight-kv-loads, --max-num-queued-reqs, --max-num-queued-tokens, --max-num-scheduled-tokens, "
       "--max-num-seqs", False), ("5", None, "unrecognized arguments: 5", False)]),
    ("vllm", ["./m", "--", "--x"], ["./m", "--", "--x"], ["./m"], [],
     [("--x", None, "unrecognized arguments: --x", False)]),
    ("vllm", ["./m", "--enforce-eager=1"], ["./m", "--enforce-eager=1"], ["./m"], [],
     [("--enforce-eager=1", "1", "argument --enforce-eager: ignored explicit argument '1'", False)]),
    ("vllm", ["./m", "--max-model-len"], ["./m", "--max-model-len"], ["./m"], [],
     [("--max-model-len", None, "argument --max-model-len: expected one argument", False)]),
    # click (trtllm-serve)
    ("trtllm-serve", ["./m", "extra"], ["./m", "extra"], ["./m"], [],
     [("extra", None, "Got unexpected extra argument (extra)", False)]),
    ("trtllm-serve", ["./m", "--tp_size", "2", "--max_seq_len"], ["./m", "--tp_size", "2", "--max_seq_len"], ["./m"],
     [("--tp_size", "tensor_parallel_size", "2", False)],
     [("--max_seq_len", None, "Option '--max_seq_len' requires an argument.", False)]),
    # cobra/pflag (ollama run): booleans only as --flag=value, an optional value only with '='
    ("ollama-run", ["llama3", "--verbose=false", "--insecure=yes", "--think", "--keepalive", "5m"],
     ["llama3", "--verbose=false", "--insecure=yes", "--think", "--keepalive", "5m"], ["llama3"],
     [("--verbose=false", "verbose", "false", True), ("--think", "think", None, False),
      ("--keepalive", "keepalive", "5m", False)],
     [("--insecure=yes", "yes", "invalid argument \"yes\" for \"--insecure\" flag: strconv.ParseBool: parsing 'yes': "
       "invalid syntax", False)]),
    ("ollama-run", ["llama3", "--verbose=true", "--keepalive"], ["llama3", "--verbose=true", "--keepalive"], ["llama3"],
     [("--verbose=true", "verbose", "true", False)], [("--keepalive", None, "flag needs an argument: --keepalive", False)]),
    ("ollama-run", ["llama3", "-x"], ["llama3", "-x"], ["llama3"], [],
     [("-x", None, "unknown shorthand flag: 'x' in -x", True)]),
    ("ollama-run", ["llama3", "--think=high"], ["llama3", "--think=high"], ["llama3"],
     [("--think=high", "think", "high", False)], []),
    # commander (lms load): -cVALUE, too many arguments
    ("lms-load", ["m", "-c4096", "-y", "extra"], ["m", "-c4096", "-y", "extra"], ["m"],
     [("-c4096", "context_length", "4096", False), ("-y", "yes", None, False)],
     [("extra", None, "error: too many arguments. Expected 1 argument but got more.", False)]),
    ("lms-load", ["m", "-c", "4096", "--gpu=max"], ["m", "-c", "4096", "--gpu=max"], ["m"],
     [("-c", "context_length", "4096", False), ("--gpu=max", "gpu", "max", False)], []),
    ("lms-load", ["m", "-q"], ["m", "-q"], ["m"], [], [("-q", None, "error: unknown option '-q'", True)]),
    ("lms-load", ["m", "--context-length"], ["m", "--context-length"], ["m"], [],
     [("--context-length", None, "error: option '--context-length/-c' argument missing", False)]),
])
def test_each_parser_convention_reads_options_values_and_positionals_as_the_engine_does(
        table, tokens, shown, positionals, occurrences, problems) -> None:
    parsed = read_argv(flag_table(table), tokens)
    assert (parsed.shown, parsed.positionals) == (shown, positionals)
    assert [(o.written, o.spec.dest, o.value, o.negative) for o in parsed.occurrences] == occurrences
    assert [(p.flag, p.value, p.message, p.unknown_flag) for p in parsed.problems] == problems


@pytest.mark.parametrize("table, tokens, program, shown, secrets", [
    # a secret written a second time, after or before its option, as another option's value or a positional
    ("vllm", ["--api-keyz=sk-12345", "--bogus", "sk-12345"], None, ["--api-keyz=***", "--bogus", "***"], ["sk-12345"]),
    ("vllm", ["--api-key", "sk-12345", "--bogus=sk-12345"], None, ["--api-key", "***", "--bogus=***"], ["sk-12345"]),
    ("vllm", ["--served-model-name", "sk-12345", "--api-key", "sk-12345"], None,
     ["--served-model-name", "***", "--api-key", "***"], ["sk-12345"]),
    # nothing to mask: an empty value after '=', a refused secret-like name at the end or before an option
    ("vllm", ["--api-keyz="], None, ["--api-keyz="], []),
    ("vllm", ["--api-keyz"], None, ["--api-keyz"], []),
    ("vllm", ["--api-keyz", "--max-model-len", "5"], None, ["--api-keyz", "--max-model-len", "5"], []),
    # llama.cpp takes the next word as the value whatever it looks like
    ("llama.cpp", ["--api", "-c", "4096"], "server", ["--api", "***", "4096"], ["-c"]),
])
def test_every_shown_word_that_holds_a_secret_is_masked(table, tokens, program, shown, secrets) -> None:
    parsed = read_argv(flag_table(table), tokens, program)
    assert (parsed.shown, parsed.secrets) == (shown, secrets)
    assert not any(s in " ".join(parsed.shown) for s in parsed.secrets if len(s) >= 4)
