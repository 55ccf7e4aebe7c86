"""``TensorMap``: the safetensors reader's tensors held as columns, records built on demand.

It must be indistinguishable from the dict of records the per-entry loop builds (same names in the same order,
equal records, the same answers from the classifier's table), behave as a dict on every read and write, and
survive the merge of shards. References are the eager paths: the reader with its column and compact paths off.
"""

from __future__ import annotations

import random

import pytest

from qcheck.classify import classify, type_stats
from qcheck.classify.table import TensorTable
from qcheck.model import Checkpoint, TensorColumns, TensorInfo, TensorMap, join_tensors, tensor_columns
from qcheck.readers import load_checkpoint
from qcheck.readers import safetensors as st
from support import builders as b


def _eager(monkeypatch):
    """The reader as it was: every record built by the per-entry loop into a dict."""
    monkeypatch.setattr(st, "_compact_header", lambda *a, **k: None)
    monkeypatch.setattr(st, "_plain_entries", lambda *a, **k: None)


def _varied(rng: random.Random) -> b.Fixture:
    """Several dtypes and ranks (scalars, empty tensors), names with spaces and non-ASCII, optional metadata."""
    tensors: dict = {}
    for i in range(rng.randint(1, 40)):
        dtype = rng.choice(["BF16", "F16", "F32", "U8", "I64", "F8_E4M3", "BOOL", "I32"])
        shape = tuple(rng.choice([0, 1, 3, 8]) for _ in range(rng.randint(0, 3)))
        tensors[f"{rng.choice(['model.layers.0.', 'é ', 'x'])}{i}.weight"] = (dtype, shape)
    return b.Fixture(tensors, metadata=rng.choice([None, {"format": "pt"}, {"format": "pt", "q": 'a"b'}]))


def _records(tensors) -> list[tuple]:
    return [(k, v.name, v.dtype, v.shape, v.nbytes, v.offset, v.file) for k, v in tensors.items()]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("shards", [1, 3])
def test_the_lazy_tensors_equal_the_eager_ones(seed, shards, tmp_path, monkeypatch):
    rng = random.Random(seed)
    fixture = _varied(rng)
    fixture.configs = {"config.json": b.llama_config()}
    path = fixture.write_sharded(tmp_path / "m", shards) if shards > 1 else fixture.write(tmp_path / "m")
    lazy = load_checkpoint(str(path))
    assert isinstance(lazy.tensors, TensorMap) and tensor_columns(lazy.tensors) is not None
    _eager(monkeypatch)
    eager = load_checkpoint(str(path))
    monkeypatch.undo()
    assert type(eager.tensors) is dict
    assert list(lazy.tensors) == list(eager.tensors) == list(fixture.tensors)
    name = rng.choice(list(fixture.tensors))
    assert lazy.tensors[name] == eager.tensors[name] and lazy.tensors[name] is lazy.tensors[name]
    assert _records(lazy.tensors) == _records(eager.tensors) and lazy.tensors == eager.tensors
    assert lazy.warnings == eager.warnings and lazy.metadata == eager.metadata
    # the classifier reads the columns: the same inspection either way
    lazy = load_checkpoint(str(path))
    assert classify(lazy).to_json() == classify(eager).to_json()
    assert tensor_columns(lazy.tensors) is not None  # classifying built no write


@pytest.mark.parametrize("seed", range(4))
def test_the_table_from_columns_equals_the_table_from_records(seed):
    rng = random.Random(seed)
    fixture = _varied(rng)
    records = fixture.checkpoint().tensors
    infos = list(records.values())
    lazy = TensorMap(TensorColumns([i.name for i in infos], [i.dtype for i in infos], [i.shape for i in infos],
                                   [i.nbytes for i in infos], [i.offset for i in infos], [i.file for i in infos]))
    a, c = TensorTable(lazy), TensorTable(records)
    for column in ("names", "dtypes", "upper", "shapes", "ndims", "numels", "side"):
        assert getattr(a, column) == getattr(c, column), column
    assert a.nbytes() == c.nbytes() and a.infos == c.infos and a.keys() == c.keys()
    ck_lazy = Checkpoint(path="x", container="safetensors", tensors=lazy)
    ck_records = Checkpoint(path="x", container="safetensors", tensors=records)
    assert type_stats(ck_lazy, TensorTable(lazy)) == type_stats(ck_records, TensorTable(records))


