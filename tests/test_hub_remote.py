"""Reading checkpoints on a (fake) Hub: only headers travel, revisions are pinned, shards load concurrently."""

from __future__ import annotations

import itertools
import json
import os

import pytest

from qcheck.hub import resolve_target, resolve_targets
from qcheck.hub.source import FIRST_READ, HubFileSource
from qcheck.readers import load_checkpoint
from support.hubserver import (
    CONFIG,
    TOKEN,
    VirtualFile,
    gguf_bytes,
    llama_tensors,
    safetensors_header,
    sharded_repo,
)

SHARD = 5_000_000_000


def _resolve_paths(hub, repo: str):
    return [r for r in hub.requests(rf"^/{repo}/resolve/")]


def test_sharded_safetensors_reads_one_header_range_per_shard(hub):
    sha = hub.add_repo("org/tiny", sharded_repo(3))
    ck = load_checkpoint("org/tiny")
    assert ck.container == "safetensors"
    assert len(ck.tensors) == 3 * 2 * 9
    assert ck.revision == sha
    assert ck.configs["config.json"]["num_hidden_layers"] == 6
    api = hub.requests(r"^/api/models/org/tiny")
    assert len(api) == 1 and "blobs=true" in api[0].query
    for i in range(1, 4):
        shard = hub.requests(rf"/resolve/.*/model-{i:05d}-of-00003\.safetensors$")
        assert len(shard) == 1, shard
        assert shard[0].range == "bytes=0-100000" and shard[0].status == 206
        assert shard[0].sent == FIRST_READ  # header-sized, never the ~0.9 GB of weights
    # every file read is pinned to the commit the listing resolved, not to "main"
    assert all(f"/resolve/{sha}/" in r.path for r in _resolve_paths(hub, "org/tiny"))
    assert hub.bytes_sent(r"/resolve/") < 400_000
    assert sum(f.size_bytes or 0 for f in ck.files) > 2 * 10**9  # GBs listed, 0.3 MB read


def test_large_safetensors_header_takes_exactly_two_requests(hub):
    tensors = {f"model.layers.{i}.mlp.experts.{j}.down_proj.weight": ("BF16", [64, 64])
               for i in range(40) for j in range(64)}
    head, size = safetensors_header(tensors)
    assert len(head) > 2 * FIRST_READ
    hub.add_repo("org/moe", {"config.json": json.dumps(CONFIG).encode(),
                             "model.safetensors": VirtualFile(head, size)})
    ck = load_checkpoint("org/moe")
    assert len(ck.tensors) == 40 * 64
    reqs = hub.requests(r"/model\.safetensors$")
    assert [r.range for r in reqs] == ["bytes=0-100000", f"bytes=100001-{len(head) - 1}"]
    assert sum(r.sent for r in reqs) == len(head)


def test_gguf_header_grows_geometrically_and_stops_at_tensor_data(hub, tmp_path):
    data = gguf_bytes(str(tmp_path / "m.gguf"), n_tokens_pad=60_000)
    header_end = data.index(b"\0" * 64, 1000)  # the tokens array ends well before the (zero-padded) data
    hub.add_repo("org/m-GGUF", {"m-Q8_0.gguf": VirtualFile(data, SHARD), "m-Q4_K_M.gguf": VirtualFile(data, SHARD)})
    ck = load_checkpoint("org/m-GGUF:Q8_0")
    assert ck.container == "gguf" and len(ck.tensors) == 4
    reqs = hub.requests(r"/m-Q8_0\.gguf$")
    sizes = [r.sent for r in reqs]
    assert sizes[0] == FIRST_READ
    assert all(b >= a for a, b in itertools.pairwise(sizes[1:-1]))  # growing reads (the reader doubles its chunks)
    assert len(reqs) <= 8
    assert sum(sizes) <= 2 * header_end + FIRST_READ  # at most ~2x what the header needs
    assert sum(sizes) < SHARD / 1000
    assert not hub.requests(r"/m-Q4_K_M\.gguf$")  # the other quant is never touched


def test_revisions_resolve_to_commits_and_stay_pinned(hub):
    old = hub.add_repo("org/rev", sharded_repo(1))
    hub.add_repo("org/rev", sharded_repo(1), branch="v1")
    new = hub.add_repo("org/rev", sharded_repo(2))
    assert load_checkpoint("org/rev").revision == new
    ck = load_checkpoint(f"org/rev@{old}")
    assert ck.revision == old and len(ck.tensors) == 18
    v1 = hub.repos["org/rev"].refs["v1"]
    ck = load_checkpoint("org/rev@v1")
    assert ck.revision == v1
    assert hub.requests(r"^/api/models/org/rev/revision/v1$")
    assert all(f"/resolve/{v1}/" in r.path for r in hub.log if r.path.startswith("/org/rev/resolve/")
               and r in hub.log[-4:])


