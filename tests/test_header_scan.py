"""The bounded JSON pre-scan on its fast path (no backslash: strings cut by splitting on quotes, in chunks)
agrees with the string-literal regex everywhere, and every bound it enforces still holds on both paths."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from qcheck.errors import InputError
from qcheck.readers import jsonfile
from qcheck.readers.safetensors import parse_header_bytes


def _regex_outside(data: bytes) -> bytes:
    out, pos = bytearray(), 0
    for m in jsonfile._STRING.finditer(data):
        out += data[pos:m.start()]
        pos = m.end()
    return bytes(out + data[pos:])


@pytest.mark.parametrize("chunk", [1, 3, 7, 1 << 20])
def test_plain_scan_equals_the_regex_scan(monkeypatch, chunk):
    monkeypatch.setattr(jsonfile, "_CHUNK", chunk)
    rng = random.Random(chunk)
    for _ in range(3000):
        data = bytes(rng.choice(b'"ab[]{}:, ') for _ in range(rng.randint(0, 40)))
        assert jsonfile._outside_strings(data) == _regex_outside(data), data


def _header(entries: int, extra: str = "") -> bytes:
    body = ",".join(f'"t{i}":{{"dtype":"F16","shape":[2],"data_offsets":[{4 * i},{4 * i + 4}]{extra}}}'
                    for i in range(entries))
    return ("{" + body + "}").encode()


class _NoRegex:
    def finditer(self, data):  # pragma: no cover - reaching it is the failure
        raise AssertionError("the string regex walked a header without escapes")


def test_a_header_without_escapes_never_walks_strings_one_by_one(monkeypatch):
    monkeypatch.setattr(jsonfile, "_STRING", _NoRegex())
    header = parse_header_bytes(_header(5000))
    assert len(header.tensors) == 5000 and header.data_length == 20000


@pytest.mark.parametrize("escaped", [False, True])
def test_bounds_hold_on_both_paths(escaped):
    note = ',"note":"a \\"quoted\\" {[word]}"' if escaped else ',"note":"a {[word]}"'
    assert len(parse_header_bytes(_header(3, note)).tensors) == 3  # brackets in strings do not count
    with pytest.raises(InputError, match="nested deeper than 3 levels"):
        parse_header_bytes(_header(2, note + ',"deep":[[1]]'))
    with pytest.raises(InputError, match="JSON objects, over the limit"):
        parse_json_objects = _header(2, note + ',"o":{}')
        jsonfile.parse_json(parse_json_objects, where="header", max_depth=3, max_objects=2)
    with pytest.raises(InputError, match="duplicate key 't0'"):
        parse_header_bytes(_header(2, note).replace(b'"t1"', b'"t0"'))
    assert json.loads(_header(2, note))  # the fixtures themselves are valid JSON


@pytest.mark.parametrize("seed", range(4))
def test_plain_skeleton_equals_the_exact_scan(seed):
    """Where the C-speed skeleton answers, it is the exact scan's text with all but brackets and colons removed."""
    rng = random.Random(seed)
    answered = 0
    for _ in range(3000):
        data = bytes(rng.choice(b'"ab[]{}:, ') for _ in range(rng.randint(0, 40)))
        fast = jsonfile._plain_skeleton(data)
        if fast is not None:
            answered += 1
            assert fast == _regex_outside(data).translate(None, bytes(b for b in range(256) if b not in b"[]{}:"))
    assert answered > 300  # both paths are exercised


def _entries(rng: random.Random, count: int) -> list[tuple[str, str, list[int], int]]:
    out, offset = [], 0
    for i in range(count):
        dtype = rng.choice(["F16", "BF16", "F32", "U8", "I64", "F8_E4M3", "BOOL"])
        shape = [rng.choice([0, 1, 2, 3]) for _ in range(rng.randint(0, 3))]
        size = {"F16": 2, "BF16": 2, "F32": 4, "U8": 1, "I64": 8, "F8_E4M3": 1, "BOOL": 1}[dtype]
        for d in shape:
            size *= d
        out.append((f"t{i}", dtype, shape, offset))
        offset += size
    return out


def _render(entries, order, mutate=None) -> bytes:
    parts = []
    for i in order:
        name, dtype, shape, begin = entries[i]
        size = {"F16": 2, "BF16": 2, "F32": 4, "U8": 1, "I64": 8, "F8_E4M3": 1, "BOOL": 1}[dtype]
        for d in shape:
            size *= d
        entry = {"dtype": dtype, "shape": shape, "data_offsets": [begin, begin + size]}
        if mutate is not None and i == mutate[0]:
            entry = mutate[1](entry)
        parts.append(json.dumps(name) + ":" + json.dumps(entry, separators=(",", ":")))
    return ("{" + ",".join(parts) + "}").encode()


