"""The typed boundary (issue #17, item 7): numbers and strings from config.json, index files, GGUF metadata
and Hub listings are checked before qcheck computes with them.

Properties, fuzzed with hypothesis: for any value in any of these places, ``check`` with the memory estimate
returns a result or raises qcheck's own error (one ``qcheck: error:`` line, exit 2); any other exception is a
failure. The named reproducers of the red team are plain tests beside the fuzzers.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from gguf.constants import GGMLQuantizationType as Q
from gguf.constants import GGUFValueType as V
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qcheck.errors import QcheckError
from qcheck.limits import Limits
from qcheck.pipeline import run
from qcheck.request import CheckRequest, Deploy
from qcheck.typed import as_float, as_int, as_str, pos_ints
from support import builders as b
from support.gguf_helpers import write_gguf

TEST_MATRIX = Path(__file__).parent / "data" / "matrices"
HOSTILE_SCALARS = st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, -1, 0, 2**70, 2**53 + 1, 1.5,
                                   "12", "x", "", "\u202e", True, False, None])
JSON_VALUES = st.recursive(
    HOSTILE_SCALARS | st.integers(-2**64, 2**64) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=10,
)
CONFIG_KEYS = ["hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "intermediate_size",
               "vocab_size", "max_position_embeddings", "head_dim", "sliding_window", "sliding_window_pattern",
               "kv_lora_rank", "qk_rope_head_dim", "layer_types", "multi_query", "torch_dtype", "architectures",
               "model_type", "tie_word_embeddings", "num_local_experts", "use_sliding_window", "text_config",
               "quantization_config"]
QUANT_CONFIGS = st.fixed_dictionaries(
    {"quant_method": st.sampled_from(["gptq", "awq", "fp8", "compressed-tensors", "modelopt", "bitsandbytes",
                                      "mxfp4", "exl2"]) | JSON_VALUES},
    optional={"bits": JSON_VALUES, "group_size": JSON_VALUES, "meta": JSON_VALUES,
              "weight_block_size": JSON_VALUES, "config_groups": JSON_VALUES, "quant_algo": JSON_VALUES})


def _judge(path: Path, limits: Limits | None = None) -> None:
    try:
        run(CheckRequest(str(path), ("fastserve",), ("a100",), Deploy(context=4096), memory=True,
                         **({"limits": limits} if limits else {})))
    except QcheckError:
        pass


@pytest.fixture(autouse=True)
def _matrix(monkeypatch) -> None:
    monkeypatch.setenv("QCHECK_MATRICES", str(TEST_MATRIX))


# ------------------------------------------------------------------------------------- the helpers
def test_typed_helpers_refuse_what_is_not_a_number() -> None:
    for bad in (math.nan, math.inf, -math.inf, 1e308, True, "x", [4], {"a": 4}, None, 1.5, "9" * 30, 2**60):
        assert as_int(bad) is None, bad
    assert [as_int(4), as_int(4.0), as_int(" 4 "), as_int(-3)] == [4, 4, 4, -3]
    assert as_float(math.nan) is None and as_float(10**400) is None and as_float(2.5) == 2.5
    assert pos_ints(["8", 8]) == [8, 8] and pos_ints(["x", 8]) is None and pos_ints([]) is None
    assert as_str(["GPTQModel", "4.0"]) == "GPTQModel 4.0" and as_str([1, 2]) is None and as_str(5) is None


# ------------------------------------------------------------------------------- named reproducers
@pytest.mark.parametrize("value", [math.nan, math.inf, 1e308, "4096", [4096], {"a": 1}])
@pytest.mark.parametrize("key", ["hidden_size", "max_position_embeddings", "vocab_size", "num_hidden_layers"])
def test_config_numbers_that_are_not_numbers(key: str, value, tmp_path: Path) -> None:
    path = b.bf16_llama().write(tmp_path / "m")
    config = json.loads((path / "config.json").read_text())
    config[key] = value
    (path / "config.json").write_text(json.dumps(config))  # NaN/Infinity as Python writes them
    result = run(CheckRequest(str(path), ("fastserve",), ("a100",), Deploy(context=4096), memory=True))
    assert result.verdicts and result.verdicts[0].memory is not None


@pytest.mark.parametrize("total", [math.nan, math.inf, 1e308, "123", [1], -5])
def test_index_total_size_that_is_not_a_byte_count(total, tmp_path: Path) -> None:
    path = b.bf16_llama().write_sharded(tmp_path / "m")
    index = json.loads((path / "model.safetensors.index.json").read_text())
    index["metadata"]["total_size"] = total
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    result = run(CheckRequest(str(path), ("fastserve",), ("a100",), memory=True))
    assert any("total_size is not a byte count" in w for w in result.inspection.warnings)


@pytest.mark.parametrize("quantizer", [["gptqmodel", 4], 5, {"x": 1}, [[["deep"]]]])
def test_gptq_quantizer_that_is_not_a_string(quantizer, tmp_path: Path) -> None:
    fx = b.gptq_fixture()
    fx.configs["config.json"]["quantization_config"]["meta"] = {"quantizer": quantizer}
    result = run(CheckRequest(str(fx.write(tmp_path / "m")), ("fastserve",), ("a100",), memory=True))
    assert result.inspection.quantization.method == "gptq"


def test_gguf_head_count_string_array(tmp_path: Path) -> None:
    [path] = write_gguf(tmp_path / "m.gguf", [("token_embd.weight", (64, 32), Q.F16),
                                              ("blk.0.attn_q.weight", (32, 32), Q.F16)],
                        kv={"llama.attention.head_count": (V.ARRAY, ["4", "x"]), "llama.block_count": 1,
                            "llama.embedding_length": 32})
    result = run(CheckRequest(str(path), ("tinycpp",), ("cpu",), Deploy(context=512), memory=True))
    assert result.verdicts[0].memory is not None


# -------------------------------------------------------------------------------------- the fuzzers
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.sampled_from(CONFIG_KEYS), JSON_VALUES | QUANT_CONFIGS), min_size=1, max_size=5))
def test_config_json_fuzz(edits, tmp_path_factory) -> None:
    path = b.bf16_llama().write(tmp_path_factory.mktemp("cfg"))
    config = json.loads((path / "config.json").read_text())
    for key, value in edits:
        config[key] = value
    (path / "config.json").write_text(json.dumps(config))
    _judge(path)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(metadata=JSON_VALUES, weight_map_edit=st.one_of(st.none(), JSON_VALUES),
       top=st.dictionaries(st.sampled_from(["metadata", "weight_map", "extra"]), JSON_VALUES, max_size=2))
def test_index_file_fuzz(metadata, weight_map_edit, top, tmp_path_factory) -> None:
    path = b.bf16_llama().write_sharded(tmp_path_factory.mktemp("idx"))
    index = json.loads((path / "model.safetensors.index.json").read_text())
    index["metadata"] = metadata
    if weight_map_edit is not None:
        first = next(iter(index["weight_map"]))
        index["weight_map"][first] = weight_map_edit
    index.update(top)
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    _judge(path)


SIBLING = st.fixed_dictionaries({"rfilename": st.sampled_from(["model.safetensors", "config.json"]) | JSON_VALUES},
                                optional={"size": JSON_VALUES, "lfs": JSON_VALUES})


@settings(max_examples=150, deadline=None)
@given(listing=st.one_of(
    JSON_VALUES,
    st.fixed_dictionaries({"id": JSON_VALUES, "sha": st.just("a" * 40) | JSON_VALUES},
                          optional={"siblings": st.lists(SIBLING, max_size=4) | JSON_VALUES})))
def test_hub_listing_fuzz(listing) -> None:
    from qcheck.hub.fileset import _parse_listing

    try:
        body = json.dumps(listing).encode()
    except ValueError:
        return
    try:
        sha, files = _parse_listing(body, "org/x (repo info)", None, Limits())
    except QcheckError:
        return
    assert isinstance(sha, str) and all(isinstance(n, str) and (s is None or s >= 0) for n, s in files)


def test_deeply_nested_hub_listing_is_one_error() -> None:
    from qcheck.hub.fileset import _parse_listing

    body = b'{"id": "x", "sha": "' + b"a" * 40 + b'", "siblings": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(QcheckError, match="not model info"):
        _parse_listing(body, "org/x (repo info)", None, Limits())