def test_split_gguf_in_a_subfolder_is_picked_by_quant(hub, tmp_path):
    s1 = gguf_bytes(str(tmp_path / "a.gguf"), split=(0, 2), layers=2, first_layer=0, split_tensors=8)
    s2 = gguf_bytes(str(tmp_path / "b.gguf"), split=(1, 2), layers=2, first_layer=2, split_tensors=8)
    hub.add_repo("org/split-GGUF", {"Q8_0/m-Q8_0-00001-of-00002.gguf": s1, "Q8_0/m-Q8_0-00002-of-00002.gguf": s2,
                                    "m-Q4_0.gguf": s1})
    _fs, names = resolve_target("org/split-GGUF:q8_0")
    assert names == ["Q8_0/m-Q8_0-00001-of-00002.gguf", "Q8_0/m-Q8_0-00002-of-00002.gguf"]
    ck = load_checkpoint("org/split-GGUF:Q8_0")
    assert len(ck.tensors) == 8
    assert {t.file for t in ck.tensors.values()} == set(names)
    both = resolve_targets("org/split-GGUF", all_models=True)
    assert sorted(len(n or []) for _, n in both) == [1, 2]


def test_shard_headers_are_fetched_concurrently(hub):
    hub.latency = 0.05
    hub.add_repo("org/many", sharded_repo(12))
    ck = load_checkpoint("org/many")
    assert len(ck.tensors) == 12 * 18
    assert hub.max_in_flight >= 6  # many shard reads were in the air at once, not one round trip per shard
    assert len(hub.requests(r"\.safetensors$")) == 12