def _outcome(raw: bytes, monkeypatch, fast: bool | str, limits=None):
    """What parse_header_bytes gives: ``fast`` True (every path on), "columns" (the compact regex path off),
    False (the per-entry loop only)."""
    from qcheck.limits import DEFAULT_LIMITS
    from qcheck.readers import safetensors as st

    if fast is not True:
        monkeypatch.setattr(st, "_compact_header", lambda *a, **k: None)
    if fast is False:
        monkeypatch.setattr(st, "_plain_entries", lambda *a, **k: None)
    try:
        h = st.parse_header_bytes(raw, limits or DEFAULT_LIMITS, name="x.safetensors", file="x.safetensors")
        return ("ok", {k: (v.name, v.dtype, v.shape, v.nbytes, v.offset, v.file) for k, v in h.tensors.items()},
                list(h.tensors), h.data_length, h.warnings, h.metadata, list(h.metadata), h.header_length,
                h.data_offset)
    except InputError as exc:
        return ("error", str(exc))
    finally:
        monkeypatch.undo()


_MUTATIONS = [
    lambda e: {**e, "shape": [True, *e["shape"]]},
    lambda e: {**e, "shape": [*e["shape"], 1.0]},
    lambda e: {**e, "shape": [*e["shape"], -1]},
    lambda e: {**e, "shape": [*e["shape"], 2 ** 70]},
    lambda e: {**e, "shape": "2"},
    lambda e: {**e, "dtype": "F4"},
    lambda e: {**e, "dtype": "Q9"},
    lambda e: {**e, "dtype": 7},
    lambda e: {**e, "extra": 1},
    lambda e: {k: v for k, v in e.items() if k != "shape"},
    lambda e: {**e, "data_offsets": [e["data_offsets"][0], e["data_offsets"][1] + 1]},
    lambda e: {**e, "data_offsets": [e["data_offsets"][0] + 1, e["data_offsets"][1] + 1]},
    lambda e: {**e, "data_offsets": [e["data_offsets"][0], e["data_offsets"][1], 0]},
    lambda e: {**e, "data_offsets": [float(e["data_offsets"][0]), e["data_offsets"][1]]},
    lambda e: {**e, "data_offsets": [0, 2 ** 64]},
    lambda e: [e],
]


@pytest.mark.parametrize("seed", range(6))
def test_column_checks_agree_with_the_entry_loop(seed, monkeypatch):
    """Valid headers in any order (empty tensors tie on offsets) read the same on the column path and the
    per-entry loop; every mutation the loop refuses or warns about gets the same error or warnings."""
    rng = random.Random(seed)
    entries = _entries(rng, rng.randint(1, 30))
    order = list(range(len(entries)))
    for shuffle in (False, True):
        if shuffle:
            rng.shuffle(order)
        raw = _render(entries, order)
        fast = _outcome(raw, monkeypatch, True)
        assert fast[0] == "ok" and fast == _outcome(raw, monkeypatch, "columns") == _outcome(raw, monkeypatch, False)
        for mutation in _MUTATIONS:
            raw = _render(entries, order, (rng.randrange(len(entries)), mutation))
            loop = _outcome(raw, monkeypatch, False)
            assert _outcome(raw, monkeypatch, True) == _outcome(raw, monkeypatch, "columns") == loop, raw


def test_a_plain_header_takes_the_column_path():
    from qcheck.limits import DEFAULT_LIMITS
    from qcheck.readers import safetensors as st

    value = json.loads(_header(50))
    tensors, end = st._plain_entries(value, DEFAULT_LIMITS, 100, "f")
    assert end == 200 and tensors["t3"].offset == 112 and tensors["t3"].shape == (2,) and tensors["t3"].file == "f"
    value["t3"]["shape"] = [True, 2]
    assert st._plain_entries(value, DEFAULT_LIMITS, 100, "f") is None


