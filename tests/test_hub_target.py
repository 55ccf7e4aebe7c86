"""Parsing Hub targets and choosing a repo's files: pure functions, no network."""

from __future__ import annotations

import pytest

from qcheck.errors import UsageError
from qcheck.hub import looks_like_repo_id, parse_target
from qcheck.hub.errors import NotFoundError, redact
from qcheck.hub.select import AmbiguousTargetError, gguf_choices, is_projector, pick, quant_label


@pytest.mark.parametrize(("text", "repo", "rev", "sel"), [
    ("unsloth/Qwen3-8B-GGUF", "unsloth/Qwen3-8B-GGUF", None, None),
    ("unsloth/Qwen3-8B-GGUF:Q4_K_M", "unsloth/Qwen3-8B-GGUF", None, "Q4_K_M"),
    ("org/name@v1.0:model-Q8_0.gguf", "org/name", "v1.0", "model-Q8_0.gguf"),
    ("org/name@refs/pr/3", "org/name", "refs/pr/3", None),
    ("nvidia/Llama-3.3-70B-Instruct-FP4", "nvidia/Llama-3.3-70B-Instruct-FP4", None, None),
    ("https://huggingface.co/org/name", "org/name", None, None),
    ("https://huggingface.co/org/name/blob/main/sub/x-Q4_0.gguf", "org/name", "main", "sub/x-Q4_0.gguf"),
    ("hf://org/name@abc:Q4_K_M", "org/name", "abc", "Q4_K_M"),
    ("hf.co/org/name:IQ4_XS", "org/name", None, "IQ4_XS"),
])
def test_parse_target_accepts_the_documented_forms(text, repo, rev, sel):
    t = parse_target(text)
    assert (t.repo_id, t.revision, t.selector) == (repo, rev, sel)
    assert looks_like_repo_id(text)


@pytest.mark.parametrize("text", ["model.gguf", "a/b/c", "org/../x", "org/na--me", "/abs/path", "org/name:../x",
                                  "org/name:", "-org/name", "org/" + "n" * 100])
def test_parse_target_rejects_what_is_not_a_repo_id(text):
    with pytest.raises(UsageError):
        parse_target(text)
    assert not looks_like_repo_id(text)


def test_selector_kind():
    assert parse_target("o/n:x.gguf").is_file
    assert not parse_target("o/n:Q4_K_M").is_file
    assert parse_target("o/n@r:f.gguf").display() == "o/n@r:f.gguf"


FILES = {
    "README.md": 10,
    "Qwen3-8B-Q4_K_M.gguf": 5_000_000_000,
    "Qwen3-8B-Q4_K_S.gguf": 4_700_000_000,
    "Qwen3-8B-Q4_K.gguf": 4_800_000_000,
    "Qwen3-8B-UD-Q4_K_XL.gguf": 5_100_000_000,
    "mmproj-F16.gguf": 600_000_000,
    "BF16/Qwen3-8B-BF16-00001-of-00002.gguf": 9_000_000_000,
    "BF16/Qwen3-8B-BF16-00002-of-00002.gguf": 7_000_000_000,
}


def test_gguf_choices_group_split_shards_and_leave_out_projectors():
    choices = gguf_choices(FILES)
    labels = sorted(c.label for c in choices)
    assert labels == ["BF16", "Q4_K", "Q4_K_M", "Q4_K_S", "UD-Q4_K_XL"]
    bf16 = next(c for c in choices if c.label == "BF16")
    assert bf16.names == ("BF16/Qwen3-8B-BF16-00001-of-00002.gguf", "BF16/Qwen3-8B-BF16-00002-of-00002.gguf")
    assert bf16.size == 16_000_000_000
    assert is_projector("mmproj-F16.gguf") and is_projector("sub/model-mmproj-f16.gguf")
    assert quant_label("x/Model-IQ4_XS-00001-of-00003.gguf") == "IQ4_XS"
    assert quant_label("model.gguf") is None


@pytest.mark.parametrize(("selector", "expected"), [
    ("Q4_K_M", ["Qwen3-8B-Q4_K_M.gguf"]),
    ("q4_k_m", ["Qwen3-8B-Q4_K_M.gguf"]),
    ("Q4_K", ["Qwen3-8B-Q4_K.gguf"]),  # whole-part match: not Q4_K_M / Q4_K_S
    ("UD-Q4_K_XL", ["Qwen3-8B-UD-Q4_K_XL.gguf"]),
    ("Q4_K_XL", ["Qwen3-8B-UD-Q4_K_XL.gguf"]),
    ("bf16", ["BF16/Qwen3-8B-BF16-00001-of-00002.gguf", "BF16/Qwen3-8B-BF16-00002-of-00002.gguf"]),
    ("BF16/Qwen3-8B-BF16-00002-of-00002.gguf",
     ["BF16/Qwen3-8B-BF16-00001-of-00002.gguf", "BF16/Qwen3-8B-BF16-00002-of-00002.gguf"]),
    ("mmproj-F16.gguf", ["mmproj-F16.gguf"]),
])
def test_pick_by_quant_or_file(selector, expected):
    assert pick(FILES, selector, "o/n") == [expected]


def test_pick_without_selector_lists_every_quant():
    with pytest.raises(AmbiguousTargetError) as exc:
        pick(FILES, None, "unsloth/Qwen3-8B-GGUF")
    msg = str(exc.value)
    assert "holds 5 GGUF models" in msg
    for label in ("Q4_K_M (5.0 GB)", "Q4_K_S", "UD-Q4_K_XL", "BF16 (16.0 GB)"):
        assert label in msg
    assert "pick one with unsloth/Qwen3-8B-GGUF:" in msg
    assert len(pick(FILES, None, "o/n", all_models=True)) == 5


def test_pick_errors_name_what_exists():
    with pytest.raises(NotFoundError, match=r"no GGUF quant 'Q3_K_M' in o/n; its GGUF files: .*Q4_K_M"):
        pick(FILES, "Q3_K_M", "o/n")
    with pytest.raises(NotFoundError, match=r"file 'qwen3-8b-q4_k_m.gguf' not found in o/n; did you mean "
                                            r"Qwen3-8B-Q4_K_M.gguf"):
        pick(FILES, "qwen3-8b-q4_k_m.gguf", "o/n")
    with pytest.raises(AmbiguousTargetError, match="matches 3 GGUF models"):
        pick({"a-Q4_0.gguf": 1, "b-Q4_0.gguf": 1, "c-Q4_0.gguf": 1}, "q4_0", "o/n")
    with pytest.raises(NotFoundError, match="no GGUF, safetensors or PyTorch"):
        pick({"README.md": 1}, None, "o/n")


def test_pick_prefers_the_safetensors_model_and_single_gguf():
    assert pick({"config.json": 1, "model.safetensors": 2, "x-Q4_0.gguf": 3}, None, "o/n") == [None]
    assert pick({"x-Q4_0.gguf": 3, "mmproj-x.gguf": 1}, None, "o/n") == [["x-Q4_0.gguf"]]
    assert pick({"pytorch_model.bin": 3}, None, "o/n") == [None]
    with pytest.raises(AmbiguousTargetError, match="sub-folders"):
        pick({"transformer/model.safetensors": 1}, None, "o/n")


def test_redact_removes_tokens_in_every_shape():
    text = "Authorization: Bearer hf_abcdefghijklmnop and api_org_ABCDEFGHIJKL and secret-xyz"
    out = redact(text, "secret-xyz")
    assert "hf_abcdefghijklmnop" not in out and "api_org_ABCDEFGHIJKL" not in out and "secret-xyz" not in out
    assert out.count("***") >= 3