def test_cdn_redirect_drops_the_token_and_is_reused(hub, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.redirect_lfs = True
    data = gguf_bytes(str(tmp_path / "m.gguf"), n_tokens_pad=30_000)
    hub.add_repo("org/cdn-GGUF", {"m-Q8_0.gguf": VirtualFile(data, SHARD)})
    ck = load_checkpoint("org/cdn-GGUF")
    assert ck.container == "gguf"
    hub_reqs = hub.requests(r"^/org/cdn-GGUF/resolve/")
    cdn_reqs = hub.requests(r"^/cdn/")
    assert len(hub_reqs) == 1 and hub_reqs[0].status == 302 and hub_reqs[0].auth
    assert len(cdn_reqs) >= 2 and not any(r.auth for r in cdn_reqs)  # the token never leaves the Hub
    api = hub.requests(r"^/api/models/org/cdn-GGUF")
    assert api[0].auth


def test_expired_cdn_url_goes_back_through_the_hub(hub, tmp_path):
    hub.redirect_lfs = True
    data = gguf_bytes(str(tmp_path / "m.gguf"), n_tokens_pad=30_000)
    hub.add_repo("org/exp-GGUF", {"m-Q8_0.gguf": VirtualFile(data, SHARD)})
    fs, names = resolve_target("org/exp-GGUF")
    src = fs.open(names[0])
    assert isinstance(src, HubFileSource)
    assert src.read_at(0, 4) == b"GGUF"
    hub.inject(r"^/cdn/", 403, times=1)
    assert src.read_at(150_000, 16) == data[150_000:150_016]
    assert len(hub.requests(r"^/org/exp-GGUF/resolve/")) == 2


def test_server_ignoring_range_is_cut_short_or_refused(hub, tmp_path):
    hub.ignore_range = True
    hub.add_repo("org/norange", sharded_repo(1))
    fs, _ = resolve_target("org/norange")
    src = fs.open("model-00001-of-00001.safetensors")
    head = src.read_at(0, 8)
    assert len(head) == 8
    assert fs.stats()["model-00001-of-00001.safetensors"]["bytes"] <= FIRST_READ
    from qcheck.errors import RemoteError

    with pytest.raises(RemoteError, match="ignored the Range header"):
        src.read_at(10_000_000, 10)


def test_offline_mode_reads_the_local_cache_without_network(hub, monkeypatch, tmp_path):
    cache = tmp_path / "hf-cache"
    sha = "0123456789abcdef0123456789abcdef01234567"
    snap = cache / "models--org--cached" / "snapshots" / sha
    snap.mkdir(parents=True)
    (cache / "models--org--cached" / "refs").mkdir()
    (cache / "models--org--cached" / "refs" / "main").write_text(sha)
    head, size = safetensors_header(llama_tensors(1))
    (snap / "model.safetensors").write_bytes(head + b"\0" * (size - len(head)))
    (snap / "config.json").write_text(json.dumps(CONFIG))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ck = load_checkpoint("org/cached")
    assert ck.revision == sha and len(ck.tensors) == 9
    assert not [r for r in hub.log if "org/cached" in r.path]
    from qcheck.errors import RemoteError

    with pytest.raises(RemoteError, match=r"HF_HUB_OFFLINE is set and org/absent@main is not in the local"):
        load_checkpoint("org/absent")


def test_online_reads_files_already_in_the_cache_from_disk(hub, tmp_path):
    files = sharded_repo(2)
    sha = hub.add_repo("org/warm", files)
    snap = tmp_path / "hf-cache" / "models--org--warm" / "snapshots" / sha
    snap.mkdir(parents=True)
    vf = files["model-00001-of-00002.safetensors"]
    assert isinstance(vf, VirtualFile)
    with open(snap / "model-00001-of-00002.safetensors", "wb") as f:  # a sparse full-size copy
        f.write(vf.head)
        f.truncate(vf.size)
    ck = load_checkpoint("org/warm")
    assert len(ck.tensors) == 36
    assert not hub.requests(r"model-00001-of-00002\.safetensors$")
    assert len(hub.requests(r"model-00002-of-00002\.safetensors$")) == 1
    os.remove(snap / "model-00001-of-00002.safetensors")


def test_small_sequential_reads_get_a_doubling_read_ahead(hub):
    hub.add_repo("org/seq", sharded_repo(1))
    fs, _ = resolve_target("org/seq")
    src = fs.open("model-00001-of-00001.safetensors")
    assert isinstance(src, HubFileSource)
    pos = 0
    while pos < 1_200_000:
        assert len(src.read_at(pos, 1000)) == 1000
        pos += 1000
    sizes = [r.sent for r in hub.requests(r"model-00001-of-00001\.safetensors$")]
    assert sizes[:4] == [FIRST_READ, 2 * FIRST_READ, 4 * FIRST_READ, 8 * FIRST_READ]
    assert len(sizes) == 4  # 1.2 MB of 1 kB reads: four requests, not 1200


def test_range_past_the_end_of_a_file_of_unknown_size_reads_empty(hub):
    sha = hub.add_repo("org/nosize", sharded_repo(1))
    fs, _ = resolve_target("org/nosize")
    name = "model-00001-of-00001.safetensors"
    size = fs.files[name]
    src = HubFileSource(fs.client, repo_id="org/nosize", revision=sha, filename=name, url=fs.url(name), size=None)
    assert src.read_at(size + 10, 100) == b""  # the server's 416 is an end of file, not an error
    assert src.size == size  # learnt from Content-Range: bytes */SIZE
    assert len(src.read_at(size - 5, 100)) == 5


def test_a_range_answered_from_the_wrong_offset_is_refused(hub):
    from qcheck.errors import RemoteError

    hub.add_repo("org/shift", sharded_repo(1))
    hub.shift_ranges = 10
    with pytest.raises(RemoteError, match=r"answered range 0-100000 with Content-Range 'bytes 10-100010/"):
        load_checkpoint("org/shift")


def test_read_at_returns_exactly_the_file_bytes_for_any_read_pattern(hub):
    """Property: whatever the order, size and overlap of reads, HubFileSource returns the file's own bytes."""
    import random

    from hypothesis import given, settings
    from hypothesis import strategies as st

    rng = random.Random(7)
    data = bytes(rng.getrandbits(8) for _ in range(700_000))
    sha = hub.add_repo("org/rand", {"blob.gguf": data})
    fs, _ = resolve_target("org/rand:blob.gguf")
    url, size = fs.url("blob.gguf"), fs.files["blob.gguf"]

    reads = st.lists(st.tuples(st.integers(0, 720_000), st.integers(0, 300_000)), min_size=1, max_size=6)

    @settings(max_examples=40, deadline=None)
    @given(reads, st.booleans())
    def check(pattern, known_size):
        src = HubFileSource(fs.client, repo_id="org/rand", revision=sha, filename="blob.gguf", url=url,
                            size=size if known_size else None)
        for offset, length in pattern:
            assert src.read_at(offset, length) == data[offset:offset + length]
        assert src.fetched_bytes <= sum(max(n, 300_000) for _, n in pattern) + 200_002

    check()


def test_offline_cache_with_gguf_quants_in_sub_folders(hub, monkeypatch, tmp_path):
    sha = "89abcdef0123456789abcdef0123456789abcdef"
    repo = tmp_path / "hf-cache" / "models--org--cached-GGUF"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(sha)
    snap = repo / "snapshots" / sha
    (snap / "Q8_0").mkdir(parents=True)
    data = gguf_bytes(str(tmp_path / "m.gguf"))
    (snap / "Q8_0" / "m-Q8_0.gguf").write_bytes(data)
    (snap / "m-Q4_0.gguf").write_bytes(data)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fs, names = resolve_target("org/cached-GGUF:q8_0")
    assert names == ["Q8_0/m-Q8_0.gguf"] and fs.revision == sha
    assert load_checkpoint("org/cached-GGUF:Q4_0").container == "gguf"
    assert not hub.log