def _writer_header(rng: random.Random, count: int, metadata: dict[str, str] | None, spaced: bool = False,
                   sorted_keys: bool = False) -> bytes:
    """A header spelled as safetensors' own writer spells it (compact, dtype/shape/data_offsets), or as
    ``json.dumps`` does by default (``spaced``), with the fields sorted as nlohmann::json (MLX) and ``sort_keys``
    write them (``sorted_keys``: data_offsets/dtype/shape), names varied."""
    c, m = (": ", ", ") if spaced else (":", ",")
    parts = [] if metadata is None else [f'"__metadata__"{c}' + json.dumps(metadata, separators=(m, c),
                                                                           ensure_ascii=False)]
    for name, dtype, shape, begin in _entries(rng, count):
        size = {"F16": 2, "BF16": 2, "F32": 4, "U8": 1, "I64": 8, "F8_E4M3": 1, "BOOL": 1}[dtype]
        for d in shape:
            size *= d
        name = rng.choice(["", "model.", "é.", "x y.", "a]},\""]) + name
        kind = f'"dtype"{c}' + json.dumps(dtype) + f'{m}"shape"{c}' + json.dumps(shape, separators=(m, c))
        offsets = f'"data_offsets"{c}[{begin}{m}{begin + size}]'
        fields = f"{offsets}{m}{kind}" if sorted_keys else f"{kind}{m}{offsets}"
        parts.append(json.dumps(name, ensure_ascii=False) + f"{c}{{{fields}}}")
    raw = ("{" + m.join(parts) + "}").encode()
    return raw + b" " * (-len(raw) % 8)


_METADATA = [None, {}, {"format": "pt"}, {"format": "pt", "q": 'a"b\\c é', "u": "\u00e9"}]


def test_the_writer_spelling_takes_the_compact_path(monkeypatch):
    """What safetensors writes (numpy's save: metadata with escapes, a non-ASCII name, an empty tensor) is read
    by the compact path, and reads the same on the column path and the per-entry loop."""
    np = pytest.importorskip("numpy")
    from safetensors.numpy import save

    from qcheck.limits import DEFAULT_LIMITS
    from qcheck.readers import safetensors as st

    data = save({"b.w": np.zeros((2, 3), np.float16), "a": np.zeros((), np.uint8), "é.x": np.zeros((0, 4), np.int64),
                 "c": np.zeros((5,), np.float32)}, metadata={"format": "pt", "q": 'a"b\\c é'})
    n = int.from_bytes(data[:8], "little")
    raw = data[8:8 + n]
    compact = st._compact_header(raw, DEFAULT_LIMITS, "x", 8 + n, "f")
    assert compact is not None and set(compact[0]) == {"b.w", "a", "é.x", "c"} and compact[1] == len(data) - 8 - n
    assert compact[2] == {"format": "pt", "q": 'a"b\\c é'} and compact[0]["é.x"].shape == (0, 4)
    outcome = _outcome(raw, monkeypatch, True)
    assert outcome[0] == "ok" and outcome == _outcome(raw, monkeypatch, "columns") == _outcome(raw, monkeypatch, False)


@pytest.mark.parametrize("seed", range(4))
def test_the_compact_path_agrees_with_the_full_parse_on_damaged_headers(seed, monkeypatch):
    """Writer-spelled headers damaged byte by byte (JSON punctuation, digits, escapes, control characters,
    spaces, cut short): the compact path gives exactly the full path's tensors, metadata, warnings or error."""
    from qcheck.limits import DEFAULT_LIMITS
    from qcheck.readers import safetensors as st

    rng = random.Random(seed)
    alphabet = b'"\\{}[],:0123456789 \t\n-.eEtruAFx\x00\x1f\xc3'
    compact_taken = spaced_taken = sorted_taken = 0
    for _ in range(400):
        spaced, sorted_keys = rng.random() < 0.3, rng.random() < 0.3
        raw = bytearray(_writer_header(rng, rng.randint(1, 6), rng.choice(_METADATA), spaced, sorted_keys))
        for _damage in range(rng.choice([0, 1, 1, 2])):
            if not raw:
                break
            where = rng.randrange(len(raw))
            kind = rng.random()
            if kind < 0.5:
                raw[where] = rng.choice(alphabet)
            elif kind < 0.75:
                raw.insert(where, rng.choice(alphabet))
            elif kind < 0.95:
                del raw[where]
            else:
                del raw[where:]
        data = bytes(raw)
        if not data.startswith(b"{"):
            continue
        fast = _outcome(data, monkeypatch, True)
        assert fast == _outcome(data, monkeypatch, "columns"), data
        taken = st._compact_header(data, DEFAULT_LIMITS, "x", 8, "") is not None
        compact_taken += taken
        spaced_taken += taken and spaced
        sorted_taken += taken and sorted_keys
    # both paths are exercised (escaped names and most damage take the full one), and every spelling
    assert compact_taken > 40 and spaced_taken > 5 and sorted_taken > 5


