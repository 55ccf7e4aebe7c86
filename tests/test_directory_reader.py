"""Model directories: side files, index checks, shards, GGUF and pickle directories, the entry point."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from qcheck.errors import InputError
from qcheck.limits import Limits
from qcheck.readers import load_checkpoint, load_from_fileset, looks_like_repo_id
from qcheck.readers.directory import gguf_groups
from qcheck.source import FileEntry, LocalFileSet
from support.gguf_helpers import Q, write_gguf
from support.hubserver import sharded_repo


def write_json(path: Path, obj: object) -> None:
    path.write_text(json.dumps(obj))


def sharded_model(root: Path, *, index: dict | None = None, total_size: int | None = None) -> Path:
    """A two-shard FP8-style model directory written with the safetensors library."""
    root.mkdir(parents=True, exist_ok=True)
    shard1 = {"model.embed_tokens.weight": torch.zeros(32, 16, dtype=torch.bfloat16),
              "model.layers.0.self_attn.q_proj.weight": torch.zeros(16, 16).to(torch.float8_e4m3fn),
              "model.layers.0.self_attn.q_proj.weight_scale": torch.ones(16, 1)}
    shard2 = {"model.norm.weight": torch.ones(16, dtype=torch.bfloat16),
              "lm_head.weight": torch.zeros(32, 16, dtype=torch.bfloat16)}
    save_file(shard1, str(root / "model-00001-of-00002.safetensors"), metadata={"format": "pt"})
    save_file(shard2, str(root / "model-00002-of-00002.safetensors"), metadata={"format": "pt"})
    weight_map = {name: "model-00001-of-00002.safetensors" for name in shard1}
    weight_map.update({name: "model-00002-of-00002.safetensors" for name in shard2})
    nbytes = sum(t.numel() * t.element_size() for t in [*shard1.values(), *shard2.values()])
    write_json(root / "model.safetensors.index.json", index or {
        "metadata": {"total_size": nbytes if total_size is None else total_size}, "weight_map": weight_map})
    write_json(root / "config.json", {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                      "quantization_config": {"quant_method": "compressed-tensors",
                                                              "config_groups": {"group_0": {
                                                                  "weights": {"num_bits": 8, "type": "float"},
                                                                  "targets": ["Linear"]}}}})
    write_json(root / "hf_quant_config.json", {"producer": {"name": "modelopt"},
                                               "quantization": {"quant_algo": "FP8"}})
    write_json(root / "generation_config.json", {"do_sample": True})
    return root


def index_of(root: Path) -> dict:
    return json.loads((root / "model.safetensors.index.json").read_text())


def test_sharded_directory(tmp_path):
    root = sharded_model(tmp_path / "m")
    ck = load_checkpoint(str(root))
    assert ck.container == "safetensors"
    assert ck.path == str(root)
    assert len(ck.tensors) == 5
    assert ck.tensors["lm_head.weight"].file == "model-00002-of-00002.safetensors"
    assert ck.tensors["model.layers.0.self_attn.q_proj.weight"].dtype == "F8_E4M3"
    assert set(ck.configs) == {"config.json", "hf_quant_config.json", "model.safetensors.index.json"}
    assert ck.configs["hf_quant_config.json"]["quantization"]["quant_algo"] == "FP8"
    assert ck.metadata == {"format": "pt"}
    kinds = sorted((f.name, f.kind) for f in ck.files)
    assert kinds == [("config.json", "config"), ("hf_quant_config.json", "config"),
                     ("model-00001-of-00002.safetensors", "safetensors"),
                     ("model-00002-of-00002.safetensors", "safetensors"),
                     ("model.safetensors.index.json", "index")]
    assert ck.size_bytes == sum(p.stat().st_size for p in root.glob("*.safetensors"))
    assert ck.warnings == []


def test_index_missing_shard(tmp_path):
    root = sharded_model(tmp_path / "m")
    (root / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(InputError, match=r"weight_map names shard 'model-00002-of-00002.safetensors' .* missing"):
        load_checkpoint(str(root))


def test_index_names_tensor_its_shard_lacks(tmp_path):
    root = sharded_model(tmp_path / "m")
    index = index_of(root)
    index["weight_map"]["lm_head.weight"] = "model-00001-of-00002.safetensors"
    write_json(root / "model.safetensors.index.json", index)
    with pytest.raises(InputError, match=r"maps tensor 'lm_head.weight' to model-00001-of-00002.safetensors, "
                                         r"which does not contain it \(it is in model-00002-of-00002"):
        load_checkpoint(str(root))


def test_index_names_tensor_no_shard_has(tmp_path):
    root = sharded_model(tmp_path / "m")
    index = index_of(root)
    index["weight_map"]["ghost.weight"] = "model-00001-of-00002.safetensors"
    write_json(root / "model.safetensors.index.json", index)
    with pytest.raises(InputError, match=r"'ghost.weight'.*does not contain it$"):
        load_checkpoint(str(root))


def test_shard_tensor_missing_from_index_is_a_warning(tmp_path):
    root = sharded_model(tmp_path / "m")
    index = index_of(root)
    del index["weight_map"]["model.norm.weight"]
    write_json(root / "model.safetensors.index.json", index)
    ck = load_checkpoint(str(root))
    assert "model.norm.weight" in ck.tensors
    assert any("1 tensor(s) in the shards are not in model.safetensors.index.json" in w
               and "'model.norm.weight'" in w for w in ck.warnings)


@pytest.mark.parametrize("evil", ["../outside.safetensors", "/etc/passwd", "sub/../../outside.safetensors",
                                  "..\\outside.safetensors", "C:/outside.safetensors", "./model.safetensors", ""])
def test_index_path_traversal(tmp_path, evil):
    root = sharded_model(tmp_path / "m")
    save_file({"lm_head.weight": torch.zeros(32, 16, dtype=torch.bfloat16)}, str(tmp_path / "outside.safetensors"))
    index = index_of(root)
    index["weight_map"]["lm_head.weight"] = evil
    write_json(root / "model.safetensors.index.json", index)
    with pytest.raises(InputError, match=r"weight_map path .* \(tensor 'lm_head.weight'\) escapes the model directory"):
        load_checkpoint(str(root))


def test_index_without_weight_map(tmp_path):
    root = sharded_model(tmp_path / "m", index={"metadata": {"total_size": 1}})
    with pytest.raises(InputError, match=r"model.safetensors.index.json: index has no weight_map"):
        load_checkpoint(str(root))


def test_total_size_mismatch_is_a_warning(tmp_path):
    root = sharded_model(tmp_path / "m", total_size=12345)
    ck = load_checkpoint(str(root))
    assert any("metadata.total_size is 12345 bytes but the shards hold" in w for w in ck.warnings)


def test_unlisted_safetensors_file_is_not_read(tmp_path):
    root = sharded_model(tmp_path / "m")
    save_file({"other": torch.zeros(3)}, str(root / "consolidated.safetensors"))
    ck = load_checkpoint(str(root))
    assert "other" not in ck.tensors
    assert any("consolidated.safetensors" in w and "not in model.safetensors.index.json" in w for w in ck.warnings)


def test_no_index_reads_every_shard_and_refuses_duplicates(tmp_path):
    root = tmp_path / "m"
    root.mkdir()
    save_file({"a": torch.zeros(2)}, str(root / "part1.safetensors"))
    save_file({"b": torch.zeros(3)}, str(root / "part2.safetensors"))
    ck = load_checkpoint(str(root))
    assert {n: t.file for n, t in ck.tensors.items()} == {"a": "part1.safetensors", "b": "part2.safetensors"}
    save_file({"a": torch.zeros(2)}, str(root / "part3.safetensors"))
    with pytest.raises(InputError, match=r"tensor 'a' is in both part1.safetensors and part3.safetensors"):
        load_checkpoint(str(root))


def test_broken_shard_error_names_the_shard(tmp_path):
    root = sharded_model(tmp_path / "m")
    shard = root / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes() + b"appended")
    with pytest.raises(InputError, match=r"model-00002-of-00002.safetensors: 8 bytes after the last tensor"):
        load_checkpoint(str(root))


@pytest.mark.parametrize(("text", "pattern"), [
    ('{"model_type": "llama",}', r"config.json: invalid JSON"),
    ('{"a": 1, "a": 2}', r"config.json: duplicate key 'a'"),
    ('[1, 2]', r"config.json: expected a JSON object, found an array"),
    ('{"a": 1} {"b": 2}', r"config.json: extra data after the JSON value"),
    ('{"a": "\\udc00"}', r"config.json: lone UTF-16 surrogate"),
    ('{"a": ' + "[" * 40 + "]" * 40 + "}", r"config.json: JSON nested deeper than 32 levels"),
])
def test_bad_config_is_an_error_naming_the_file(tmp_path, text, pattern):
    root = sharded_model(tmp_path / "m")
    (root / "config.json").write_text(text)
    with pytest.raises(InputError, match=pattern):
        load_checkpoint(str(root))


def test_config_non_utf8_and_oversize(tmp_path):
    root = sharded_model(tmp_path / "m")
    (root / "config.json").write_bytes(b'{"a": "\xff"}')
    with pytest.raises(InputError, match=r"config.json: not valid UTF-8 at byte 7"):
        load_checkpoint(str(root))
    (root / "config.json").write_text(json.dumps({"pad": "x" * 5000}))
    with pytest.raises(InputError, match=r"config.json: file is 5011 bytes, over the 4096-byte limit"):
        load_checkpoint(str(root), Limits(max_json_bytes=4096))


def test_deeply_nested_real_world_config_and_bom(tmp_path):
    root = sharded_model(tmp_path / "m")
    config = {"text_config": {"quantization_config": {"transform_config": {"config_groups": {"u": {
        "apply": [{"targets": ["Linear"], "location": "weight"}]}}}}}}
    (root / "config.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(config).encode())
    ck = load_checkpoint(str(root))
    groups = ck.configs["config.json"]["text_config"]["quantization_config"]["transform_config"]["config_groups"]
    assert groups["u"]["apply"][0]["targets"] == ["Linear"]


def test_directory_with_one_gguf(tmp_path):
    write_gguf(tmp_path / "model-Q8_0.gguf", [("token_embd.weight", (8, 32), Q.Q8_0)], file_type=7)
    ck = load_checkpoint(str(tmp_path))
    assert ck.container == "gguf"
    assert ck.path == str(tmp_path)
    assert ck.tensors["token_embd.weight"].dtype == "Q8_0"


def test_directory_with_one_split_gguf_set(tmp_path):
    paths = write_gguf(tmp_path / "model.gguf", [("a.weight", (4, 32), Q.F32), ("b.weight", (4, 32), Q.F32)],
                       split_max_tensors=1)
    assert len(paths) == 2
    ck = load_checkpoint(str(tmp_path))
    assert ck.container == "gguf"
    assert {t.file for t in ck.tensors.values()} == {p.name for p in paths}


def test_directory_with_several_ggufs_lists_them(tmp_path):
    write_gguf(tmp_path / "model-Q8_0.gguf", [("w", (4, 32), Q.F32)])
    write_gguf(tmp_path / "model-F16.gguf", [("w", (4, 32), Q.F32)])
    with pytest.raises(InputError, match=r"2 GGUF checkpoints here: model-F16.gguf; model-Q8_0.gguf; pass one file"):
        load_checkpoint(str(tmp_path))


def test_gguf_groups():
    names = ["a-00002-of-00003.gguf", "a-00001-of-00003.gguf", "a-00003-of-00003.gguf", "b.gguf",
             "c-00001-of-00002.gguf"]
    assert gguf_groups(names) == {"a-of-00003": ["a-00001-of-00003.gguf", "a-00002-of-00003.gguf",
                                                 "a-00003-of-00003.gguf"],
                                  "b.gguf": ["b.gguf"], "c-of-00002": ["c-00001-of-00002.gguf"]}


def test_pickle_only_directory(tmp_path):
    torch.save({"w": torch.zeros(2, 2)}, tmp_path / "pytorch_model.bin")
    write_json(tmp_path / "config.json", {"model_type": "gpt2"})
    ck = load_checkpoint(str(tmp_path))
    assert ck.container == "pickle"
    assert ck.tensors == {}
    assert "torch._utils._rebuild_tensor_v2" in ck.pickle_globals
    assert ck.warnings[0] == "pickle checkpoint: not statically verifiable, never unpickled"
    assert ck.configs["config.json"] == {"model_type": "gpt2"}
    assert sorted((f.name, f.kind) for f in ck.files) == [("config.json", "config"), ("pytorch_model.bin", "pickle")]


def test_mixed_safetensors_and_pickles_uses_safetensors(tmp_path):
    root = sharded_model(tmp_path / "m")
    torch.save({"w": torch.zeros(2)}, root / "pytorch_model.bin")
    torch.save({"lr": 0.1}, root / "training_args.bin")
    ck = load_checkpoint(str(root))
    assert ck.container == "safetensors"
    assert any(w.startswith("pickle files present") and "pytorch_model.bin" in w and "training_args.bin" in w
               for w in ck.warnings)


def test_empty_directory_and_subfolder_hint(tmp_path):
    with pytest.raises(InputError, match=r"no checkpoint here"):
        load_checkpoint(str(tmp_path))
    (tmp_path / "q4").mkdir()
    write_gguf(tmp_path / "q4" / "m.gguf", [("w", (4, 32), Q.F32)])

    class Listing(LocalFileSet):  # a Hub-style listing that includes sub-folders
        def list(self):
            return [FileEntry("q4/m.gguf", 1)]

    with pytest.raises(InputError, match=r"files in subfolders: q4/m.gguf"):
        load_from_fileset(Listing(tmp_path), None)


def test_file_in_subfolder_reads_side_files_beside_it(tmp_path):
    sub = tmp_path / "fp8"
    sub.mkdir()
    save_file({"w": torch.zeros(2)}, str(sub / "model.safetensors"))
    write_json(sub / "config.json", {"model_type": "qwen2"})
    write_json(tmp_path / "config.json", {"model_type": "wrong"})
    ck = load_from_fileset(LocalFileSet(tmp_path), ["fp8/model.safetensors"], path="org/name:fp8/model.safetensors")
    assert ck.path == "org/name:fp8/model.safetensors"
    assert ck.configs["config.json"] == {"model_type": "qwen2"}
    assert ck.tensors["w"].file == "fp8/model.safetensors"


def test_single_shard_of_a_sharded_model_warns(tmp_path):
    root = sharded_model(tmp_path / "m")
    ck = load_checkpoint(str(root / "model-00001-of-00002.safetensors"))
    assert len(ck.tensors) == 3
    assert "config.json" in ck.configs
    assert any("model.safetensors.index.json lists the shards of a larger model" in w for w in ck.warnings)


def test_a_nested_shard_names_its_own_index_and_its_index_or_config_alone_are_read_as_such(tmp_path):
    sharded_model(tmp_path / "a" / "b")
    shard, index = "a/b/model-00001-of-00002.safetensors", "a/b/model.safetensors.index.json"
    ck = load_from_fileset(LocalFileSet(tmp_path), [shard], path="x")
    assert [w for w in ck.warnings if "lists the shards" in w] == [
        f"{index} lists the shards of a larger model; only {shard} was read (pass the directory for the whole model)"]
    with_index = load_from_fileset(LocalFileSet(tmp_path), [shard, index], path="x")
    assert not any("lists the shards" in w for w in with_index.warnings)
    whole = load_from_fileset(LocalFileSet(tmp_path), ["a/b/config.json", index], path="x")  # the index alone
    assert len(whole.tensors) == 5
    with pytest.raises(InputError, match=r"a/b/config\.json: a JSON side file is not a checkpoint"):
        load_from_fileset(LocalFileSet(tmp_path), ["a/b/config.json"], path="x")


def test_files_of_two_formats_given_together_are_refused_by_name(tmp_path):
    write_gguf(tmp_path / "m.gguf", [("token_embd.weight", (32, 16), Q.F32)])
    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    with pytest.raises(InputError, match=r"files of different formats given together \(gguf: m.gguf; "
                                         r"safetensors: model.safetensors\)"):
        load_from_fileset(LocalFileSet(tmp_path), ["m.gguf", "model.safetensors"], path="x")


class MemoryFileSet:
    """A FileSet that is not a local directory: what a Hub repo looks like to the readers."""

    def __init__(self, files: dict[str, bytes]):
        self.files = files
        self.root = "org/model@main"
        self.revision = "0123456789abcdef0123456789abcdef01234567"
        self.opened: list[str] = []

    def list(self):
        return [FileEntry(n, len(d)) for n, d in sorted(self.files.items()) if "/" not in n]

    def exists(self, name):
        return name in self.files

    def open(self, name):
        self.opened.append(name)
        data = self.files[name]

        class Src:
            size = len(data)

            def read_at(self, offset, length):
                return data[offset:offset + length]

            def close(self):
                pass

        src = Src()
        src.name = f"{self.root}:{name}"
        return src

    def read_small(self, name, max_bytes):
        return self.files[name][: max_bytes + 1]


def test_load_from_a_non_local_fileset(tmp_path):
    root = sharded_model(tmp_path / "m")
    files = {p.name: p.read_bytes() for p in root.iterdir()}
    fs = MemoryFileSet(files)
    ck = load_from_fileset(fs, None, path="org/model")
    assert ck.path == "org/model"
    assert ck.revision == fs.revision
    assert len(ck.tensors) == 5
    assert sorted(set(fs.opened)) == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


def test_missing_paths(tmp_path):
    with pytest.raises(InputError, match=r"no such file or directory"):
        load_checkpoint(str(tmp_path / "nope.gguf"))
    with pytest.raises(InputError, match=r"nope/model.gguf: no such file or directory"):
        load_checkpoint("nope/model.gguf")
    with pytest.raises(InputError, match=r"empty path"):
        load_checkpoint("")


def test_special_file_is_refused(tmp_path):
    import os

    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match=r"not a regular file"):
        load_checkpoint(str(fifo))


@pytest.mark.parametrize(("target", "expected"), [
    ("meta-llama/Llama-3.1-8B", True), ("org/name@main", True), ("org/name:model-Q4_K_M.gguf", True),
    ("org/name@refs/pr/1:sub/x.gguf", True), ("org/model.gguf", False), ("./org/name", False),
    ("/abs/path", False), ("name", False), ("a/b/c", False), ("org/name@v1", True),
    ("https://huggingface.co/org/name/blob/main/x.gguf", True), ("hf://org/name", True),
])
def test_looks_like_repo_id(target, expected):
    assert looks_like_repo_id(target) is expected


def test_load_json_bounds(tmp_path):
    from qcheck.readers.jsonfile import load_json, structure_scan

    fs = LocalFileSet(tmp_path)
    (tmp_path / "a.json").write_text(json.dumps({"s": "[[[[[[[[[[{{{{{{\\\"]]]]", "l": [[[1]]]}))
    assert load_json(fs, "a.json", Limits(max_json_nesting=4))["l"] == [[[1]]]  # brackets in strings don't count
    with pytest.raises(InputError, match=r"a.json: JSON nested deeper than 3 levels"):
        load_json(fs, "a.json", Limits(max_json_nesting=3))
    assert structure_scan(b'{"a": [1, {"b": []}], "c": "}}}"}', 10) == (4, 2)
    (tmp_path / "b.json").write_text('{"x": NaN, "y": 1e999}')  # Python-written configs may hold these
    assert load_json(fs, "b.json", Limits())["y"] == float("inf")
    with pytest.raises(InputError, match=r"c.json: no such file"):
        load_json(fs, "c.json", Limits())


def test_hub_repo_through_the_entry_point(hub):
    """A repo id and a pasted Hub URL go through load_checkpoint to the same FileSet logic as a directory."""
    sha = hub.add_repo("org/tiny", sharded_repo(2, hidden=64, inter=128))
    for target in ("org/tiny", "https://huggingface.co/org/tiny"):
        ck = load_checkpoint(target)
        assert ck.path == target
        assert ck.revision == sha
        assert ck.container == "safetensors" and len(ck.tensors) == 2 * 2 * 9
        assert ck.configs["config.json"]["num_hidden_layers"] == 6


def test_hub_repo_with_escaping_index_is_refused(hub):
    files = sharded_repo(2, hidden=64, inter=128)
    index = json.loads(files["model.safetensors.index.json"])
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = "../../other-org/model/resolve/main/model.safetensors"
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    hub.add_repo("org/evil", files)
    with pytest.raises(InputError, match=r"org/evil.*escapes the model directory"):
        load_checkpoint("org/evil")
    assert not hub.requests(r"other-org")


def test_the_package_hands_out_its_lazy_names_and_no_others():
    import qcheck.readers as readers
    from qcheck.hub.target import looks_like_repo_id as hub_rule
    from qcheck.readers.directory import read_side_files

    assert readers.read_side_files is read_side_files and readers.looks_like_repo_id is hub_rule
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        readers.nothing  # noqa: B018


def test_several_gguf_models_are_read_one_by_one_only_when_asked(tmp_path):
    from qcheck.readers import load_checkpoints

    for name in ("a.gguf", "b.gguf"):
        write_gguf(tmp_path / name, [("token_embd.weight", (32, 16), Q.F32)])
    assert [c.path for c in load_checkpoints(str(tmp_path), all_models=True)] == [
        str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf")]
    with pytest.raises(InputError, match=r"2 GGUF checkpoints here: a\.gguf; b\.gguf"):
        load_checkpoints(str(tmp_path))  # the default is one model
    # a safetensors model beside them wins, as without all_models
    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    write_json(tmp_path / "config.json", {"model_type": "llama"})
    [one] = load_checkpoints(str(tmp_path), all_models=True)
    assert (one.path, one.container) == (str(tmp_path), "safetensors")


@pytest.mark.parametrize("target, suffix", [
    ("./nope", ""), ("/nope/at/all", ""), ("nope.gguf", ""), ("org/model.gguf", ""),
    ("org/na..me", " (nor a Hub repo id: '--' and '..' are not allowed in a repo id)")])
def test_a_missing_path_says_why_it_is_no_repo_id_only_when_it_looks_like_one(tmp_path, monkeypatch, target, suffix):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError) as info:
        load_checkpoint(target)
    assert str(info.value) == f"{target}: no such file or directory{suffix}"


def test_a_sharded_model_at_exactly_its_limits_is_read_and_one_below_is_refused(tmp_path):
    """max_shards, max_tensors and max_json_bytes each equal to what the model has: read; one less: refused."""
    root = sharded_model(tmp_path / "m")
    biggest = max(root.glob("*.json"), key=lambda p: p.stat().st_size)
    json_bytes = biggest.stat().st_size
    at = Limits(max_shards=2, max_tensors=5, max_json_bytes=json_bytes)
    assert len(load_checkpoint(str(root), at).tensors) == 5
    for over, message in ((Limits(max_shards=1), "weight_map names more than 1 shards"),
                          (Limits(max_tensors=4), "weight_map lists 5 tensors, over the limit of 4"),
                          (Limits(max_json_bytes=json_bytes - 1),
                           f"over the {json_bytes - 1}-byte limit for side files")):
        with pytest.raises(InputError, match=re.escape(message)):
            load_checkpoint(str(root), over)
