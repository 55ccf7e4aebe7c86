"""The one GGUF view of the model keys: per-layer arrays, and hostile values (a string, a float, a huge
array, an out-of-range number where a count belongs) read as absent with one warning, in the view, the
classifier, the memory estimate and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf import GGUFValueType

from qcheck.classify.gguf import classify_gguf
from qcheck.cli import main
from qcheck.model_shape import layout_from_gguf
from qcheck.readers.gguf import load_gguf
from qcheck.readers.gguf_meta import MAX_COUNT, model_keys
from qcheck.source import LocalFileSet
from support.gguf_helpers import Q, write_gguf

TENSORS = [("blk.0.attn_q.weight", (256, 256), Q.Q8_0), ("blk.1.attn_q.weight", (256, 256), Q.Q8_0)]
BASE = {"llama.embedding_length": (GGUFValueType.UINT32, 256), "llama.attention.head_count": (GGUFValueType.UINT32, 8)}


def _load(tmp_path: Path, kv: dict, arch: str = "llama"):
    [path] = write_gguf(tmp_path / "m.gguf", TENSORS, arch=arch, kv=kv, file_type=7)
    return path, load_gguf(LocalFileSet(tmp_path), path.name)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def test_per_layer_head_counts_give_the_largest_and_keep_the_layers(tmp_path):
    kv = {**BASE, "llama.attention.head_count_kv": (GGUFValueType.ARRAY, [0, 4])}
    _, ckpt = _load(tmp_path, kv)
    keys = model_keys(ckpt.metadata)
    assert (keys.architecture, keys.block_count, keys.embedding_length, keys.head_count) == ("llama", 2, 256, 8)
    assert (keys.head_count_kv, keys.head_count_kv_per_layer, keys.warnings) == (4, (0, 4), [])
    insp = classify_gguf(ckpt)
    assert (insp.num_layers, insp.num_attention_heads, insp.num_kv_heads, insp.head_dim) == (2, 8, 4, 32)
    lay = layout_from_gguf(ckpt.metadata)
    assert (lay.per_layer_kv_heads, lay.kv_heads, lay.k_dim, lay.v_dim, lay.full_layers) == ([0, 4], 4, 32, 32, 2)
    assert lay.elements_per_token_layer() == 2 * 64  # mean of 0 and 4 KV heads x (32 + 32)


def test_a_per_layer_array_of_the_wrong_length_is_used_with_a_warning(tmp_path):
    _, ckpt = _load(tmp_path, {**BASE, "llama.attention.head_count_kv": (GGUFValueType.ARRAY, [2, 2, 2])})
    keys = model_keys(ckpt.metadata)
    assert keys.head_count_kv == 2
    assert keys.warnings == ["GGUF key llama.attention.head_count_kv: 3 per-layer values for 2 layers"]
    assert keys.warnings[0] in classify_gguf(ckpt).warnings


@pytest.mark.parametrize(("key", "value", "attr", "shown"), [
    ("llama.attention.head_count", (GGUFValueType.STRING, "32"), "head_count", "a string ('32')"),
    ("llama.attention.head_count", (GGUFValueType.ARRAY, ["a", "b"]), "head_count", "an array of 2 values"),
    ("llama.attention.head_count_kv", (GGUFValueType.FLOAT32, 8.0), "head_count_kv", "a float (8)"),
    ("llama.attention.head_count_kv", (GGUFValueType.ARRAY, list(range(2000))), "head_count_kv",
     "an array of 2000 values"),
    ("llama.attention.head_count_kv", (GGUFValueType.INT32, -1), "head_count_kv", "-1"),
    ("llama.attention.head_count_kv", (GGUFValueType.ARRAY, [[1], [2]]), "head_count_kv", "an array of 2 values"),
    ("llama.expert_count", (GGUFValueType.UINT64, 2**40), "expert_count", str(2**40)),
    ("llama.attention.key_length", (GGUFValueType.BOOL, True), "key_length", "a boolean (True)"),
    ("llama.attention.sliding_window", (GGUFValueType.STRING, "x" * 5000), "sliding_window",
     "a string ('" + "x" * 40 + "'...)"),
])
def test_a_wrong_value_where_a_count_belongs_is_ignored_with_one_warning(tmp_path, capsys, key, value, attr, shown):
    path, ckpt = _load(tmp_path, {**BASE, key: value})
    keys = model_keys(ckpt.metadata)
    assert getattr(keys, attr) is None
    [warning] = keys.warnings
    assert warning.startswith(f"GGUF key {key}: expected an integer") and f"got {shown}; ignored" in warning
    assert "\n" not in warning and len(warning) < 200
    assert warning in classify_gguf(ckpt).warnings
    layout_from_gguf(ckpt.metadata)  # the memory estimate reads the same view: no crash
    code, out, err = run(capsys, "inspect", str(path), "--json")
    data = json.loads(out)
    assert (code, err) == (0, "") and warning in data["warnings"]
    code, out, err = run(capsys, "check", str(path), "-e", "llama.cpp", "-g", "rtx-4090", "--context", "1024", "--json")
    data = json.loads(out)
    assert code in (0, 1) and err == "" and data["verdicts"][0]["memory"]["context"] == 1024


def test_bounds_are_inclusive_and_zero_is_kept(tmp_path):
    kv = {**BASE, "llama.expert_count": (GGUFValueType.UINT32, MAX_COUNT), "llama.expert_used_count":
          (GGUFValueType.UINT32, 0)}
    _, ckpt = _load(tmp_path, kv)
    keys = model_keys(ckpt.metadata)
    assert (keys.expert_count, keys.expert_used_count, keys.warnings) == (MAX_COUNT, 0, [])


def test_vocab_size_falls_back_to_the_token_list_with_or_without_an_architecture(tmp_path):
    [path] = write_gguf(tmp_path / "v.gguf", TENSORS, vocab=300)
    ckpt = load_gguf(LocalFileSet(tmp_path), path.name)
    assert model_keys(ckpt.metadata).vocab_size == 300
    del ckpt.metadata["general.architecture"]
    keys = model_keys(ckpt.metadata)
    assert (keys.architecture, keys.vocab_size, keys.block_count) == (None, 300, None)
    insp = classify_gguf(ckpt)
    assert insp.vocab_size == 300 and "GGUF file has no general.architecture key" in insp.warnings


def test_keys_of_another_architecture_are_read_under_its_prefix(tmp_path):
    kv = {"qwen3moe.attention.head_count": (GGUFValueType.UINT32, 4), "qwen3moe.expert_count":
          (GGUFValueType.UINT32, 8), "qwen3moe.expert_used_count": (GGUFValueType.UINT32, 2),
          "llama.attention.head_count": (GGUFValueType.STRING, "ignored: another prefix")}
    _, ckpt = _load(tmp_path, kv, arch="qwen3moe")
    keys = model_keys(ckpt.metadata)
    assert (keys.architecture, keys.head_count, keys.expert_count, keys.expert_used_count) == ("qwen3moe", 4, 8, 2)
    assert keys.warnings == []
    insp = classify_gguf(ckpt)
    assert insp.moe and (insp.num_experts, insp.num_experts_used) == (8, 2)