def _small() -> TensorMap:
    return TensorMap(TensorColumns(["a", "b", "c"], ["F16", "U8", "F32"], [(2,), (), (1, 3)], [4, 1, 12],
                                   [8, 12, 13], ["f", "f", "g"]))


def test_reads_behave_as_a_dict_and_build_only_what_is_asked():
    m = _small()
    assert len(m) == 3 and list(m) == ["a", "b", "c"] and "b" in m and "z" not in m and m.get("z") is None
    b_record = m["b"]
    assert b_record == TensorInfo("b", "U8", (), 1, 12, "f") and m._records == {"b": b_record}
    with pytest.raises(KeyError):
        m["z"]
    assert list(m.keys()) == ["a", "b", "c"] and m.columns is not None
    values = list(m.values())  # every record, in order, the one already handed out kept
    assert [v.name for v in values] == ["a", "b", "c"] and values[1] is b_record
    assert dict(m.items()) == {"a": values[0], "b": b_record, "c": values[2]} and m["c"] is values[2]
    assert m == {"a": values[0], "b": b_record, "c": values[2]} and m.columns is not None
    assert "TensorInfo(name='a'" in repr(m)


@pytest.mark.parametrize("write", ["set-new", "set-old", "delete", "pop", "update", "clear"])
def test_a_write_turns_it_into_a_dict_without_columns(write):
    m, d = _small(), dict(_small().items())
    extra = TensorInfo("d", "F16", (1,), 2, 0, "h")
    for target in (m, d):
        if write == "set-new":
            target["d"] = extra
        elif write == "set-old":
            target["b"] = extra
        elif write == "delete":
            del target["a"]
        elif write == "pop":
            assert target.pop("c").name == "c"
        elif write == "update":
            target.update({"d": extra, "a": extra})
        else:
            target.clear()
    assert m.columns is None and tensor_columns(m) is None
    assert list(m) == list(d) and list(m.items()) == list(d.items()) and len(m) == len(d)
    assert TensorTable(m).names == list(d)


def test_shards_are_joined_as_columns_only_when_every_one_has_them():
    one, two = _small(), TensorMap(TensorColumns(["x"], ["BF16"], [(4,)], [8], [100], ["s2"]))
    joined = join_tensors([one, two])
    assert isinstance(joined, TensorMap) and joined.columns is not None
    assert list(joined) == ["a", "b", "c", "x"] and joined["x"] == TensorInfo("x", "BF16", (4,), 8, 100, "s2")
    assert join_tensors([one]) is one
    plain = {"y": TensorInfo("y", "Q9", (3,), None, 50, "s3")}
    mixed = join_tensors([_small(), plain])
    assert type(mixed) is dict and list(mixed) == ["a", "b", "c", "y"] and mixed["y"] is plain["y"]
    assert join_tensors([]) == {}


def test_a_header_read_by_the_loop_keeps_a_dict(tmp_path):
    fixture = b.Fixture({"a.weight": ("BF16", (2, 2)), "b.weight": ("F4", (4,))})  # F4: not whole bytes
    ck = load_checkpoint(str(fixture.write(tmp_path / "m")))
    assert type(ck.tensors) is dict and ck.tensors["b.weight"].nbytes == 2
    header = st.parse_header_bytes(b'{"a":{"dtype":"Q9","shape":[4],"data_offsets":[0,0]}}')
    assert type(header.tensors) is dict and header.tensors["a"].nbytes is None and header.warnings
    assert TensorTable(header.tensors).nbytes() == [None]