@pytest.mark.parametrize("limit", ["max_tensors=3", "max_string_bytes=4", "max_dims=1", "max_tensor_elements=5",
                                   "max_kv=1", "max_json_nesting=2"])
def test_the_compact_path_keeps_every_bound(limit, monkeypatch):
    """A tight limit gives the full path's own error (or result) on the compact path too."""
    from qcheck.limits import DEFAULT_LIMITS

    key, value = limit.split("=")
    limits = DEFAULT_LIMITS.replace(**{key: int(value)})
    rng = random.Random(limit)
    refused = 0
    for _ in range(20):
        raw = _writer_header(rng, rng.randint(1, 8), rng.choice(_METADATA[2:]), rng.random() < 0.5,
                             rng.random() < 0.5)
        fast = _outcome(raw, monkeypatch, True, limits)
        assert fast == _outcome(raw, monkeypatch, "columns", limits) == _outcome(raw, monkeypatch, False, limits)
        refused += fast[0] == "error"
    assert refused or key == "max_kv"  # the limit bites (max_kv only widens the header's pair budget)


@pytest.mark.parametrize("dumps", [{"separators": (",", ":")}, {}, {"sort_keys": True, "separators": (",", ":")},
                                   {"sort_keys": True}], ids=["writer", "json.dumps", "nlohmann-mlx", "sort_keys"])
def test_each_spelling_of_the_same_header_reads_the_same_on_the_compact_path(dumps):
    """The spellings real writers use (safetensors' serde_json, json.dumps, and sorted fields as nlohmann::json in
    MLX's writer and sort_keys give) all take the compact path and give the same tensors and metadata."""
    from qcheck.limits import DEFAULT_LIMITS
    from qcheck.readers import safetensors as st

    header = {"__metadata__": {"format": "mlx"}, "model.embed.weight": {"dtype": "BF16", "shape": [8, 4],
              "data_offsets": [0, 64]}, "lm_head.scales": {"dtype": "F32", "shape": [8], "data_offsets": [64, 96]},
              "z": {"dtype": "U8", "shape": [], "data_offsets": [96, 97]}}
    compact = st._compact_header(json.dumps(header, **dumps).encode(), DEFAULT_LIMITS, "x", 8, "f")
    assert compact is not None
    tensors, end, metadata = compact
    assert {k: (v.dtype, v.shape, v.nbytes, v.offset) for k, v in tensors.items()} == {
        "model.embed.weight": ("BF16", (8, 4), 64, 8), "lm_head.scales": ("F32", (8,), 32, 72), "z": ("U8", (), 1, 104)}
    assert end == 97 and metadata == {"format": "mlx"}


def test_paused_gc_restores_the_collector_state():
    import gc

    was = gc.isenabled()
    try:
        for start in (True, False):
            (gc.enable if start else gc.disable)()
            with jsonfile.paused_gc():
                with jsonfile.paused_gc():
                    assert not gc.isenabled()
                assert not gc.isenabled()
            assert gc.isenabled() is start
    finally:
        (gc.enable if was else gc.disable)()


def test_a_header_written_by_mlx_takes_the_compact_path_and_reads_as_safetensors_does():
    """A real file from MLX's writer (tests/data/README.md): sorted fields, offsets out of listed order."""
    from safetensors import safe_open

    from qcheck.limits import DEFAULT_LIMITS
    from qcheck.readers import safetensors as st
    from qcheck.readers.safetensors import read_safetensors_header
    from qcheck.source import LocalFileSource

    path = Path(__file__).parent / "data" / "mlx-0.32.4-written.safetensors"
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert st._compact_header(raw[8:8 + n], DEFAULT_LIMITS, "x", 8 + n, str(path)) is not None
    header = read_safetensors_header(LocalFileSource(str(path)))
    with safe_open(str(path), "numpy") as f:
        expected = {k: (f.get_slice(k).get_dtype(), tuple(f.get_slice(k).get_shape())) for k in f.keys()}  # noqa: SIM118
    assert {k: (v.dtype, v.shape) for k, v in header.tensors.items()} == expected
    assert header.tensors["model.embed_tokens.weight"].offset == 8 + n + 88 and header.metadata == {"format": "mlx"}
